"""Environment classes: `MultiTurnEnv` and the kinds built on it."""

from rlvr.envs.gym import GymEnv
from rlvr.envs.multiturn import MultiTurnEnv, SingleTurnEnv, stop
from rlvr.envs.tools import StatefulToolEnv, ToolEnv, ToolState, tool_schema

__all__ = ["GymEnv", "MultiTurnEnv", "SingleTurnEnv", "StatefulToolEnv", "ToolEnv", "ToolState", "stop", "tool_schema"]
