"""Stratified batches: every batch holds the same number of tasks from each difficulty bucket.

Tasks are split into `num_buckets` equal-width buckets of a numeric key over [low, high]: the
environment's `difficulty(task)` (tic-tac-toe: the opponent's chance of a random move), an info
key, or any function of the task. Batch `step` takes `tasks_per_bucket` tasks from every
bucket, in bucket order, so each batch has a balanced mix of difficulties whatever the
dataset's order.

Order: each bucket is walked through a seeded permutation of its tasks; when a bucket runs out
it starts a fresh permutation (its next *epoch*), independently of the others, so buckets of
unequal size never stall. The batch at any step is a pure function of (tasks, seed, step):
the sampler's whole position is `step`, which `state_dict()` saves and `load_state_dict()`
restores (it refuses a state saved for another dataset or seed).

    sampler = StratifiedSampler.for_env(env, seed=0, num_buckets=8)
    batch = next(sampler)              # 8 tasks, one per difficulty bucket
    checkpoint["sampler"] = sampler.state_dict()
    ...
    sampler.load_state_dict(checkpoint["sampler"])   # continues with the next batch
"""

from __future__ import annotations

import hashlib
import math
import random
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

from rlvr.envs.multiturn import MultiTurnEnv
from rlvr.errors import UsageError
from rlvr.types import Task

Key = str | Callable[[Task], float | None]
STATE_FORMAT = "rlvr.sampler/2"
OLD_NAMES = {"rlvr.sampler/1": {"num_groups": "num_buckets", "tasks_per_group": "tasks_per_bucket"}}
"""Keys renamed since each older state format (format 1 said group for bucket)."""


@runtime_checkable
class Stratified(Protocol):
    """An environment whose tasks have a difficulty: the trainer stratifies its batches by it
    (opt-in, as the other training protocols of `rlvr.train.protocols`). Two attributes may go
    with it: `difficulty_range`, the [low, high] it spans (default: the smallest and largest of
    the tasks), and `num_buckets`, the equal-width buckets a batch is stratified into unless the
    trainer says (default 1)."""

    def difficulty(self, task: Task) -> float | None:
        """A number that orders tasks by difficulty (None: this task has none)."""
        ...


def bucket_index(value: float, low: float, high: float, num_buckets: int) -> int:
    """Which of `num_buckets` equal-width buckets over [low, high] holds `value`.

    Buckets are half-open [a, b) except the last, which is closed; a zero-width range puts
    everything in bucket 0.

    >>> [bucket_index(v, 0.0, 1.0, 4) for v in (0.0, 0.2499, 0.25, 0.99, 1.0)]
    [0, 0, 1, 3, 3]
    """
    if num_buckets < 1:
        raise UsageError(f"num_buckets must be >= 1, got {num_buckets}")
    if not (math.isfinite(value) and low <= value <= high):
        raise UsageError(f"value {value!r} lies outside the bucket range [{low}, {high}]")
    if high == low:
        return 0
    return min(int((value - low) / (high - low) * num_buckets), num_buckets - 1)


def bucket_range(index: int, low: float, high: float, num_buckets: int) -> tuple[float, float]:
    """The [start, end) range of bucket `index` (the last one includes `high`).

    >>> bucket_range(1, 0.0, 1.0, 4)
    (0.25, 0.5)
    """
    width = (high - low) / num_buckets
    end = high if index == num_buckets - 1 else low + (index + 1) * width
    return low + index * width, end


class StratifiedSampler:
    """Seeded, resumable batches holding `tasks_per_bucket` tasks from each of `num_buckets`
    equal-width buckets of `key` (an info key name, or a function of the task).

    `low` / `high` default to the smallest / largest key in `tasks`; pass the range the tasks
    were drawn from (e.g. the environment's min / max random-move probability) to get bucket
    edges that do not depend on the sample. Every bucket must hold at least
    `tasks_per_bucket` tasks. `for_env` builds one from an environment's declared difficulty.

    >>> tasks = [Task(id=str(i), question="?", info={"p": i / 10}) for i in range(10)]
    >>> s = StratifiedSampler(tasks, num_buckets=2, key="p", low=0.0, high=1.0, seed=1)
    >>> [sorted(t.info["p"] < 0.5 for t in next(s)) for _ in range(3)]
    [[False, True], [False, True], [False, True]]
    """

    def __init__(
        self,
        tasks: Sequence[Task],
        num_buckets: int,
        *,
        key: Key = "random_move_prob",
        low: float | None = None,
        high: float | None = None,
        seed: int = 0,
        tasks_per_bucket: int = 1,
    ) -> None:
        if num_buckets < 1:
            raise UsageError(f"num_buckets must be >= 1, got {num_buckets}")
        if tasks_per_bucket < 1:
            raise UsageError(f"tasks_per_bucket must be >= 1, got {tasks_per_bucket}")
        if not tasks:
            raise UsageError("the sampler needs at least one task, got none")
        values = [_key_value(key, t) for t in tasks]
        self.low = min(values) if low is None else float(low)
        self.high = max(values) if high is None else float(high)
        if self.low > self.high:
            raise UsageError(f"low must be <= high, got low={self.low}, high={self.high}")
        self.num_buckets = num_buckets
        self.tasks_per_bucket = tasks_per_bucket
        self.seed = seed
        self.buckets: list[list[Task]] = [[] for _ in range(num_buckets)]
        for task, value in zip(tasks, values):
            self.buckets[bucket_index(value, self.low, self.high, num_buckets)].append(task)
        for i, bucket in enumerate(self.buckets):
            if len(bucket) < tasks_per_bucket:
                a, b = self.ranges[i]
                raise UsageError(
                    f"bucket {i} (key in [{a:g}, {b:g}]) holds {len(bucket)} tasks but each batch "
                    f"takes {tasks_per_bucket}; use fewer buckets, more tasks or a wider range"
                )
        self.step = 0
        """Batches drawn so far; the next batch is `batch(step)`."""
        self._digest = _digest(self.buckets)
        self._perms: dict[int, tuple[int, list[int]]] = {}

    @classmethod
    def for_env(
        cls,
        env: MultiTurnEnv[Any],
        *,
        split: str = "train",
        seed: int = 0,
        num_buckets: int | None = None,
        tasks_per_bucket: int = 1,
    ) -> StratifiedSampler:
        """Batches of an environment's tasks, stratified by its `difficulty`.

        The buckets: `difficulty_buckets(env, num_buckets)` of them, over the env's
        `difficulty_range` (default: the tasks' own). An env without a difficulty gives one
        bucket: a seeded, resumable shuffle."""
        span = difficulty_span(env, split)
        key: Key = env.difficulty if span is not None and isinstance(env, Stratified) else (lambda task: 0.0)
        low, high = span if span is not None else (0.0, 0.0)
        buckets = difficulty_buckets(env, num_buckets, split)
        return cls(env.tasks(split), buckets, key=key, low=low, high=high, seed=seed, tasks_per_bucket=tasks_per_bucket)

    @property
    def ranges(self) -> list[tuple[float, float]]:
        """The key range of each bucket."""
        return [bucket_range(i, self.low, self.high, self.num_buckets) for i in range(self.num_buckets)]

    @property
    def batch_size(self) -> int:
        return self.num_buckets * self.tasks_per_bucket

    def batch(self, step: int) -> list[Task]:
        """The batch at `step` (pure: does not move the sampler)."""
        if step < 0:
            raise UsageError(f"step must be >= 0, got {step}")
        out: list[Task] = []
        for b, bucket in enumerate(self.buckets):
            for j in range(step * self.tasks_per_bucket, (step + 1) * self.tasks_per_bucket):
                epoch, pos = divmod(j, len(bucket))
                out.append(bucket[self._permutation(b, epoch)[pos]])
        return out

    def __iter__(self) -> Iterator[list[Task]]:
        return self

    def __next__(self) -> list[Task]:
        batch = self.batch(self.step)
        self.step += 1
        return batch

    def _permutation(self, bucket: int, epoch: int) -> list[int]:
        cached = self._perms.get(bucket)
        if cached is None or cached[0] != epoch:
            order = list(range(len(self.buckets[bucket])))
            # A str seed is hashed with SHA-512: the same order in every process.
            random.Random(f"rlvr.sampler/{self.seed}/{bucket}/{epoch}").shuffle(order)
            cached = (epoch, order)
            self._perms[bucket] = cached
        return cached[1]

    # ---- checkpointing ------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """The position to save in a checkpoint (plain JSON types)."""
        return {
            "format": STATE_FORMAT,
            "step": self.step,
            "seed": self.seed,
            "num_buckets": self.num_buckets,
            "tasks_per_bucket": self.tasks_per_bucket,
            "bucket_sizes": [len(b) for b in self.buckets],
            "digest": self._digest,
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Continue from a saved position; the sampler must be built the same way."""
        renamed = OLD_NAMES.get(str(state.get("format")))
        if renamed is not None:  # saved by an older rlvr: the same position under older key names
            state = {renamed.get(k, k): v for k, v in state.items()} | {"format": STATE_FORMAT}
        if state.get("format") != STATE_FORMAT:
            raise UsageError(f"not a sampler state (format {state.get('format')!r}, expected {STATE_FORMAT!r})")
        mine = self.state_dict()
        for name in ("seed", "num_buckets", "tasks_per_bucket", "bucket_sizes", "digest"):
            if state.get(name) != mine[name]:
                raise UsageError(
                    f"the saved sampler state has {name}={state.get(name)!r} but this sampler has "
                    f"{mine[name]!r}: resume with the same tasks, key, range and seed"
                )
        step = state.get("step")
        if not isinstance(step, int) or step < 0:
            raise UsageError(f"the saved sampler step must be an integer >= 0, got {step!r}")
        self.step = step


def difficulty_span(env: MultiTurnEnv[Any], split: str = "train") -> tuple[float, float] | None:
    """The [low, high] an env's difficulty spans: its `difficulty_range`, else the smallest and
    largest difficulty of the split's tasks; None when the env has no difficulty."""
    if not isinstance(env, Stratified):
        return None
    declared: tuple[float, float] | None = getattr(env, "difficulty_range", None)
    if declared is not None:
        return declared
    tasks = env.tasks(split)
    if not tasks or env.difficulty(tasks[0]) is None:
        return None
    values = [_key_value(env.difficulty, t) for t in tasks]
    return min(values), max(values)


def difficulty_buckets(env: MultiTurnEnv[Any], num_buckets: int | None = None, split: str = "train") -> int:
    """How many difficulty buckets `StratifiedSampler.for_env` cuts: `num_buckets` (default:
    the env's own `num_buckets`), or 1 when the env has no difficulty or its range has zero
    width."""
    span = difficulty_span(env, split)
    if span is None or span[0] == span[1]:
        return 1
    own: int = getattr(env, "num_buckets", 1)
    return num_buckets or own


def _key_value(key: Key, task: Task) -> float:
    if callable(key):
        value = key(task)
    elif key in task.info:
        value = task.info[key]
    else:
        raise UsageError(f"task {task.id!r} has no info[{key!r}] to stratify by; its info keys: {sorted(task.info)}")
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise UsageError(f"task {task.id!r}: the stratification key must be a finite number, got {value!r}")
    return float(value)


def _digest(buckets: list[list[Task]]) -> str:
    h = hashlib.blake2b(digest_size=8)
    for bucket in buckets:
        h.update("\x1f".join(t.id for t in bucket).encode() + b"\x1e")
    return h.hexdigest()
