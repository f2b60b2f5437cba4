"""The OpenEnv bridge: one OpenEnv environment, played through OpenEnv's own WebSocket client."""

from __future__ import annotations

import asyncio
import contextlib
import re
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from rlvr.envs.multiturn import MultiTurnEnv, stop
from rlvr.envs.openenv.actions import ActionError, ActionMapping, observation_messages
from rlvr.errors import EnvError, UsageError, import_extra
from rlvr.rubric import Rubric
from rlvr.seeding import mix_seed
from rlvr.types import Messages, SamplingArgs, State, Task

_THINK = re.compile(r"<think>.*?</think>", re.DOTALL)


def openenv_core() -> Any:
    """Import OpenEnv's core, or say which extra to install."""
    return import_extra("openenv.core", "openenv", "OpenEnv environments", "openenv-core")


@dataclass(kw_only=True)
class OpenEnvState(State):
    client: Any = None
    """OpenEnv's client of this rollout: one WebSocket session (not serialised)."""
    step_rewards: list[float] = field(default_factory=list)
    """The reward of each step, as the environment gave it (None counts as 0)."""
    done: bool = False
    invalid_actions: int = 0
    """Replies that did not make an action the server accepted."""
    final: dict[str, Any] = field(default_factory=dict)
    """The last observation (the fields an rlvr-served env adds: `rewards`, `stop_reason`)."""


class OpenEnvEnv(MultiTurnEnv[OpenEnvState]):
    """An OpenEnv environment at `url`, or the app `app` started locally; see `rlvr.envs.openenv`."""

    def __init__(
        self,
        *,
        tasks: list[Task],
        url: str | None = None,
        app: str | None = None,
        app_dir: str | None = None,
        action_field: str | None = None,
        observation_field: str | None = None,
        reward: str = "sum",
        system_prompt: str | None = None,
        max_turns: int | None = 30,
        sampling: SamplingArgs | None = None,
        start_timeout_s: float = 60.0,
        message_timeout_s: float = 60.0,
        session_wait_s: float = 600.0,
    ) -> None:
        if (url is None) == (app is None):
            raise UsageError("the openenv environment needs exactly one of url= (a running server) or app= (to start)")
        if reward not in ("sum", "last"):
            raise UsageError(f"reward must be 'sum' (of the step rewards) or 'last', got {reward!r}")
        weights = [1.0, 0.0, 0.0] if reward == "sum" else [0.0, 1.0, 0.0]
        super().__init__(
            tasks,
            system_prompt=system_prompt,
            rubric=Rubric([total_reward, final_reward, invalid_actions], weights=weights),
            sampling=sampling,
            max_turns=max_turns,
        )
        self.url, self.app, self.app_dir = url, app, app_dir
        self.action_field, self.observation_field = action_field, observation_field
        self.start_timeout_s, self.message_timeout_s = start_timeout_s, message_timeout_s
        self.session_wait_s = session_wait_s
        self.mapping: ActionMapping | None = None
        self._server: Any = None
        self._lock = threading.Lock()

    # ---- lifecycle ----------------------------------------------------------------------

    async def start(self) -> None:
        """Start the local server (with `app`) and read the action schema, once."""
        if self.mapping is None:
            await asyncio.to_thread(self._start)

    def _start(self) -> None:
        with self._lock:
            if self.mapping is not None:
                return
            openenv_core()
            if self.app is not None and self._server is None:
                from rlvr.envs.openenv.provider import LocalServer

                server = LocalServer(self.app, app_dir=self.app_dir, start_timeout_s=self.start_timeout_s)
                self.url = server.start()
                self._server = server
                server.wait_for_ready(self.start_timeout_s)
            self.mapping = ActionMapping.from_schema(_schema(str(self.url)), self.action_field, self.observation_field)
            if self.system_prompt is None:
                self.system_prompt = self.mapping.instructions()

    async def aclose(self) -> None:
        """Stop the local server, if this env started one."""
        server, self._server = self._server, None
        if server is not None:
            await asyncio.to_thread(server.stop)
            self.url, self.mapping = None, None

    # ---- the episode --------------------------------------------------------------------

    def setup_state(self, task: Task) -> OpenEnvState:
        return OpenEnvState(task=task)

    def initial_prompt(self, task: Task) -> Messages:
        return [{"role": "system", "content": self.system_prompt}] if self.system_prompt else []

    async def begin(self, state: OpenEnvState, client: Any, sampling: SamplingArgs) -> None:
        """Open a session and reset it with the task's seed; its observation is the prompt."""
        result = await self._open(state)
        messages = self._observe(state, result)
        state.prompt = [*state.prompt, *messages]
        state.messages = list(state.prompt)

    async def _open(self, state: OpenEnvState) -> Any:
        """A session reset with the task's seed. A server at its limit of sessions answers the
        connection with CAPACITY_REACHED and closes it: ask again (backing off up to a second)
        for at most `session_wait_s`."""
        from websockets.exceptions import ConnectionClosed

        core = openenv_core()
        args = {"seed": state.task.seed, **state.task.info.get("reset_args", {})}
        deadline, delay = time.monotonic() + self.session_wait_s, 0.02
        while True:
            state.client = core.GenericEnvClient(base_url=str(self.url), message_timeout_s=self.message_timeout_s)
            try:
                return await state.client.reset(**args)
            except (RuntimeError, ConnectionClosed) as exc:
                if isinstance(exc, RuntimeError) and "CAPACITY_REACHED" not in str(exc):
                    raise
                if time.monotonic() + delay > deadline:
                    raise EnvError(
                        f"OpenEnv server at {self.url} had no free session within {self.session_wait_s:g} s "
                        "(all its concurrent sessions were in use): lower -c, or raise its max_concurrent_envs"
                    ) from None
            await self.close_state(state)
            await asyncio.sleep(delay)
            delay = min(2 * delay, 1.0)

    def tool_schemas(self, state: OpenEnvState) -> list[dict[str, Any]] | None:
        return state.final.get("tools") if self.mapping is not None and self.mapping.chat else None

    async def env_response(self, messages: Messages, state: OpenEnvState) -> Messages:
        assert self.mapping is not None
        turn = state.turns[-1].completion
        try:
            action = self.mapping.action(_THINK.sub("", turn.text or "").strip(), turn.tool_calls)
            result = await state.client.step(action)
        except (ActionError, RuntimeError) as exc:  # the server refused the action: say why, go on
            state.invalid_actions += 1
            return [{"role": "user", "content": f"Invalid action: {_server_message(exc)}. {self.mapping.hint()}"}]
        state.step_rewards.append(float(result.reward or 0.0))
        return self._observe(state, result)

    def _observe(self, state: OpenEnvState, result: Any) -> Messages:
        assert self.mapping is not None
        state.final = dict(result.observation)
        state.done = bool(result.done)
        return observation_messages(state.final, self.mapping)

    async def close_state(self, state: OpenEnvState) -> None:
        client, state.client = state.client, None
        if client is not None:
            with contextlib.suppress(Exception):  # the session is over either way
                await client.close()

    @stop(priority=10)
    def episode_done(self, state: OpenEnvState) -> bool:
        return state.done


def _schema(url: str) -> dict[str, Any]:
    """The server's `/schema`: the JSON schemas of its action, observation and state."""
    import requests

    try:
        response = requests.get(f"{url.rstrip('/')}/schema", timeout=30)
        response.raise_for_status()
        return dict(response.json())
    except (requests.RequestException, ValueError) as exc:
        raise EnvError(f"OpenEnv server at {url} did not give its schema (GET /schema): {exc}") from None


def _server_message(exc: Exception) -> str:
    """The server's own words from OpenEnv's client error ("Server error: ... (code: ...)")."""
    text = str(exc).removeprefix("Server error: ")
    return re.sub(r" \(code: \w+\)$", "", text).strip() or type(exc).__name__


# ---- reward functions -------------------------------------------------------------------------


def total_reward(state: OpenEnvState) -> float:
    """The sum of the environment's step rewards.

    >>> total_reward(OpenEnvState(task=Task(id="0", question="q"), step_rewards=[0.5, 1.0]))
    1.5
    """
    return float(sum(state.step_rewards))


def final_reward(state: OpenEnvState) -> float:
    """The environment's reward for the last step (0 before any step)."""
    return state.step_rewards[-1] if state.step_rewards else 0.0


def invalid_actions(state: OpenEnvState) -> float:
    """Replies the server refused as actions."""
    return float(state.invalid_actions)


# ---- entry point ------------------------------------------------------------------------------


def load_environment(
    url: str | None = None,
    app: str | None = None,
    app_dir: str | None = None,
    num_tasks: int = 20,
    seed: int = 0,
    reset_args: dict[str, Any] | None = None,
    action_field: str | None = None,
    observation_field: str | None = None,
    reward: str = "sum",
    system_prompt: str | None = None,
    max_turns: int | None = 30,
    max_tokens: int = 512,
    start_timeout_s: float = 60.0,
    session_wait_s: float = 600.0,
) -> OpenEnvEnv:
    """Any OpenEnv environment, reached at `url` or started from `app`, through OpenEnv's client.

    Args:
        url: the base URL of a running OpenEnv server, e.g. http://127.0.0.1:8000.
        app: instead, the import path of an OpenEnv app to start here with uvicorn (no Docker),
            e.g. `echo_env.server.app:app`; stopped when the run ends.
        app_dir: a folder put first on the started server's import path.
        num_tasks: episodes; episode i resets the environment with seed mix_seed(seed, i).
        seed: the seed the reset seeds are mixed from; same arguments, same tasks.
        reset_args: more keyword arguments for every reset (e.g. a difficulty the env takes).
        action_field: the action field the reply's text fills (default: the action's one text
            field; an action of other fields is written by the model as a JSON object).
        observation_field: the observation field shown to the model (default: all, one a line).
        reward: `sum` of the step rewards or the `last` step's, as the weighted reward.
        system_prompt: instead of the one made from the action schema.
        max_turns: most model turns; the episode is then truncated.
        max_tokens: most tokens in a reply, sent with every request.
        start_timeout_s: most seconds to start `app` and for it to answer /health.
        session_wait_s: most seconds a rollout waits for a session on a server at its limit
            of concurrent sessions (OpenEnv apps allow 1 unless they say otherwise).
    """
    if num_tasks < 1:
        raise UsageError(f"num_tasks must be >= 1, got {num_tasks}")
    where = url if url is not None else app
    tasks = [
        Task(
            id=f"episode-{i}",
            question=f"(the observation of OpenEnv {where} reset with seed {mix_seed(seed, i)})",
            info={"openenv": where, "reset_args": dict(reset_args or {})},
            seed=mix_seed(seed, i),
        )
        for i in range(num_tasks)
    ]
    return OpenEnvEnv(
        tasks=tasks,
        url=url,
        app=app,
        app_dir=app_dir,
        action_field=action_field,
        observation_field=observation_field,
        reward=reward,
        system_prompt=system_prompt,
        max_turns=max_turns,
        sampling=SamplingArgs(max_tokens=max_tokens),
        start_timeout_s=start_timeout_s,
        session_wait_s=session_wait_s,
    )


__all__ = ["OpenEnvEnv", "OpenEnvState", "load_environment"]
