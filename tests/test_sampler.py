"""The stratified sampler: one task per bucket, right ranges, seeded order, exact resume."""

from __future__ import annotations

import hashlib
import json
from collections import Counter

import pytest

from rlvr import MultiTurnEnv, State
from rlvr.errors import UsageError
from rlvr.sampler import StratifiedSampler, bucket_index, bucket_range, difficulty_buckets
from rlvr.types import Task


def tasks_with(values: list[float], key: str = "p") -> list[Task]:
    return [Task(id=f"t{i}", question="?", info={key: v}) for i, v in enumerate(values)]


def spread(n: int) -> list[float]:
    """n values spread over [0, 1), shuffled so the dataset's order tells nothing."""
    return [((i * 7919) % n) / n for i in range(n)]


def test_every_batch_holds_one_task_from_each_bucket_with_the_right_range():
    sampler = StratifiedSampler(tasks_with(spread(100)), num_buckets=4, key="p", low=0.0, high=1.0)
    assert sampler.ranges == [(0.0, 0.25), (0.25, 0.5), (0.5, 0.75), (0.75, 1.0)]
    for _ in range(60):
        batch = next(sampler)
        assert len(batch) == sampler.batch_size == 4
        for (lo, hi), task in zip(sampler.ranges, batch):
            assert lo <= task.info["p"] < hi


def test_each_epoch_visits_every_task_of_a_bucket_once():
    sampler = StratifiedSampler(tasks_with(spread(40)), num_buckets=4, key="p", low=0.0, high=1.0, seed=3)
    seen = Counter(t.id for _ in range(10) for t in next(sampler))  # 10 tasks per bucket
    assert len(seen) == 40 and set(seen.values()) == {1}


def test_unequal_buckets_cycle_independently():
    values = [0.1] * 2 + [0.9] * 5  # bucket 0 has 2 tasks, bucket 1 has 5
    sampler = StratifiedSampler(tasks_with(values), num_buckets=2, key="p", low=0.0, high=1.0)
    batches = [next(sampler) for _ in range(10)]
    assert Counter(b[0].id for b in batches) == {"t0": 5, "t1": 5}
    assert Counter(b[1].id for b in batches) == {f"t{i}": 2 for i in range(2, 7)}


def test_order_is_seeded_and_independent_of_the_dataset_order():
    values = spread(64)
    a = StratifiedSampler(tasks_with(values), 4, key="p", low=0.0, high=1.0, seed=7)
    b = StratifiedSampler(tasks_with(values), 4, key="p", low=0.0, high=1.0, seed=7)
    c = StratifiedSampler(tasks_with(values), 4, key="p", low=0.0, high=1.0, seed=8)
    ids = [[t.id for t in next(s)] for s in (a, b, c) for _ in range(16)]
    assert ids[:16] == ids[16:32] and ids[:16] != ids[32:]
    assert [t.id for t in a.batch(3)] == ids[3]  # batch(step) is pure


def test_resume_from_a_saved_state_continues_exactly():
    tasks = tasks_with(spread(30))
    full = StratifiedSampler(tasks, 3, key="p", low=0.0, high=1.0, seed=1)
    expected = [[t.id for t in next(full)] for _ in range(25)]
    first = StratifiedSampler(tasks, 3, key="p", low=0.0, high=1.0, seed=1)
    for _ in range(12):
        next(first)
    saved = json.loads(json.dumps(first.state_dict()))  # survives a JSON checkpoint
    resumed = StratifiedSampler(tasks, 3, key="p", low=0.0, high=1.0, seed=1)
    resumed.load_state_dict(saved)
    assert [[t.id for t in next(resumed)] for _ in range(13)] == expected[12:]


def test_resume_refuses_another_dataset_or_seed():
    tasks = tasks_with(spread(30))
    state = StratifiedSampler(tasks, 3, key="p", low=0.0, high=1.0, seed=1).state_dict()
    with pytest.raises(UsageError, match="seed"):
        StratifiedSampler(tasks, 3, key="p", low=0.0, high=1.0, seed=2).load_state_dict(state)
    other = [Task(id=f"u{i}", question="?", info=t.info) for i, t in enumerate(tasks)]  # other ids
    with pytest.raises(UsageError, match="digest"):
        StratifiedSampler(other, 3, key="p", low=0.0, high=1.0, seed=1).load_state_dict(state)
    with pytest.raises(UsageError, match="format"):
        StratifiedSampler(tasks, 3, key="p", low=0.0, high=1.0, seed=1).load_state_dict({"step": 3})


def test_several_tasks_per_bucket():
    sampler = StratifiedSampler(tasks_with(spread(40)), 2, key="p", low=0.0, high=1.0, tasks_per_bucket=3)
    batch = next(sampler)
    assert len(batch) == 6
    assert [t.info["p"] < 0.5 for t in batch] == [True] * 3 + [False] * 3
    assert len({t.id for t in batch}) == 6


def test_key_function_and_default_range():
    tasks = [Task(id=str(i), question="?", info={"level": i}) for i in range(6)]
    sampler = StratifiedSampler(tasks, 3, key=lambda t: t.info["level"] * 10.0)
    assert (sampler.low, sampler.high) == (0.0, 50.0)
    assert [sorted(t.id for t in b) for b in sampler.buckets] == [["0", "1"], ["2", "3"], ["4", "5"]]


def test_bad_inputs_get_clear_errors():
    with pytest.raises(UsageError, match=r"bucket 1 .* holds 0 tasks"):
        StratifiedSampler(tasks_with([0.1, 0.2, 0.9]), 3, key="p", low=0.0, high=1.0)
    with pytest.raises(UsageError, match=r"no info\['q'\]"):
        StratifiedSampler(tasks_with([0.1]), 1, key="q")
    with pytest.raises(UsageError, match="finite number"):
        StratifiedSampler([Task(id="a", question="?", info={"p": "high"})], 1, key="p")
    with pytest.raises(UsageError, match="outside"):
        StratifiedSampler(tasks_with([0.5, 1.5]), 2, key="p", low=0.0, high=1.0)
    with pytest.raises(UsageError, match="num_buckets"):
        StratifiedSampler(tasks_with([0.5]), 0, key="p")


def test_bucket_edges():
    assert bucket_index(0.5, 0.0, 1.0, 2) == 1  # lower edge belongs to the upper bucket
    assert bucket_index(1.0, 0.0, 1.0, 2) == 1  # the last bucket is closed
    assert bucket_index(0.3, 0.3, 0.3, 5) == 0  # zero-width range: one bucket
    assert bucket_range(2, 0.2, 0.7, 5) == pytest.approx((0.4, 0.5))
    assert bucket_range(4, 0.2, 0.7, 5)[1] == 0.7


def test_a_state_saved_in_format_1_still_resumes():
    tasks = tasks_with(spread(30))
    sampler = StratifiedSampler(tasks, 3, key="p", low=0.0, high=1.0, seed=1, tasks_per_bucket=2)
    for _ in range(5):
        next(sampler)
    state = sampler.state_dict()
    old = {
        "num_groups" if k == "num_buckets" else "tasks_per_group" if k == "tasks_per_bucket" else k: v
        for k, v in state.items()
    }
    old["format"] = "rlvr.sampler/1"
    resumed = StratifiedSampler(tasks, 3, key="p", low=0.0, high=1.0, seed=1, tasks_per_bucket=2)
    resumed.load_state_dict(old)
    assert resumed.step == 5 and next(resumed) == next(sampler)


# ---- an environment's declared difficulty ----------------------------------------------------


class Levels(MultiTurnEnv[State]):
    """Tasks with a level 0..9 as their difficulty."""

    def __init__(self, declared: tuple[float, float] | None = None, has_difficulty: bool = True) -> None:
        super().__init__([Task(id=str(i), question="?", info={"level": i}) for i in range(10)])
        self.difficulty_range, self.has_difficulty, self.num_buckets = declared, has_difficulty, 2

    def difficulty(self, task: Task) -> float | None:
        return float(task.info["level"]) if self.has_difficulty else None


def test_for_env_buckets_by_the_declared_difficulty_and_range():
    env = Levels(declared=(0.0, 18.0))
    sampler = StratifiedSampler.for_env(env, seed=3)
    assert difficulty_buckets(env) == sampler.num_buckets == env.num_buckets == 2
    assert sampler.ranges == [(0.0, 9.0), (9.0, 18.0)]  # the declared range, not the tasks' own
    assert [len(b) for b in sampler.buckets] == [9, 1]


def test_for_env_without_a_declared_range_uses_the_tasks_own():
    sampler = StratifiedSampler.for_env(Levels(), num_buckets=3, tasks_per_bucket=2)
    assert (sampler.low, sampler.high, sampler.num_buckets, sampler.batch_size) == (0.0, 9.0, 3, 6)
    assert [sorted(int(t.id) for t in b) for b in sampler.buckets] == [[0, 1, 2], [3, 4, 5], [6, 7, 8, 9]]


def test_an_env_without_difficulty_or_with_a_zero_width_range_is_one_shuffled_bucket():
    flat = Levels()
    flat.dataset = tasks_with([0.0] * 10)
    flat.difficulty = lambda task: 5.0  # type: ignore[method-assign]
    for env in (Levels(has_difficulty=False), MultiTurnEnv(tasks_with([0.0] * 10)), flat):
        assert difficulty_buckets(env, num_buckets=4) == 1
        sampler = StratifiedSampler.for_env(env, seed=1, num_buckets=4, tasks_per_bucket=3)
        assert sampler.num_buckets == 1 and len({t.id for t in next(sampler)}) == sampler.batch_size == 3


# ---- the batches are the ones the env-built samplers gave (before difficulty became data) ---


def _digest(sampler: StratifiedSampler, steps: int = 50) -> str:
    ids = "|".join(",".join(t.id for t in next(sampler)) for _ in range(steps))
    return hashlib.blake2b(ids.encode(), digest_size=8).hexdigest()


@pytest.mark.parametrize(
    ("env_args", "sampler_args", "first_batch", "digest"),
    [  # recorded at fdc4f28 with env.sampler(seed, num_groups=..., tasks_per_group=...)
        (
            {"num_tasks": 64, "eval_tasks": 8},
            {"seed": 3},
            ["train-48", "train-41", "train-58", "train-51", "train-20", "train-21", "train-54", "train-7"],
            "8ba80579c27e57df",
        ),
        ({"num_tasks": 64}, {"seed": 3, "num_buckets": 4, "tasks_per_bucket": 2}, None, "0494b78b2af52b67"),
        (
            {"num_tasks": 1000, "min_random_move_prob": 0.2, "max_random_move_prob": 0.7},
            {"seed": 2, "num_buckets": 32, "tasks_per_bucket": 2},
            None,
            "3acf6591f9f98a0b",
        ),
        (
            {"opponent": "optimal", "num_tasks": 50},
            {"seed": 5, "tasks_per_bucket": 4},
            ["train-28", "train-19", "train-16", "train-27"],
            "f312ec7902a6f7cc",
        ),
    ],
)
def test_tictactoe_batches_are_unchanged(env_args, sampler_args, first_batch, digest):
    from rlvr_tictactoe.env import load_environment

    env = load_environment(**env_args)
    if first_batch is not None:
        assert [t.id for t in StratifiedSampler.for_env(env, **sampler_args).batch(0)] == first_batch
    assert _digest(StratifiedSampler.for_env(env, **sampler_args)) == digest


def test_batches_of_an_env_without_difficulty_are_unchanged():
    from reverse_text import load_environment

    sampler = StratifiedSampler.for_env(load_environment(num_tasks=30), seed=7, tasks_per_bucket=4)
    assert [t.id for t in sampler.batch(0)] == ["train-6", "train-16", "train-13", "train-27"]
    assert _digest(sampler) == "1373d5dc4747b94e"
