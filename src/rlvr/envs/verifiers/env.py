"""`VerifiersEnv`: an environment of verifiers' classic API played by rlvr's rollout loop.

The verifiers environment keeps its own per-episode state (a dict made by its `init_state` and
`setup_state`), which the bridge keeps in step with rlvr's: each model turn is appended to its
trajectory, then verifiers' own stop conditions (`is_completed`) decide whether the episode
ends; if not, its `env_response` answers. At the end its cleanup handlers run (they render
`completion` as verifiers does), and its rubric scores the episode (`convert.bridged_rubric`).
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from rlvr.clients.base import ChatClient
from rlvr.envs.multiturn import MultiTurnEnv, stop
from rlvr.envs.verifiers.convert import bridged_rubric, from_verifiers, row_task, to_verifiers, tool_schemas
from rlvr.errors import EnvError, UsageError, import_extra
from rlvr.types import DEFAULT_MAX_TOKENS, Messages, SamplingArgs, State, Task

TRUNCATING = frozenset(
    {"has_error", "prompt_too_long", "max_turns_reached", "max_total_completion_tokens_reached", "timeout_reached"}
)
"""verifiers' stop conditions that cut an episode short (the others end it: terminated)."""

UNUSED_BASE_URL = "http://verifiers-model-calls-are-not-bridged.invalid/v1"
"""Where the client in verifiers' state points: rlvr's client plays every model turn, so an
environment that asks the model itself (through `state["client"]`) fails with a clear error."""


def verifiers_module() -> Any:
    """Import verifiers, or say which extra to install."""
    return import_extra("verifiers", "verifiers", "verifiers environments", "verifiers")


@dataclass(kw_only=True)
class VerifiersState(State):
    vf_state: Any = None
    """verifiers' own state of this episode (its `State` dict); None until `begin`."""
    vf_stop: str | None = None
    """The verifiers stop condition that ended the episode (e.g. `max_turns_reached`)."""


class VerifiersEnv(MultiTurnEnv[VerifiersState]):
    """A `vf.Environment` (`SingleTurnEnv`, `MultiTurnEnv`, `ToolEnv`, `StatefulToolEnv`, ...) as
    an rlvr environment: its datasets as tasks, its turns, stops and tools, its rubric."""

    def __init__(self, vf_env: Any, *, max_tokens: int | None = None) -> None:
        vf = verifiers_module()
        if not isinstance(vf_env, vf.Environment):
            raise UsageError(f"expected a verifiers Environment (vf.Environment), got {type(vf_env).__name__}")
        if not isinstance(vf_env, vf.MultiTurnEnv):
            raise UsageError(
                f"{type(vf_env).__name__} is not a verifiers MultiTurnEnv (SingleTurnEnv, ToolEnv, ...): "
                "only environments that play through env_response can be bridged"
            )
        self.vf_env = vf_env
        self.truncating = TRUNCATING - {"max_turns_reached"} if isinstance(vf_env, vf.SingleTurnEnv) else TRUNCATING
        """The stop conditions that mean truncated (a single-turn env's one turn is its end)."""
        self.rows: dict[str, Mapping[str, Any]] = {}
        train = self._tasks(vf_env.build_dataset(), "train")
        held_out = self._tasks(vf_env.build_eval_dataset(), "eval")
        if not train and not held_out:
            raise UsageError(f"the verifiers environment {type(vf_env).__name__} has no dataset rows")
        timeout = getattr(vf_env, "timeout_seconds", None)
        super().__init__(
            train or held_out,
            eval_dataset=held_out or None,
            rubric=bridged_rubric(vf_env.rubric, _vf_state),
            sampling=_sampling(vf_env.sampling_args, max_tokens),
            timeout_s=float(timeout) if timeout else None,
        )
        self._client: Any = None

    def _tasks(self, dataset: Any, split: str) -> list[Task]:
        if dataset is None:
            return []
        tasks = []
        for row in dataset.to_list():
            task = row_task(row, split)
            self.rows[task.id] = row
            tasks.append(task)
        return tasks

    # ---- the contract -------------------------------------------------------------------

    def setup_state(self, task: Task) -> VerifiersState:
        return VerifiersState(task=task)

    async def begin(self, state: VerifiersState, client: ChatClient, sampling: SamplingArgs) -> None:
        """verifiers' `init_state` from the task's dataset row, then its `setup_state`."""
        row = self.rows.get(state.task.id)
        if row is None:
            raise EnvError(f"task {state.task.id!r} is not a row of this verifiers environment's datasets")
        model = str(getattr(client, "model", None) or getattr(client, "name", None) or "rlvr")
        vf_state = await self.vf_env.init_state(row, self._unused_client(), model, sampling_args={})
        state.vf_state = vf_state
        set_up = await self.vf_env.setup_state(vf_state)
        if set_up is not None:
            state.vf_state = set_up

    def tool_schemas(self, state: VerifiersState) -> list[dict[str, Any]] | None:
        """The tools verifiers' state offers; before `begin` (`rlvr gen` asks then), those it
        will offer: the task's `info["tool_defs"]`, else the env's."""
        if state.vf_state is not None:
            return tool_schemas(state.vf_state.get("tool_defs") or [])
        defs = state.task.info.get("tool_defs") or self.vf_env.tool_defs or []
        tool = verifiers_module().Tool
        return tool_schemas([d if isinstance(d, tool) else tool.model_validate(d) for d in defs])

    async def env_response(self, messages: Messages, state: VerifiersState) -> Messages:
        """Record the model's turn in verifiers' trajectory and token usage; then either a verifiers stop
        condition holds (no reply), or verifiers' `env_response` answers (its
        `final_env_response`, when it sets one, is the last reply)."""
        vf_env, vf_state = self.vf_env, state.vf_state
        turn = state.turns[-1].completion
        step = {
            "prompt": to_verifiers(messages[:-1]),
            "completion": to_verifiers(messages[-1:]),
            "response": None,
            "tokens": None,
            "reward": None,
            "advantage": None,
            "is_truncated": turn.finish_reason == "length",
            "trajectory_id": vf_state["trajectory_id"],
            "extras": {},
        }
        await vf_env.add_trajectory_step(vf_state, step)
        sampled = turn.usage.completion_tokens or len(turn.token_ids or ())
        vf_env.increment_state_usage(vf_state, turn.usage.prompt_tokens, sampled)
        if await vf_env.is_completed(vf_state):
            state.vf_stop = vf_state.get("stop_condition")
            return []
        reply = await vf_env.env_response(to_verifiers(messages), vf_state)
        final = vf_state.get("final_env_response")
        if final is not None and await vf_env.is_completed(vf_state):
            state.vf_stop = vf_state.get("stop_condition")
            reply = final
        from verifiers.utils.message_utils import maybe_normalize_messages

        return from_verifiers(maybe_normalize_messages(reply, field_name="env_response") or [])

    @stop(priority=90)
    def verifiers_done(self, state: VerifiersState) -> bool:
        """A verifiers stop condition that ends the episode held (its name: `info.verifiers_stop`)."""
        return self._stopped(state, cut=False)

    @stop(priority=90, truncated=True)
    def verifiers_cut(self, state: VerifiersState) -> bool:
        """A verifiers stop condition that cuts the episode short held (max turns, an error...)."""
        return self._stopped(state, cut=True)

    def _stopped(self, state: VerifiersState, *, cut: bool) -> bool:
        if state.vf_stop is None or (state.vf_stop in self.truncating) != cut:
            return False
        state.info["verifiers_stop"] = state.vf_stop
        return True

    async def close_state(self, state: VerifiersState) -> None:
        """verifiers' cleanup handlers: its own rendering of `completion` first, then the env's."""
        if state.vf_state is not None:
            await self.vf_env.cleanup(state.vf_state)

    # ---- helpers ------------------------------------------------------------------------

    def _unused_client(self) -> Any:
        """The client verifiers' state carries (see `UNUSED_BASE_URL`): one per environment."""
        if self._client is None:
            import openai

            vf = verifiers_module()
            self._client = vf.OpenAIChatCompletionsClient(openai.AsyncOpenAI(base_url=UNUSED_BASE_URL, api_key="-"))
        return self._client


def _vf_state(state: State) -> Any:
    vf_state = getattr(state, "vf_state", None)
    if vf_state is None:
        raise EnvError("this rollout has no verifiers state to score (it failed before its first turn)")
    return vf_state


def _sampling(vf_sampling: Mapping[str, Any], max_tokens: int | None) -> SamplingArgs:
    """rlvr's sampling from verifiers' `sampling_args` (max_tokens, temperature, top_p, stop);
    `max_tokens` given to the bridge wins, and without either it is `DEFAULT_MAX_TOKENS`."""
    tokens = max_tokens or vf_sampling.get("max_tokens") or vf_sampling.get("max_completion_tokens")
    stops = vf_sampling.get("stop")
    return SamplingArgs(
        max_tokens=int(tokens) if tokens else DEFAULT_MAX_TOKENS,
        temperature=float(vf_sampling.get("temperature", 1.0)),
        top_p=float(vf_sampling.get("top_p", 1.0)),
        stop=[stops] if isinstance(stops, str) else (list(stops) if stops else None),
    )


@contextlib.contextmanager
def keeping_signal_handlers() -> Iterator[None]:
    """Put SIGINT's and SIGTERM's handlers back after the block: a verifiers Environment installs
    its own when it is built (they exit at once), which would take over from rlvr's CLI (an
    interrupted or terminated run says how to resume it). Only the main thread handles signals."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    saved = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, handler)


def wrap(vf_env: Any, *, max_tokens: int | None = None) -> VerifiersEnv:
    """A verifiers environment instance as an rlvr environment."""
    return VerifiersEnv(vf_env, max_tokens=max_tokens)


def load_environment(env: str | None = None, max_tokens: int | None = None, **args: Any) -> VerifiersEnv:
    """A verifiers environment by module name (or id: `vf-math` is module `vf_math`), loaded
    with verifiers' own `load_environment(env, **args)`.

    Args:
        env: the module (installed, or on the import path) whose `load_environment` builds it.
        max_tokens: most tokens a model turn may take (default: the env's own sampling_args,
            else rlvr's default).
        **args: the module's `load_environment` arguments.
    """
    if not env:
        raise UsageError(
            'the verifiers environment plays a verifiers env module: name it, e.g. -a \'{"env": "my_vf_env"}\''
        )
    vf = verifiers_module()
    try:
        with keeping_signal_handlers():
            vf_env = vf.load_environment(env, **args)
    except ValueError as exc:  # verifiers wraps a failed import so
        if not isinstance(exc.__cause__, ImportError):
            raise
        raise UsageError(f"verifiers environment {env!r} could not be imported: {exc.__cause__}") from None
    return wrap(vf_env, max_tokens=max_tokens)
