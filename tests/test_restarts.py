"""`rlvr.train.restarts` alone (no model): which rollouts offer restarts, the buffer's bounds,
and hostile records (NaN rewards, lone surrogates, huge replies) through a checkpoint."""

from __future__ import annotations

import io
import math

import pytest

torch = pytest.importorskip("torch")

from rlvr import MultiTurnEnv, Rubric
from rlvr.train.restarts import Restarts
from rlvr.types import Completion, Rollout, Task, Turn


def nothing(completion) -> float:
    return 0.0


class Echo(MultiTurnEnv):
    """Restarts after the first turn, the conversation so far as the prompt."""

    def __init__(self) -> None:
        super().__init__([{"id": "0", "question": "q"}], rubric=Rubric([nothing]))

    def restart_tasks(self, task, rollout):
        return [Task(id=task.id + "@1", prompt=({"role": "user", "content": "q"}, *rollout.completion[:2]))]


def rollout(task_id: str, text: str, reward: float, error: str | None = None) -> Rollout:
    turns = [Turn(Completion(text), [{"role": "user", "content": "again"}]), Turn(Completion("end"))]
    return Rollout(task_id=task_id, rollout_index=0, seed=0, prompt=[], turns=turns, reward=reward, error=error)


def test_which_rollouts_offer_restarts_and_the_buffer_stays_bounded() -> None:
    tasks = [Task(id=f"t{i}", question="q") for i in range(8)]
    r = Restarts(Echo(), frac=0.25, below=0.5, tasks_per_batch=8, seed=0)  # 2 a batch, 8 kept
    played = [rollout("t0", "low", 0.1), rollout("t1", "high", 0.9), rollout("t2", "nan", math.nan)]
    played += [rollout("t3", "failed", 0.0, error="ValueError: x"), rollout("t4", "low", 0.1)]  # t4: same text as t0
    played += [rollout("nope", "unknown task", 0.0)]
    r.add(played, tasks, step=0)
    assert [t.prompt[1]["content"] for t in r.buffer] == ["low"]  # NaN, failed, high, duplicate, unknown: none
    r.add([rollout(f"t{i % 8}", f"reply {i}", 0.0) for i in range(20)], tasks, step=1)
    assert len(r.buffer) == 8 and r.buffer[-1].prompt[1]["content"] == "reply 19"  # the newest kept
    batch = r.fill(tasks, step=2)
    assert len(batch) == 8 and len(r.played) == 2 and len(r.buffer) == 6
    assert all("~r" in t.id for t in batch if t.id in r.played)


def test_hostile_restarts_survive_a_checkpoint() -> None:
    tasks = [Task(id="t0", question="q")]
    r = Restarts(Echo(), frac=0.5, below=1.0, tasks_per_batch=2, seed=0)
    r.add([rollout("t0", "\ud800 lone surrogate <think> unclosed " + "x" * 1_000_000, 0.0)], tasks, step=0)
    buf = io.BytesIO()
    torch.save({"restarts": r.state_dict()}, buf)  # as trainer.pt holds it
    again = Restarts(Echo(), frac=0.5, below=1.0, tasks_per_batch=2, seed=0)
    again.load_state_dict(torch.load(io.BytesIO(buf.getvalue()), weights_only=False)["restarts"])
    assert again.buffer == r.buffer and again.serial == r.serial == 1
    again.add([rollout("t0", "\ud800 lone surrogate <think> unclosed " + "x" * 1_000_000, 0.0)], tasks, step=1)
    assert len(again.buffer) == 1  # the same conversation is not kept twice


class TwoPoints(Echo):
    """Two restart points: after the first reply and its answer, and after the whole conversation."""

    def restart_tasks(self, task, rollout):
        head = ({"role": "user", "content": "q"},)
        return [Task(id=f"{task.id}@{n}", prompt=head + tuple(rollout.completion[: 2 * n])) for n in (1, 2)]


@pytest.mark.parametrize("points, kept", [("random", 1), ("all", 2)])
def test_restart_points_random_keeps_one_all_keeps_every_one(points: str, kept: int) -> None:
    tasks = [Task(id="t0", question="q")]
    r = Restarts(TwoPoints(), frac=0.5, below=0.5, tasks_per_batch=4, seed=0, points=points)  # 8 kept
    r.add([rollout("t0", "lost", 0.0)], tasks, step=0)
    assert len(r.buffer) == kept
    if points == "all":  # both turns, in order, each its own restart
        assert [len(t.prompt) for t in r.buffer] == [3, 4] and len({t.id for t in r.buffer}) == 2


def test_unknown_restart_points_are_refused() -> None:
    with pytest.raises(Exception, match="restart_points"):
        Restarts(TwoPoints(), frac=0.5, below=0.5, tasks_per_batch=4, seed=0, points="first")
