"""rlvr: reinforcement learning with verifiable rewards for language models.

Build environments, evaluate any model in them, generate SFT data, train with GRPO-family
algorithms. The core (this package without extras) needs no torch.
"""

from rlvr.check import check_env
from rlvr.clients import ChatClient, Policy
from rlvr.envs import MultiTurnEnv, SingleTurnEnv, StatefulToolEnv, ToolEnv, ToolState, stop
from rlvr.parsers import ThinkParser, XMLParser
from rlvr.rubric import Rubric, group_reward
from rlvr.types import Completion, Message, Messages, Rollout, SamplingArgs, State, Task, ToolCall, Turn

__version__ = "0.1.0"

__all__ = [
    "ChatClient",
    "Completion",
    "Message",
    "Messages",
    "MultiTurnEnv",
    "Policy",
    "Rollout",
    "Rubric",
    "SamplingArgs",
    "SingleTurnEnv",
    "State",
    "StatefulToolEnv",
    "Task",
    "ThinkParser",
    "ToolCall",
    "ToolEnv",
    "ToolState",
    "Turn",
    "XMLParser",
    "check_env",
    "group_reward",
    "stop",
]
