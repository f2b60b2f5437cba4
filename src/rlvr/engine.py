"""The engine: run groups of rollouts concurrently, score them, stream them out.

`run_rollouts` plays `rollouts_per_task` episodes of each task with at most `concurrency`
episodes in flight. A group (the rollouts of one task) is scored together when its rubric has
group reward functions; otherwise each rollout is scored and emitted as soon as it finishes.
Nothing that happens inside one rollout can stop the run: failures become error records. Only
a client that can answer no request any more (`KeyRefusedError`: a refused API key) does.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable, Collection, Sequence
from typing import Any

from rlvr.clients.base import ChatClient
from rlvr.envs.multiturn import MultiTurnEnv
from rlvr.errors import UsageError, error_summary
from rlvr.seeding import mix_seed
from rlvr.types import Rollout, SamplingArgs, State, Task

OnRollout = Callable[[Rollout], Any]


def rollout_seed(task: Task, index: int) -> int:
    """Seed of rollout `index` of `task`: a stable mix of the task seed and the index."""
    return mix_seed(task.seed, index)


async def run_rollouts(
    env: MultiTurnEnv[Any],
    client: ChatClient,
    tasks: Sequence[Task],
    *,
    rollouts_per_task: int = 1,
    concurrency: int = 32,
    sampling: SamplingArgs | None = None,
    skip: Collection[tuple[str, int]] = (),
    on_rollout: OnRollout | None = None,
    collect: bool = True,
) -> list[Rollout]:
    """Play every (task, rollout index) not in `skip`; returns the new rollouts, in task order.

    `on_rollout` is called with each finished, scored rollout (e.g. to append it to a results
    file); its exceptions do stop the run, since losing output silently would be worse.
    `collect=False` keeps no rollout (returns []): memory stays flat however many are played,
    since groups are also started only as earlier ones finish (`concurrency` groups at most).
    """
    if rollouts_per_task < 1:
        raise UsageError(f"rollouts per task must be >= 1, got {rollouts_per_task}")
    if concurrency < 1:
        raise UsageError(f"concurrency must be >= 1, got {concurrency}")
    sampling = sampling or env.sampling
    gate = asyncio.Semaphore(concurrency)
    groups = asyncio.Semaphore(concurrency)  # each group in flight holds at least one rollout slot
    done: dict[tuple[str, int], Rollout] = {}

    def emit(rollout: Rollout) -> None:
        if collect:
            done[rollout.key] = rollout
        if on_rollout is not None:
            on_rollout(rollout)

    async def play(task: Task, index: int) -> State:
        async with gate:
            return await env.rollout(client, task, sampling, rollout_seed(task, index))

    async def score_and_emit(task: Task, indices: list[int], states: list[State]) -> None:
        for rollout in await score_group(env, task, indices, states):
            emit(rollout)

    async def run_group(task: Task, indices: list[int]) -> None:
        try:
            await play_group(task, indices)
        finally:
            groups.release()

    async def play_group(task: Task, indices: list[int]) -> None:
        if env.member(task)[0].rubric.has_group_functions:
            states = list(await asyncio.gather(*(play(task, i) for i in indices)))
            await score_and_emit(task, indices, states)
            return

        async def one(i: int) -> None:
            await score_and_emit(task, [i], [await play(task, i)])

        await asyncio.gather(*(one(i) for i in indices))

    try:
        async with asyncio.TaskGroup() as tg:
            for task in tasks:
                indices = [i for i in range(rollouts_per_task) if (task.id, i) not in skip]
                if indices:
                    await groups.acquire()
                    tg.create_task(run_group(task, indices))
    except ExceptionGroup as group:  # `on_rollout` failed (e.g. a full disk): its error, not a group
        raise group.exceptions[0] from None
    return [done[(t.id, i)] for t in tasks for i in range(rollouts_per_task) if (t.id, i) in done]


async def score_group(
    env: MultiTurnEnv[Any], task: Task, indices: Sequence[int], states: Sequence[State]
) -> list[Rollout]:
    """Score one group's finished states with the rubric of the env that played them (in a
    mixture, the task's member: `env.member(task)`) and build their records, under `task`'s id."""
    t0 = time.monotonic()
    rubric = env.member(task)[0].rubric
    names = rubric.names
    ok = [s for s in states if s.error is None]
    try:
        scores = iter(await rubric.score_group(ok) if ok else [])
        failure = None
    except Exception as exc:
        scores, failure = iter(()), "RewardError: " + error_summary(exc)
    score_s = (time.monotonic() - t0) / max(len(states), 1)
    out = []
    for index, state in zip(indices, states):
        rewards = {n: 0.0 for n in names}
        error = state.error
        if error is None and failure is not None:
            error = failure
        elif error is None:
            rewards = next(scores)
        total = rubric.total(rewards) if error is None else 0.0
        if not math.isfinite(total):
            error, total = f"RewardError: total reward is {total}", 0.0
        out.append(_record(task, state, index, rewards, total, error, score_s))
    return out


def _record(
    task: Task, state: State, index: int, rewards: dict[str, float], total: float, error: str | None, score_s: float
) -> Rollout:
    timing = {k: round(v, 6) for k, v in state.timing.items()}
    timing["score"] = round(score_s, 6)
    timing["total"] = round(time.monotonic() - state.started_at, 6)
    return Rollout(
        task_id=task.id,
        rollout_index=index,
        seed=state.seed,
        prompt=state.prompt,
        turns=state.turns,
        answer=task.answer,
        info={**task.info, **state.info},
        rewards=rewards,
        reward=total,
        metrics={
            "turns": float(state.turn),
            "completion_tokens": float(state.completion_tokens),
        },
        stop_reason=state.stop_reason or "",
        truncated=state.truncated,
        error=error if error is not None else None,
        usage=state.usage,
        timing=timing,
    )
