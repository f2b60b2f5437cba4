"""The typed action, observation and state of a served rlvr environment, and a typed client."""

from __future__ import annotations

from typing import Any

from rlvr.errors import import_extra

import_extra("openenv.core", "openenv", "OpenEnv servers", "openenv-core")

from openenv.core import EnvClient  # noqa: E402
from openenv.core.client_types import StepResult  # noqa: E402
from openenv.core.env_server.types import Action, Observation, State  # noqa: E402
from pydantic import BaseModel, Field  # noqa: E402


class RlvrToolCall(BaseModel):
    """One tool call of the model, as OpenAI's chat API writes it (arguments: JSON text)."""

    id: str
    name: str
    arguments: str = "{}"


class RlvrAction(Action):
    """The model's turn: its reply text and its tool calls."""

    content: str = Field(default="", description="The assistant message's text")
    tool_calls: list[RlvrToolCall] = Field(default_factory=list, description="Tool calls of the turn")


class RlvrObservation(Observation):
    """What the model sees next: new messages, the tools it may call, the episode's position."""

    messages: list[dict[str, Any]] = Field(default_factory=list, description="Messages since the last action")
    tools: list[dict[str, Any]] | None = Field(default=None, description="OpenAI tool schemas of the next turn")
    task_id: str = Field(default="", description="The task being played")
    turn: int = Field(default=0, description="Model turns played so far")
    sampling: dict[str, Any] = Field(default_factory=dict, description="Sampling arguments of the next turn")
    rewards: dict[str, float] = Field(default_factory=dict, description="Each reward function's score, at the end")
    stop_reason: str | None = Field(default=None, description="Why the episode ended (None: it goes on)")
    truncated: bool = Field(default=False, description="Whether the episode was cut short (max_turns, an error)")
    error: str | None = Field(default=None, description="The episode's error, if it failed")


class RlvrState(State):
    """The session's episode: which task and rollout, and how it stands."""

    task_id: str | None = None
    rollout_index: int = 0
    seed: int | None = None
    turn: int = 0
    done: bool = False
    stop_reason: str | None = None


class RlvrEnvClient(EnvClient[RlvrAction, RlvrObservation, RlvrState]):
    """OpenEnv's WebSocket client, typed for `rlvr serve`: `await client.reset(task=0)`,
    `await client.step(RlvrAction(content="..."))`."""

    def _step_payload(self, action: RlvrAction) -> dict[str, Any]:
        return action.model_dump(exclude={"metadata"})

    def _parse_result(self, payload: dict[str, Any]) -> StepResult[RlvrObservation]:
        observation = RlvrObservation(
            **payload.get("observation", {}),
            done=payload.get("done", False),
            reward=payload.get("reward"),
        )
        return StepResult(observation=observation, reward=payload.get("reward"), done=payload.get("done", False))

    def _parse_state(self, payload: dict[str, Any]) -> RlvrState:
        return RlvrState(**payload)
