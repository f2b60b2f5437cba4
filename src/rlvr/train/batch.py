"""A step's batch: drawn (sampler, restarts, greedy probes), then played, in its own step or,
with overlap (`--async`), ahead during the previous step's update.

    batches = Batches(run, generation, run_async)   # a context: waits for a batch in flight
    played = batches.take(step)                      # this step's rollouts
    update_policy(..., behaviour=batches.behaviour(played), started=batches.ahead(step + 1))
    batches.wait()                                   # the next batch is in: weights may change

Overlap off (the default): `take` draws and plays the batch with the current weights.

Overlap on: once the update of step t has the old log-probs of its batch, `ahead(t + 1)` draws
batch t + 1 on the main thread (the sampler and the restarts in the same order as without
overlap), copies the weights into the snapshot (`rlvr.train.generation.Snapshot`) and plays the
batch on a worker thread, which runs the run's event loop meanwhile; the main thread runs the
update. `wait` joins it after the update, before the main thread uses the event loop again
(weight push, evaluations). Batch t + 1 thus comes from the weights before update t: staleness
1 (`async/staleness`), and its update takes its old log-probs from the snapshot, which still
holds those weights then (`behaviour`). The first step, and the step after each checkpoint,
play their batch in their own step (staleness 0): no batch is in flight when a checkpoint is
written, so it holds exactly what a run without overlap holds, and a resumed run replays the
run it resumes step for step (the batch after the checkpoint was played at staleness 0 there
too). A kill between checkpoints loses the batch in flight with the other steps since the last
checkpoint, which the resumed run plays again.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, replace
from types import TracebackType
from typing import Any

from torch import nn

from rlvr.clients.base import ChatClient
from rlvr.engine import run_rollouts
from rlvr.envs.multiturn import MultiTurnEnv
from rlvr.train.generation import Generation, Snapshot, open_player
from rlvr.train.run import Run
from rlvr.train.session import RunAsync, StepSeeded
from rlvr.train.sharding import full_weights
from rlvr.types import Rollout, Task


@dataclass(frozen=True)
class Drawn:
    """A step's tasks, drawn on the main thread."""

    step: int
    batch: list[Task]
    """every rank's tasks (some may be restarts)"""
    tasks: list[Task]
    """this rank's share"""
    probe_tasks: list[Task]
    """this rank's greedy probes (not trained on)"""
    client: ChatClient
    """what plays them (seeded by the step; restarts may give first replies)"""


@dataclass(frozen=True)
class Played:
    """A step's batch, played."""

    drawn: Drawn
    rollouts: list[Rollout]
    probes: list[Rollout]
    seconds: float
    """the rollouts' wall time"""
    gen_counts: dict[str, float]
    """this rank's in-process generation counts (`Generation.counters`)"""
    staleness: int = 0
    """optimizer steps between the weights that played it and those it updates"""
    waited: float = 0.0
    """seconds the trainer waited for it after the update (overlap)"""


class Batches:
    """Each step's batch, played now or (overlap) during the previous update."""

    def __init__(self, run: Run, generation: Generation, run_async: RunAsync[Any]) -> None:
        self.run, self.run_async = run, run_async
        self.overlap = run.cfg.generation.overlap
        self.snapshot = Snapshot(run.model) if self.overlap else None
        self.player = (
            open_player(run.cfg, generation, self.snapshot, run.tokenizer, run.dist) if self.snapshot else generation
        )
        self.pool = ThreadPoolExecutor(1, thread_name_prefix="rlvr-overlap") if self.overlap else None
        self.pending: Future[Played] | None = None
        self.ready: Played | None = None

    def __enter__(self) -> Batches:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        """A batch still in flight (the update failed or was interrupted) is waited for, so that
        the event loop is free again; its result or error is dropped."""
        if self.pending is not None:
            self.pending.exception()
            self.pending = None
        if self.pool is not None:
            self.pool.shutdown()

    def take(self, step: int) -> Played:
        """Step `step`'s batch: the one played ahead, or drawn and played now."""
        if self.ready is not None:
            played, self.ready = self.ready, None
            assert played.drawn.step == step, (played.drawn.step, step)
            return played
        drawn = self._draw(step)
        with full_weights(self.run.model):  # sharded: gathered whole for the generation, then freed
            if self.snapshot is not None:
                self.snapshot.refresh()
                self.player.weights_changed()
            return _play(self.run, self.player, drawn, self.run_async)

    def behaviour(self, played: Played) -> nn.Module | None:
        """The model whose log-probs are the old ones of `played`'s update: the snapshot where
        it played a step behind, else None (the policy itself)."""
        return self.snapshot.model if played.staleness and self.snapshot is not None else None

    def ahead(self, step: int) -> Callable[[], None] | None:
        """What starts step `step`'s batch during the update before it (None: that step plays
        its own, without overlap, at the end, or after a checkpoint)."""
        cfg = self.run.cfg
        save = cfg.save_every is not None and step % cfg.save_every == 0
        if not self.overlap or step >= cfg.steps or save:
            return None
        return lambda: self._start(step)

    def _start(self, step: int) -> None:
        assert self.pool is not None and self.snapshot is not None
        drawn = self._draw(step)
        self.snapshot.refresh()
        self.player.weights_changed()
        self.pending = self.pool.submit(_play, self.run, self.player, drawn, self.run_async)

    def wait(self) -> None:
        """The batch played ahead is in (its error, if any, raised here)."""
        if self.pending is None:
            return
        t0 = time.monotonic()
        played = self.pending.result()
        self.pending = None
        self.ready = replace(played, staleness=1, waited=time.monotonic() - t0)

    def metrics(self, played: Played) -> dict[str, float]:
        """`async/staleness` and `time/rollouts_wait` with overlap, else nothing."""
        if not self.overlap:
            return {}
        return {"async/staleness": float(played.staleness), "time/rollouts_wait": played.waited}

    def _draw(self, step: int) -> Drawn:
        run = self.run
        batch = run.restarts.fill(next(run.sampler), step)
        client = run.restarts.client(StepSeeded(self.player.client, run.cfg.seed, step))
        probes = run.dist.shard(run.restarts.probe_tasks(batch, step))
        return Drawn(step, batch, run.dist.shard(batch), probes, client)


def _play(run: Run, player: Generation, drawn: Drawn, run_async: RunAsync[Any]) -> Played:
    t0, counted = time.monotonic(), player.counters()
    rollouts, probes = run_async(_rollouts(run.env, drawn, run))
    gen_counts = {k: v - counted[k] for k, v in player.counters().items()}  # this rank's
    return Played(drawn, rollouts, probes, time.monotonic() - t0, gen_counts)


async def _rollouts(env: MultiTurnEnv[Any], drawn: Drawn, run: Run) -> tuple[list[Rollout], list[Rollout]]:
    """A group of rollouts of each task (the client may give some first replies: restart_explore)
    and one greedy rollout of each probe task, played side by side (one engine's batches hold both)."""
    sampling, group_size = run.sampling, run.cfg.group_size
    tasks, client = drawn.tasks, drawn.client
    concurrency = len(tasks) * group_size
    train = run_rollouts(env, client, tasks, sampling=sampling, rollouts_per_task=group_size, concurrency=concurrency)
    if not drawn.probe_tasks:
        return await train, []
    greedy = sampling.replace(temperature=0.0, top_p=1.0, logprobs=False)
    probe = run_rollouts(env, client, drawn.probe_tasks, sampling=greedy, concurrency=len(drawn.probe_tasks))
    rollouts, probes = await asyncio.gather(train, probe)
    return rollouts, probes
