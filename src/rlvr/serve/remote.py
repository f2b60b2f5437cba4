"""Env servers for scale-out: an environment's episodes played on `rlvr serve` processes.

    rlvr serve python_math --port 8001 &   rlvr serve python_math --port 8002 &
    rlvr eval python_math -m MODEL --env-server http://127.0.0.1:8001 --env-server http://127.0.0.1:8002

`RemoteEnv(env, urls)` has `env`'s tasks, sampling, players and reward names, and plays each
rollout on one of the servers: the model's turns are sampled here, the environment's replies
and the rubric run there (`reset(task=ID, rollout_seed=SEED)` gives the rollout the seed `rlvr
eval` gives it, so the same player gets the same rewards as in process).

- A rollout goes to the live server with the fewest rollouts in flight.
- A server that fails (its connection closes, it refuses connections, it stops answering) is
  set aside for `cooldown_s`, and the rollout goes on on another: a new session there is reset
  with the same task and seed, the model's turns so far are replayed as steps (their replies
  are the same: an rlvr environment is deterministic given its task and seed), then the turn in
  hand. The model is not asked again, so nothing is lost and nothing is done twice; a replay
  that does not match what the failed server said is an error record.
- `stats()` counts, per server, the rollouts finished there and the failures it caused; `rlvr
  eval` writes them to metadata.json under `env_servers`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from rlvr.envs.multiturn import MultiTurnEnv, stop
from rlvr.errors import EnvError, UsageError
from rlvr.rubric import Rubric
from rlvr.types import Messages, State, Task


@dataclass(kw_only=True)
class RemoteState(State):
    client: Any = None
    """OpenEnv's client of the session on `server` (not serialised)."""
    server: str | None = None
    actions: list[dict[str, Any]] = field(default_factory=list)
    """The model's turns as the server's actions, to replay on another server."""
    replies: list[Messages] = field(default_factory=list)
    """What the server answered each action, to check a replay against."""
    tools: list[dict[str, Any]] | None = None
    final: dict[str, Any] = field(default_factory=dict)
    """The last observation, with the served rubric's `rewards`, `stop_reason`, `truncated`."""


class ServerPool:
    """The env servers, how busy each is, which are set aside, and what each did."""

    def __init__(self, urls: Sequence[str], cooldown_s: float = 30.0) -> None:
        if not urls:
            raise UsageError("no env server: pass --env-server URL (once per server)")
        self.urls = [u.rstrip("/") for u in urls]
        self.cooldown_s = cooldown_s
        self.in_flight = dict.fromkeys(self.urls, 0)
        self.rollouts = dict.fromkeys(self.urls, 0)
        self.failures = dict.fromkeys(self.urls, 0)
        self.down_until = dict.fromkeys(self.urls, 0.0)

    def choose(self, avoid: set[str]) -> str:
        """The least busy server not in `avoid`, live ones first."""
        left = [u for u in self.urls if u not in avoid]
        if not left:
            raise EnvError(f"every env server failed for this rollout: {', '.join(self.urls)}")
        now = time.monotonic()
        live = [u for u in left if self.down_until[u] <= now] or left
        return min(live, key=lambda u: (self.in_flight[u], self.urls.index(u)))

    def failed(self, url: str) -> None:
        self.failures[url] += 1
        self.down_until[url] = time.monotonic() + self.cooldown_s

    def stats(self) -> dict[str, dict[str, int]]:
        return {u: {"rollouts": self.rollouts[u], "failures": self.failures[u]} for u in self.urls}


def _served_reward(name: str) -> Any:
    def reward(state: RemoteState) -> float:
        return float(state.final.get("rewards", {}).get(name, 0.0))

    reward.__name__ = name
    reward.__doc__ = f"The served rubric's {name!r}."
    return reward


class RemoteEnv(MultiTurnEnv[RemoteState]):
    """`env`'s episodes, played on env servers (see the module docstring)."""

    def __init__(self, env: MultiTurnEnv[Any], urls: Sequence[str], *, message_timeout_s: float = 300.0) -> None:
        if env.rubric.has_group_functions:
            raise UsageError(
                "env servers score each rollout alone: an env with group reward functions is not supported"
            )
        super().__init__(
            env.dataset,
            eval_dataset=env.eval_dataset,
            rubric=Rubric([_served_reward(n) for n in env.rubric.names], weights=env.rubric.weights),
            sampling=env.sampling,
        )
        self.env, self.pool, self.message_timeout_s = env, ServerPool(urls), message_timeout_s
        self.name, self.env_args = env.name, env.env_args
        self._split = {t.id: "train" for t in env.tasks("train")} | {t.id: "eval" for t in env.tasks("eval")}

    def policies(self) -> Any:
        return self.env.policies()

    def default_model(self) -> str | None:
        return self.env.default_model()

    def summarize(self, rollouts: Sequence[Any]) -> dict[str, float] | None:
        return self.env.summarize(rollouts)

    def setup_state(self, task: Task) -> RemoteState:
        return RemoteState(task=task)

    def initial_prompt(self, task: Task) -> Messages:
        return []

    def tool_schemas(self, state: RemoteState) -> list[dict[str, Any]] | None:
        return state.tools

    # ---- sessions -----------------------------------------------------------------------

    async def _open(self, state: RemoteState, avoid: set[str]) -> Any:
        """A session on a server not in `avoid`, reset for this rollout; its first observation.
        A server at its session limit is asked again later (backing off up to a second); one
        that cannot be reached is set aside; one that refuses the episode is an error."""
        from openenv.core import GenericEnvClient

        delay = 0.02
        while True:
            url = self.pool.choose(avoid)
            client = GenericEnvClient(base_url=url, message_timeout_s=self.message_timeout_s)
            reset = {"task": state.task.id, "rollout_seed": state.seed, "split": self._split.get(state.task.id, "eval")}
            try:
                result = await client.reset(**reset)
            except Exception as exc:  # noqa: BLE001 (sorted below: busy, refused, or down)
                await _close(client)
                if _busy(exc):
                    await asyncio.sleep(delay)
                    delay = min(2 * delay, 1.0)
                elif isinstance(exc, RuntimeError):  # the server answered: not this episode
                    raise EnvError(f"env server {url} refused the episode ({_words(exc)}): is it serving the same env?")
                else:
                    self.pool.failed(url)
                    avoid.add(url)
                continue
            state.client, state.server = client, url
            self.pool.in_flight[url] += 1
            return result

    async def _leave(self, state: RemoteState, failed: bool) -> None:
        client, url, state.client, state.server = state.client, state.server, None, None
        await _close(client)
        if url is not None:
            self.pool.in_flight[url] -= 1
            if failed:
                self.pool.failed(url)

    async def _step(self, state: RemoteState, action: dict[str, Any]) -> Any:
        """The server's answer to `action`; on a server failure (there, or on the next server
        during the replay), the episode moves to another server: reset, the earlier actions
        replayed and checked, then `action` sent there."""
        from websockets.exceptions import ConnectionClosed

        avoid: set[str] = set()
        moved = False
        while True:
            try:
                if moved:
                    await self._replay(state)
                return await state.client.step(action)
            except (ConnectionClosed, OSError, TimeoutError):
                avoid.add(str(state.server))
                await self._leave(state, failed=True)
            await self._open(state, avoid)
            moved = True

    async def _replay(self, state: RemoteState) -> None:
        for earlier, expected in zip(state.actions[:-1], state.replies):
            replayed = await state.client.step(earlier)
            if replayed.done or replayed.observation.get("messages") != expected:
                raise EnvError(f"replaying turn {len(state.replies)} on {state.server} gave another reply")

    # ---- the episode --------------------------------------------------------------------

    async def begin(self, state: RemoteState, client: Any, sampling: Any) -> None:
        result = await self._open(state, set())
        self._observe(state, result)
        state.prompt = [dict(m) for m in result.observation.get("messages") or []]
        state.messages = list(state.prompt)

    async def env_response(self, messages: Messages, state: RemoteState) -> Messages:
        completion = state.turns[-1].completion
        state.actions.append({"content": completion.text, "tool_calls": [vars(c) for c in completion.tool_calls]})
        result = await self._step(state, state.actions[-1])
        reply = [dict(m) for m in result.observation.get("messages") or []]
        state.replies.append(reply)
        self._observe(state, result)
        return reply

    def _observe(self, state: RemoteState, result: Any) -> None:
        state.final = dict(result.observation)
        state.final["done"] = bool(result.done)
        state.tools = state.final.get("tools")

    @stop(priority=10)
    def served_episode_over(self, state: RemoteState) -> bool:
        return bool(state.final.get("done"))

    async def close_state(self, state: RemoteState) -> None:
        """End the session; the record takes the served episode's stop reason and error."""
        url = state.server
        await self._leave(state, failed=False)
        if url is not None and state.final.get("done"):
            self.pool.rollouts[url] += 1
            state.stop_reason = state.final.get("stop_reason") or state.stop_reason
            state.truncated = bool(state.final.get("truncated"))
            state.error = state.error or state.final.get("error")

    async def aclose(self) -> None:
        await self.env.aclose()


def _busy(exc: BaseException) -> bool:
    """A server at its session limit: it says CAPACITY_REACHED, or closes the new connection
    cleanly before the reset is read."""
    from websockets.exceptions import ConnectionClosedOK

    return isinstance(exc, ConnectionClosedOK) or "CAPACITY_REACHED" in str(exc)


def _words(exc: BaseException) -> str:
    """The server's own words from OpenEnv's client error."""
    return str(exc).removeprefix("Server error: ")


async def _close(client: Any) -> None:
    if client is not None:
        try:
            await client.close()
        except Exception:  # noqa: BLE001 (a dead server's session is gone either way)
            pass
