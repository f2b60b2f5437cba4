"""`rlvr.train.restarts` alone (no model): which rollouts offer restarts, the buffer's bounds,
and hostile records (NaN rewards, lone surrogates, huge replies) through a checkpoint."""

from __future__ import annotations

import asyncio
import dataclasses
import io
import math

import pytest

torch = pytest.importorskip("torch")

from rlvr import MultiTurnEnv, Rubric
from rlvr.engine import run_rollouts
from rlvr.train.restarts import Restarts, weigh_given
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


class ThreePoints(Echo):
    """Three restart points in the episode's order, each its own conversation."""

    def restart_tasks(self, task, rollout):
        text = rollout.completion[0]["content"]
        return [
            Task(id=f"{task.id}@{n}", prompt=({"role": "user", "content": f"{text} point {n}"},)) for n in (1, 2, 3)
        ]


def group(task_id: str, rewards: list[float], error: str | None = None) -> list[Rollout]:
    return [rollout(task_id, "restart", r, error=error if i == 0 else None) for i, r in enumerate(rewards)]


def test_backtrack_restarts_move_one_turn_earlier_while_the_whole_group_fails() -> None:
    tasks = [Task(id="t0", question="q"), Task(id="t1", question="q")]
    r = Restarts(ThreePoints(), frac=0.5, below=0.5, tasks_per_batch=2, seed=0, points="backtrack")  # 1 a batch
    r.add([rollout("t0", "lost", 0.0)], tasks, step=0)
    assert [t.prompt[0]["content"] for t in r.buffer] == ["lost point 3"]  # the last point only
    first = r.fill(tasks, step=1)
    (played,) = r.played
    assert played.startswith("t0~r") and played in {t.id for t in first}
    r.add(group(played, [0.0, 0.0, 0.2]), first, step=1)  # every continuation lost: one turn earlier
    assert [t.prompt[0]["content"] for t in r.buffer] == ["lost point 2"] and r.backtracked == 1
    assert r.metrics(group(played, [0.0]))["restart/backtracked"] == 1.0
    second = r.fill(tasks, step=2)
    (again,) = r.played
    r.add(group(again, [0.0, 1.0, 0.0]), second, step=2)  # one did better: the mistake is here, stop
    assert r.buffer == [] and r.earlier == {} and r.backtracked == 0


def test_backtrack_stops_at_the_first_point_and_after_a_failed_rollout() -> None:
    tasks = [Task(id="t0", question="q"), Task(id="t1", question="q")]
    r = Restarts(ThreePoints(), frac=0.5, below=0.5, tasks_per_batch=2, seed=0, points="backtrack")
    r.add([rollout("t0", "lost", 0.0), rollout("t1", "other", 0.0)], tasks, step=0)
    assert len(r.buffer) == 2 and len(r.earlier) == 2
    saved = r.state_dict()  # the earlier points travel with the buffer (a checkpoint)
    again = Restarts(ThreePoints(), frac=0.5, below=0.5, tasks_per_batch=2, seed=0, points="backtrack")
    again.load_state_dict(saved)
    assert again.earlier == r.earlier and again.buffer == r.buffer
    batch = r.fill(tasks, step=1)
    (played,) = r.played
    r.add(group(played, [0.0, 0.0], error="TimeoutError: x"), batch, step=1)  # a failure proves nothing
    assert r.backtracked == 0 and played not in r.earlier
    seen = []
    for step in range(2, 6):  # the other restart: back through points 2 and 1, then no earlier turn
        batch = r.fill(tasks, step=step)
        if not r.played:
            break
        (played,) = r.played
        seen += [t.prompt[0]["content"].split(" point ")[1] for t in batch if t.id == played]
        r.add(group(played, [0.0, 0.0]), batch, step=step)
    assert seen == ["3", "2", "1"] and r.buffer == [] and r.earlier == {}


def test_a_nan_score_stops_a_backtrack() -> None:
    tasks = [Task(id="t0", question="q"), Task(id="t1", question="q")]
    r = Restarts(ThreePoints(), frac=0.5, below=0.5, tasks_per_batch=2, seed=0, points="backtrack")
    r.add([rollout("t0", "lost", 0.0)], tasks, step=0)
    batch = r.fill(tasks, step=1)
    (played,) = r.played
    r.add(group(played, [0.0, math.nan]), batch, step=1)  # NaN is not "below": nothing says it failed
    assert r.backtracked == 0 and r.buffer == [] and r.earlier == {}


def test_greedy_probes_play_ordinary_tasks_with_new_seeds_and_offer_restarts_last() -> None:
    r = Restarts(Echo(), frac=0.5, below=0.5, tasks_per_batch=2, seed=3, greedy=5)
    batch = [Task(id="a", prompt=(), seed=1), Task(id="b", prompt=(), seed=2)]
    assert r.probe_tasks(r.fill(batch, 0), 0) and [t.id for t in r.probing] == ["a~g0", "b~g1", "a~g2", "b~g3", "a~g4"]
    assert len({t.seed for t in r.probing} | {1, 2}) == 7  # five new games
    assert [t.seed for t in r.probe_tasks(batch, 0)] == [t.seed for t in r.probing]  # a function of (seed, step)
    assert {t.seed for t in r.probe_tasks(batch, 1)}.isdisjoint({t.seed for t in r.probe_tasks(batch, 0)})
    r.add(
        [rollout("a", "sampled", 1.0)], batch, 0, probes=[rollout("b~g1", "greedy", 0.0), rollout("a~g0", "won", 1.0)]
    )
    assert [t.id for t in r.buffer] == ["b~g1~r1"]  # only the lost probe, under its own root
    assert r.metrics([])["restart/greedy_below"] == 0.5
    # a NaN score (a broken reward function) offers nothing and does not count as below
    r.probe_tasks(batch, 1)
    r.add([], batch, 1, probes=[rollout("a~g0", "nan \ud800" + "x" * 100_000, math.nan)])
    assert len(r.buffer) == 1 and r.metrics([])["restart/greedy_below"] == 0.0
    # a batch of restarts only has no ordinary task to probe; nothing stale is offered
    r.played = {"a", "b"}
    assert r.probe_tasks(batch, 2) == [] and r.probing == []
    r.add([], batch, 2, probes=[rollout("b~g1", "stale", 0.0)])
    assert len(r.buffer) == 1 and "restart/greedy_below" not in r.metrics([])


class EveryTurn(Echo):
    """A restart point before each model turn after the first: the conversation up to there."""

    def restart_tasks(self, task, rollout):
        head, out = list(task.prompt), []
        for n, turn in enumerate(rollout.turns[:-1], start=1):
            head += [turn.completion.message(), *turn.env_messages]
            out.append(Task(id=f"{task.id}@{n}", prompt=tuple(head)))
        return out


def sure(task_id: str, reward: float, *logprobs: list[float] | None, say: str = "reply") -> Rollout:
    """A probe whose turns' replies had these token log-probabilities."""
    turns = [
        Turn(Completion(f"{say} {i}", logprobs=lp), [{"role": "user", "content": f"hint {i}"}])
        for i, lp in enumerate(logprobs)
    ]
    return Rollout(task_id=task_id, rollout_index=0, seed=0, prompt=[], turns=turns, reward=reward)


def test_unsure_turns_of_greedy_probes_are_restarted_whatever_the_probe_scored() -> None:
    batch = [Task(id="a", prompt=({"role": "user", "content": "q"},), seed=1)]
    r = Restarts(EveryTurn(), frac=0.5, below=0.5, tasks_per_batch=4, seed=3, greedy=2, unsure=0.5)  # 2 a batch
    r.probe_tasks(batch, 0)
    won = sure("a~g0", 1.0, [-0.01], [-1.0, -0.5], [-0.05], [-0.3, -0.3, -0.3])  # turns 1 and 3 unsure: 0.22, 0.41
    lost = sure("a~g1", 0.0, [-0.01], [-0.01], [-0.01], say="lost")  # sure everywhere, but lost: a failure point
    r.add([], batch, 0, probes=[won, lost])
    replies = [[m["content"] for m in t.prompt if m["role"] == "assistant"] for t in r.buffer]
    assert replies[:2] == [["reply 0"], ["reply 0", "reply 1", "reply 2"]] and replies[2][0] == "lost 0"
    assert r.metrics([])["restart/unsure"] == 2.0  # the least sure first, then the lost probe's point last
    # at most a batch's worth a step (the least sure kept); no log-probabilities, NaN, turn 0: none
    r = Restarts(EveryTurn(), frac=0.25, below=0.5, tasks_per_batch=4, seed=3, greedy=2, unsure=0.5)  # 1 a batch
    r.probe_tasks(batch, 0)
    hostile = sure("a~g1", 1.0, [-5.0], None, [math.nan], [-9.0, -9.0], [math.inf, -math.inf], [1000.0], [-math.inf])
    r.add([], batch, 0, probes=[won, hostile])
    assert [[m["content"] for m in t.prompt if m["role"] == "assistant"][-1] for t in r.buffer] == ["reply 5"]
    # (the reply of probability 0 is the least sure); room for all: inf - inf and +1000 are skipped
    r = Restarts(EveryTurn(), frac=0.5, below=0.5, tasks_per_batch=16, seed=3, greedy=2, unsure=0.5)  # 8 a batch
    r.probe_tasks(batch, 0)
    r.add([], batch, 0, probes=[won, hostile])
    assert sorted(len(t.prompt) for t in r.buffer) == [3, 7, 13]  # turns 1, 3 (both probes: the same), 6
    # a lost probe's points are asked of the env once, for its unsure turns and its failure
    asked = []

    class Counting(EveryTurn):
        def restart_tasks(self, task, rollout):
            asked.append(rollout.task_id)
            return super().restart_tasks(task, rollout)

    r = Restarts(Counting(), frac=0.5, below=0.5, tasks_per_batch=4, seed=3, greedy=2, unsure=0.5)
    r.probe_tasks(batch, 0)
    r.add([], batch, 0, probes=[won, lost])
    assert sorted(asked) == ["a~g0", "a~g1"] and len(r.buffer) == 3
    # off by default: the same probes offer only their failures
    r = Restarts(EveryTurn(), frac=0.5, below=0.5, tasks_per_batch=4, seed=3, greedy=2)
    r.probe_tasks(batch, 0)
    r.add([], batch, 0, probes=[won])
    assert r.buffer == [] and "restart/unsure" not in r.metrics([])


class Harder(Echo):
    """Its probes meet a harder opponent than its training tasks (an env's `probe_task`)."""

    def probe_task(self, task, seed):
        return dataclasses.replace(task, seed=seed, id="ignored", info={**task.info, "hard": True})


def test_the_env_makes_its_probes_and_the_trainer_names_them() -> None:
    r = Restarts(Harder(), frac=0.5, below=0.5, tasks_per_batch=2, seed=3, greedy=3)
    batch = [Task(id="a", prompt=(), seed=1, info={"k": 1}), Task(id="b", prompt=(), seed=2)]
    plain = Restarts(Echo(), frac=0.5, below=0.5, tasks_per_batch=2, seed=3, greedy=3).probe_tasks(batch, 0)
    probes = r.probe_tasks(batch, 0)
    assert [t.id for t in probes] == [t.id for t in plain] == ["a~g0", "b~g1", "a~g2"]
    assert [t.seed for t in probes] == [t.seed for t in plain]  # the trainer's seeds, passed to the env
    assert [t.info for t in probes] == [{"k": 1, "hard": True}, {"hard": True}, {"k": 1, "hard": True}]
    assert batch[0].info == {"k": 1}  # the training task itself is unchanged


def test_no_probes_without_restarts() -> None:
    r = Restarts(Echo(), frac=0.0, below=0.5, tasks_per_batch=2, seed=3, greedy=4)
    assert r.probe_tasks([Task(id="a", prompt=())], 0) == []


class Offers(Echo):
    """Echo whose restarts offer `options` as other replies (an exception is raised)."""

    options: object = ("a", "b", "c")

    def other_replies(self, task):
        if isinstance(self.options, Exception):
            raise self.options
        return list(self.options)


def test_explore_gives_the_last_rollouts_of_each_restart_distinct_replies_while_there_are_enough() -> None:
    tasks = [Task(id=f"t{i}", question="q") for i in range(4)]
    env = Offers()
    r = Restarts(env, frac=0.5, below=0.5, tasks_per_batch=4, seed=0, explore=2, group_size=4)
    r.add([rollout(f"t{i}", f"lost {i}", 0.0) for i in range(4)], tasks, step=0)
    r.fill(tasks, step=1)
    assert len(r.played) == 2 and {i for _, i in r.given} == {2, 3} and {t for t, _ in r.given} == r.played
    for played in r.played:
        assert len({r.given[played, 2], r.given[played, 3]}) == 2  # drawn without replacement
    env.options = ("only",)
    r.fill(tasks, step=2)
    assert set(r.given.values()) == {"only"} and len(r.given) == 4  # too few: drawn with replacement
    env.options = RuntimeError("board unreadable")
    r.add([rollout(f"t{i}", f"lost again {i}", 0.0) for i in range(4)], tasks, step=3)
    with pytest.warns(UserWarning, match="other_replies failed.*board unreadable"):
        r.fill(tasks, step=4)
    assert len(r.played) == 2 and r.given == {}  # the restarts play on, every rollout its own
    for bad in (["a", 7], ["a", ""], [None], [b"bytes"]):  # not text: that restart gets none
        env.options = bad
        fresh = Restarts(env, frac=0.5, below=0.5, tasks_per_batch=4, seed=0, explore=2, group_size=4)
        fresh.add([rollout(f"t{i}", f"lost {i}", 0.0) for i in range(4)], tasks, step=0)
        with pytest.warns(UserWarning, match="other_replies gave 1 of .* not text"):
            fresh.fill(tasks, step=1)
        assert len(fresh.played) == 2 and fresh.given == {}
    with pytest.raises(Exception, match="offers no other replies"):
        Restarts(Echo(), frac=0.5, below=0.5, tasks_per_batch=4, seed=0, explore=1, group_size=4)


class Giver:
    """Says "own" to every request; a given reply comes back as its own text, marked given."""

    name = "giver"

    async def chat(self, messages, sampling, tools=None):
        return Completion(text="own")

    async def give(self, messages, text, tools=None):
        return Completion(text=text, token_ids=[1, 2], finish_reason="given")

    async def aclose(self) -> None:
        pass


class Cannot(Giver):
    give = None  # a client that cannot give a reply


def test_the_restarts_client_gives_only_the_first_reply_of_the_rollouts_named() -> None:
    """`Restarts.client`: the engine plays every task of the batch with one client; each
    rollout `fill` chose gets its reply at its first request and nothing after, and no other
    rollout gets one, not even those of the restarted task itself (same seed, shorter prompt)."""
    env = Offers()
    env.options, env.max_turns = ("given!",), 2
    r = Restarts(env, frac=0.5, below=0.5, tasks_per_batch=2, seed=0, explore=1, group_size=3)
    task = Task(id="t0", question="q")
    r.add([rollout("t0", "lost", 0.0)], [task], step=0)
    batch = r.fill([task, task], step=1)
    (restart,) = r.chosen
    assert restart.seed == task.seed and r.given == {(restart.id, 2): "given!"}
    got = asyncio.run(run_rollouts(env, r.client(Giver()), batch, rollouts_per_task=3))
    texts = {g.key: [t.completion.text for t in g.turns] for g in got}
    assert texts[restart.id, 2] == ["given!", "own"] and len(texts) == 6
    assert all(t == ["own", "own"] for k, t in texts.items() if k != (restart.id, 2))
    assert [g.turns[0].completion.finish_reason for g in got].count("given") == 1
    unexplored = Restarts(env, frac=0.5, below=0.5, tasks_per_batch=2, seed=0)
    client = Giver()
    assert unexplored.client(client) is client  # nothing given: the client itself
    got = asyncio.run(run_rollouts(env, r.client(Cannot()), batch, rollouts_per_task=3))
    (failed,) = [g for g in got if g.error]
    assert failed.key == (restart.id, 2) and "cannot give a reply" in failed.error and failed.turns == []


def test_two_restarts_of_one_game_keep_their_own_given_replies() -> None:
    """Restarts of one game share its seed: each keeps its reply, and a later restart (whose
    conversation begins with the earlier one's prompt) gets its own, not the earlier's."""
    from rlvr.train.given import GivenFirst
    from rlvr.types import SamplingArgs

    short = [{"role": "user", "content": "board after 1 move"}]
    long = [*short, {"role": "assistant", "content": "X4"}, {"role": "user", "content": "board after 3 moves"}]
    client = GivenFirst(Giver(), {7: [(short, "early"), (long, "late")]})
    ask = lambda messages: asyncio.run(client.chat(messages, SamplingArgs(seed=7))).text  # noqa: E731
    assert [ask(long), ask(short), ask(short), ask(long)] == ["late", "early", "own", "own"]


def test_weigh_given_scales_only_the_given_turn_of_given_rollouts() -> None:
    given = rollout("t0", "x", 1.0)
    given.turns[0].completion.finish_reason = "given"
    plain = rollout("t0", "y", 0.0)
    out = weigh_given([given, plain, given], [2.0, -1.0, [3.0, 5.0]], 0.25)  # a number, or one per turn
    assert out == [[0.5, 2.0], -1.0, [0.75, 5.0]]
