"""One OpenEnv session over an rlvr environment: the env's own rollout, its turns played by steps."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import itertools
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from openenv.core.env_server.interfaces import Environment

from rlvr.engine import rollout_seed as seed_of_rollout
from rlvr.engine import score_group
from rlvr.envs.multiturn import MultiTurnEnv
from rlvr.errors import UsageError
from rlvr.serve.models import RlvrAction, RlvrObservation, RlvrState
from rlvr.types import Completion, Messages, SamplingArgs, State, Task, ToolCall


@dataclass
class _Request:
    messages: Messages
    sampling: SamplingArgs
    tools: list[dict[str, Any]] | None


class StepPlayer:
    """The `ChatClient` a served rollout plays against: each `chat` hands the turn's request to
    the session and waits for the step that answers it."""

    name = "openenv-client"

    def __init__(self) -> None:
        self.requests: asyncio.Queue[_Request] = asyncio.Queue()
        self.replies: asyncio.Queue[Completion] = asyncio.Queue()

    async def chat(
        self, messages: Messages, sampling: SamplingArgs, tools: list[dict[str, Any]] | None = None
    ) -> Completion:
        await self.requests.put(_Request(list(messages), sampling, tools))
        return await self.replies.get()

    async def aclose(self) -> None:
        """Nothing to release: the session owns the episode."""


class ServedEnv(Environment):
    """An OpenEnv `Environment` whose episodes are an rlvr environment's rollouts (one session:
    one instance; the rlvr environment is shared by every session of the server)."""

    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self, env: MultiTurnEnv[Any], sampling: SamplingArgs, picker: Picker) -> None:
        super().__init__()
        self.env, self.sampling, self.picker = env, sampling, picker
        self._state = RlvrState(episode_id=None)
        self._task: Task | None = None
        self._player: StepPlayer | None = None
        self._episode: asyncio.Task[State] | None = None
        self._sent = 0
        self._loop: asyncio.AbstractEventLoop | None = None

    # ---- the protocol -------------------------------------------------------------------

    def reset(self, seed: int | None = None, episode_id: str | None = None, **kwargs: Any) -> RlvrObservation:
        raise UsageError("an rlvr environment is served over OpenEnv's WebSocket sessions (reset_async)")

    def step(self, action: Any, timeout_s: float | None = None, **kwargs: Any) -> RlvrObservation:
        raise UsageError("an rlvr environment is served over OpenEnv's WebSocket sessions (step_async)")

    async def reset_async(
        self,
        seed: int | None = None,
        episode_id: str | None = None,
        task: int | str | None = None,
        rollout: int = 0,
        split: str = "eval",
        rollout_seed: int | None = None,
    ) -> RlvrObservation:
        """Start episode `rollout` of `task` (a task id or an index) of `split`; `rollout_seed`
        instead of the seed `rlvr eval` gives rollout `rollout` (env servers for scale-out)."""
        self._cancel()
        tasks = self.env.tasks(split)
        chosen = self.picker.pick(tasks, task, seed)
        if rollout < 0:
            raise UsageError(f"rollout must be >= 0, got {rollout}")
        self._task, self._sent, self._loop = chosen, 0, asyncio.get_running_loop()
        self._player = StepPlayer()
        rollout_seed_ = seed_of_rollout(chosen, rollout) if rollout_seed is None else rollout_seed
        self._state = RlvrState(
            episode_id=episode_id or str(uuid.uuid4()), task_id=chosen.id, rollout_index=rollout, seed=rollout_seed_
        )
        self._episode = asyncio.create_task(self.env.rollout(self._player, chosen, self.sampling, rollout_seed_))
        return await self._next()

    async def step_async(self, action: RlvrAction, timeout_s: float | None = None, **kwargs: Any) -> RlvrObservation:
        if self._player is None or self._episode is None or self._episode.done():
            raise UsageError("no episode in progress: reset first (the last one ended)")
        calls = [ToolCall(id=c.id, name=c.name, arguments=c.arguments) for c in action.tool_calls]
        finish = "tool_calls" if calls else "stop"
        await self._player.replies.put(Completion(text=action.content, tool_calls=calls, finish_reason=finish))
        self._state.step_count += 1
        return await self._next()

    @property
    def state(self) -> RlvrState:
        return self._state

    def close(self) -> None:
        """Called by the server (from a worker thread) when the session ends."""
        if self._loop is not None and self._episode is not None and not self._episode.done():
            with contextlib.suppress(RuntimeError):  # the server's loop already closed: so is the episode
                self._loop.call_soon_threadsafe(self._episode.cancel)

    # ---- the episode --------------------------------------------------------------------

    def _cancel(self) -> None:
        if self._episode is not None and not self._episode.done():
            self._episode.cancel()

    async def _next(self) -> RlvrObservation:
        """Wait for the rollout's next turn (an observation asking for a step) or its end."""
        assert self._player is not None and self._episode is not None and self._task is not None
        request = asyncio.ensure_future(self._player.requests.get())
        try:
            await asyncio.wait({request, self._episode}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            if not request.done():
                request.cancel()
        if request.done() and not request.cancelled():
            asked = request.result()
            new, self._sent = _new_messages(asked.messages, self._sent), len(asked.messages)
            self._state.turn = sum(m.get("role") == "assistant" for m in asked.messages)
            return RlvrObservation(
                messages=new,
                tools=asked.tools,
                task_id=self._task.id,
                turn=self._state.turn,
                sampling=_set_fields(asked.sampling),
                done=False,
                reward=0.0,
            )
        return await self._finish(self._episode.result())

    async def _finish(self, state: State) -> RlvrObservation:
        assert self._task is not None
        record = (await score_group(self.env, self._task, [self._state.rollout_index], [state]))[0]
        self._state.turn, self._state.done, self._state.stop_reason = state.turn, True, record.stop_reason
        return RlvrObservation(
            messages=_new_messages(state.messages, self._sent),
            task_id=self._task.id,
            turn=state.turn,
            rewards=record.rewards,
            stop_reason=record.stop_reason,
            truncated=record.truncated,
            error=record.error,
            done=True,
            reward=record.reward,
        )


def _new_messages(messages: Messages, sent: int) -> Messages:
    """The messages after the `sent` ones the client has, less the client's own reply (the
    first of them, once the client has played).

    >>> _new_messages([{"role": "user"}, {"role": "assistant"}, {"role": "tool"}], 1)
    [{'role': 'tool'}]
    >>> _new_messages([{"role": "user"}], 0)
    [{'role': 'user'}]
    """
    return [dict(m) for m in messages[sent + 1 if sent else 0 :]]


def _set_fields(sampling: SamplingArgs) -> dict[str, Any]:
    """The sampling arguments that are set, as JSON.

    >>> _set_fields(SamplingArgs(max_tokens=8, seed=3))
    {'max_tokens': 8, 'temperature': 1.0, 'top_p': 1.0, 'seed': 3, 'logprobs': False}
    """
    return {k: v for k, v in dataclasses.asdict(sampling).items() if v is not None}


class Picker:
    """The task each reset plays, shared by a server's sessions: the next one in turn for a reset
    that names none, and an index of each split's tasks by id, built at the first reset by id and
    kept (a remote evaluation resets by id for every rollout, and scanning the tasks each time
    cost O(tasks) a rollout; a lazy split was built whole each time)."""

    def __init__(self) -> None:
        self.counter = itertools.count()
        self.ids: dict[int, tuple[Sequence[Task], int, dict[str, int]]] = {}
        """id(tasks) -> (tasks, their number then, each id's first index)"""

    def pick(self, tasks: Sequence[Task], task: int | str | None, seed: int | None) -> Task:
        """The task a reset names: an id or an index; else `seed` modulo the tasks; else the next."""
        if not tasks:
            raise UsageError("the environment has no tasks in this split")
        if task is not None and (isinstance(task, bool) or not isinstance(task, (int, str))):
            raise UsageError(f"task is a task id or an index, got {task!r:.80}")
        if isinstance(task, str):
            found = self._by_id(tasks, task)
            if found is not None:
                return found
            if not task.lstrip("-").isdigit():
                raise UsageError(f"no task with id {task!r:.80}; the first are {[t.id for t in tasks[:5]]}")
        if task is not None:
            index = int(task)
            if not 0 <= index < len(tasks):
                raise UsageError(f"task must be 0..{len(tasks) - 1}, got {index}")
            return tasks[index]
        return tasks[(seed if seed is not None else next(self.counter)) % len(tasks)]

    def _by_id(self, tasks: Sequence[Task], task_id: str) -> Task | None:
        """The first task of `tasks` with id `task_id` (None: none has it), from the index, built
        again when `tasks` is another sequence or its length changed, or the task the index
        names no longer has that id (replaced in place). A miss walks nothing: an id added by
        replacing a task in place is found once the replaced one's id is asked for, or the
        length changes."""
        held = self.ids.get(id(tasks))
        if held is None or held[0] is not tasks or held[1] != len(tasks):
            held = self._index(tasks)
        at = held[2].get(task_id)
        if at is not None and tasks[at].id != task_id:
            at = self._index(tasks)[2].get(task_id)
        return None if at is None else tasks[at]

    def _index(self, tasks: Sequence[Task]) -> tuple[Sequence[Task], int, dict[str, int]]:
        index: dict[str, int] = {}
        for i, t in enumerate(tasks):
            index.setdefault(t.id, i)
        held = self.ids[id(tasks)] = (tasks, len(tasks), index)
        return held
