"""Restarts: training episodes that begin again at a model turn of an earlier, poorly scored one.

With `restart_frac` > 0 that share of each batch's tasks are restarts. After every step, each
rollout that scored below `restart_below` (failed ones aside) offers the environment's restart
points (`Restartable.restart_tasks`, `rlvr.train.protocols`: its task again, the prompt
extended by the conversation up to one of the model's later turns); one of them, drawn at
random (`restart_points = "random"`), or all of them (`"all"`), join a buffer of the newest
restarts, one per distinct conversation. Each restart is played once, by a whole group.

Why: in a long episode a group's advantage scores the whole episode, and a mistake the policy
makes rarely, in a position it rarely reaches, is rarely sampled beside its fix. A restart
puts the group at the turn before the mistake, so the group compares moves from there: the
policy meets its own failures again until it stops making them (the buffer then drains and
the batch holds ordinary tasks). The restart points come from the policy's own training
episodes, so nothing is hand-labelled.

One point drawn at random often lies after the mistake, where every continuation loses and
the group carries no gradient; "all" always includes the turn before the mistake, at the cost
of playing the others too (without knowing which turn was the mistake: that would need an
evaluator, and training must not learn from one). "backtrack" lets the groups find it: a
rollout offers its last restart point, and when a restart's whole group scores below
`restart_below` again (every continuation from there failed, so the mistake came earlier), the
point one model turn earlier joins the buffer, and so on back to the episode's second turn; a
group where some continuation did better stops there, at a turn whose group has a reward spread.
Restarts' own rollouts offer nothing else in that mode.

Greedy probes (`restart_greedy` = n > 0): each step also plays n games at temperature 0, the
batch's ordinary tasks in turn with new seeds (the env's `probe_task` makes each), not trained
on; those scoring below `restart_below` offer their restart points like any training rollout.
Why: what an evaluation measures is the greedy policy, and its mistakes are often near-ties,
moves it prefers by a hair. Sampled games make such a mistake about half the time in that
position, and only if they reach it; the greedy game makes it every time it gets there. The
probe games are the policy's own against the training opponent, not an evaluator's.

Unsure turns (`restart_unsure` = u > 0, with probes): each probe, whatever it scored, also
offers the restart point before each of its model turns whose greedy reply had a probability
below u at temperature 1 (the exponential of the sum of its tokens' log-probabilities), the
least sure first, at most one batch's worth of restarts a step, queued before the failures so
that these stay the newest. Why: a decision where the policy's best move is not its greedy one
but neither loses (a move that wins less often) is met by few games and tried by fewer
(`experiments/tictactoe/regret.py --train-p`: a tic-tac-toe model at 92.37% wins tries another move
at its 28 such decisions about 7 times in a step of 256 games); no failure ever restarts it. A
restart there lets a whole group compare the moves the policy hesitates between. The
probability is the policy's own, not an evaluator's.

Given replies (`restart_explore` = k > 0): in each restart's group, k rollouts do not sample
their first reply: each is given one of the environment's `other_replies` at that point (for
tic-tac-toe, a move the teacher might make there, in its words), drawn at random; the rest of
the episode is the policy's own, and the given reply's tokens are trained like sampled ones,
with the rollout's advantage. Why: a better move the policy gives a probability of 1 in 1,000
at a position it reaches in 1 game of 100 is sampled there about once in 100,000 games, so no
group ever compares it with the habit (`experiments/tictactoe/move_values.py`: that model's
largest give-up; docs/RESULTS.md, "Why the remaining wins are hard for RL"). The replies are the environment's legal options, not labelled ones: which one
is better is left to the group's rewards.
"""

from __future__ import annotations

import dataclasses
import json
import math
import random
import warnings
from collections.abc import Sequence
from typing import Any

from rlvr.clients.base import ChatClient
from rlvr.engine import rollout_seed
from rlvr.envs.multiturn import MultiTurnEnv
from rlvr.errors import UsageError
from rlvr.seeding import mix_seed
from rlvr.train.config import RESTART_POINTS
from rlvr.train.given import GivenFirst
from rlvr.train.protocols import Explorable, Probed, Restartable
from rlvr.types import Messages, Rollout, Task

SEP = "~r"
"""A restart's id is its task's id, SEP, and a serial number (unique within a run)."""
PROBE = "~g"
"""A greedy probe's id is its task's id, PROBE, and its number in the step."""


class Restarts:
    """The buffer of restart tasks and the share of each batch they take (see the module)."""

    def __init__(
        self,
        env: MultiTurnEnv[Any],
        *,
        frac: float,
        below: float,
        tasks_per_batch: int,
        seed: int,
        points: str = "random",
        greedy: int = 0,
        unsure: float = 0.0,
        explore: int = 0,
        group_size: int = 1,
    ) -> None:
        """`explore` (< `group_size`, as TrainConfig checks): given replies a restart's group."""
        if frac > 0 and not isinstance(env, Restartable):
            raise UsageError(
                f"restart_frac = {frac}: environment {type(env).__name__} cannot restart its episodes "
                "(it does not define restart_tasks); set restart_frac = 0"
            )
        if explore > 0 and not isinstance(env, Explorable):
            raise UsageError(
                f"restart_explore = {explore}: environment {type(env).__name__} offers no other replies "
                "(it does not define other_replies); set restart_explore = 0"
            )
        if points not in RESTART_POINTS:
            raise UsageError(f"unknown restart_points {points!r}; expected one of {', '.join(RESTART_POINTS)}")
        self.env, self.below, self.seed, self.points, self.greedy = env, below, seed, points, greedy
        self.unsure, self.explore, self.group_size = unsure, explore, group_size
        self.per_batch = round(frac * tasks_per_batch) if frac > 0 else 0
        if frac > 0 and self.per_batch == 0:
            raise UsageError(
                f"restart_frac = {frac} of {tasks_per_batch} tasks a batch rounds to no restart; raise it "
                f"to at least {1 / tasks_per_batch:.3g}"
            )
        self.capacity = 4 * self.per_batch
        """The newest restarts kept: four batches' worth, so that old failures age out."""
        self.buffer: list[Task] = []
        self.serial = 0
        self.warned = False
        self.played: set[str] = set()
        """Ids of the restarts in the batch `fill` made last (to score them apart)."""
        self.earlier: dict[str, list[Task]] = {}
        """backtrack: each waiting or just played restart's earlier points, oldest first"""
        self.backtracked = 0
        """backtrack: restarts queued one turn earlier by the last `add`"""
        self.probing: list[Task] = []
        """the tasks `probe_tasks` made last"""
        self.probe_scores: list[float] = []
        """the rewards of the last `add`'s greedy probes"""
        self.queued_unsure = 0
        """restarts the last `add` queued at the probes' unsure turns"""
        self.given: dict[tuple[str, int], str] = {}
        """(restart id, rollout index) -> the first reply `fill` gave that rollout (explore)"""
        self.chosen: list[Task] = []
        """the restarts in the batch `fill` made last"""

    @property
    def active(self) -> bool:
        return self.per_batch > 0

    def fill(self, tasks: Sequence[Task], step: int) -> list[Task]:
        """`tasks` with up to `per_batch` of them replaced by restarts from the buffer (each
        played once), at positions drawn at random; the same on every rank."""
        out = list(tasks)
        n = min(self.per_batch, len(self.buffer), len(out))
        rng = random.Random(mix_seed(self.seed, step, 0x5E57))
        picked = sorted(rng.sample(range(len(self.buffer)), n), reverse=True)
        chosen = [self.buffer.pop(i) for i in picked]
        for at, task in zip(rng.sample(range(len(out)), n), chosen, strict=True):
            out[at] = task
        self.played, self.chosen = {t.id for t in chosen}, chosen
        self.given = self._give(chosen, rng) if self.explore else {}
        return out

    def client(self, client: ChatClient) -> ChatClient:
        """`client`, giving the first replies `fill` chose (`given`) to their rollouts."""
        if not self.given:
            return client
        by_id = {t.id: t for t in self.chosen}
        firsts: dict[int, list[tuple[Messages, str]]] = {}
        for (task_id, index), text in self.given.items():
            task = by_id[task_id]  # the seed and conversation of that rollout's first request
            firsts.setdefault(mix_seed(rollout_seed(task, index), 0), []).append((self.env.initial_prompt(task), text))
        return GivenFirst(client, firsts)

    def _give(self, chosen: Sequence[Task], rng: random.Random) -> dict[tuple[str, int], str]:
        """For each restart, its last `explore` rollouts' first replies: the env's other
        replies there, drawn at random (each at most once while there are enough)."""
        given: dict[tuple[str, int], str] = {}
        assert isinstance(self.env, Explorable)  # (checked when built)
        for task in chosen:
            try:
                options = list(self.env.other_replies(task))
            except Exception as exc:  # an env's bug costs its exploration, not the run
                self._warn(f"other_replies failed, no reply given: {type(exc).__name__}: {exc}")
                continue
            bad = [o for o in options if not (isinstance(o, str) and o)]
            if bad:  # a model cannot be given them: the env's bug again
                self._warn(f"other_replies gave {len(bad)} of {len(options)} that are not text, e.g. {bad[0]!r:.80}")
                continue
            if not options:
                continue
            k = self.explore
            picks = rng.sample(options, k) if len(options) >= k else [rng.choice(options) for _ in range(k)]
            for i, text in enumerate(picks):
                given[task.id, self.group_size - k + i] = text
        return given

    def probe_tasks(self, batch: Sequence[Task], step: int) -> list[Task]:
        """The greedy probes' tasks: the batch's ordinary tasks (not restarts) in turn, each
        with a new seed (a greedy game is a function of its task, so a task's own seed would
        replay one of its group's games: tic-tac-toe's opponent draws from it), as the env's
        `probe_task` makes them."""
        ordinary = [t for t in batch if t.id not in self.played]
        picks = [ordinary[k % len(ordinary)] for k in range(self.greedy)] if self.active and ordinary else []
        self.probing = [
            dataclasses.replace(self._probe(t, mix_seed(self.seed, step, k, 0x9E)), id=f"{t.id}{PROBE}{k}")
            for k, t in enumerate(picks)
        ]
        return self.probing

    def _probe(self, task: Task, seed: int) -> Task:
        """The env's probe of `task` (`Probed`), else `task` with the new seed."""
        return self.env.probe_task(task, seed) if isinstance(self.env, Probed) else dataclasses.replace(task, seed=seed)

    def add(
        self, rollouts: Sequence[Rollout], tasks: Sequence[Task], step: int, probes: Sequence[Rollout] = ()
    ) -> None:
        """Offer the restart points of each rollout scored below `below` (one drawn at random,
        or all of them), then those of the greedy `probes` (queued last: the newest); keep the
        newest `capacity` distinct ones. `tasks` are the batch's tasks (every rank's)."""
        if not self.active:
            return
        probing = {t.id for t in self.probing}
        probes = [r for r in probes if r.task_id in probing]  # (of the tasks `probe_tasks` made last)
        self.probe_scores = [r.reward for r in probes if r.error is None]
        rollouts = [*rollouts, *probes]
        by_id = {t.id: t for t in [*tasks, *self.probing]}
        rng = random.Random(mix_seed(self.seed, step, 0xADD))
        known = {_key(t) for t in self.buffer}
        memo: dict[int, list[Task]] = {}  # a probe's points, asked of the env once (unsure turns, failures)
        self.queued_unsure = self._unsure(probes, by_id, known, memo) if self.unsure > 0 else 0
        if self.points == "backtrack":
            self._backtrack(rollouts, known)
        for rollout in rollouts:
            task = by_id.get(rollout.task_id)
            if task is None or rollout.error is not None or not rollout.reward < self.below:
                continue
            if self.points == "backtrack" and rollout.task_id in self.played:
                continue  # a restart's group speaks through _backtrack
            options = self._options(task, rollout, memo)
            if not options:
                continue
            if self.points == "backtrack":
                self._push(options[-1], task.id, known, earlier=options[:-1])
                continue
            for pick in options if self.points == "all" else [rng.choice(options)]:
                self._push(pick, task.id, known)
        del self.buffer[: max(0, len(self.buffer) - self.capacity)]
        if self.earlier:  # keep the earlier points of waiting restarts only
            waiting = {t.id for t in self.buffer}
            self.earlier = {k: v for k, v in self.earlier.items() if k in waiting}

    def _options(self, task: Task, rollout: Rollout, memo: dict[int, list[Task]]) -> list[Task]:
        """The env's restart points of `rollout` (kept in `memo` for this `add`); none, with one
        warning a run, when it fails."""
        if id(rollout) not in memo:
            try:
                assert isinstance(self.env, Restartable)  # (checked when built: active needs it)
                memo[id(rollout)] = self.env.restart_tasks(task, rollout)
            except Exception as exc:  # an env's bug costs its restarts, not the run
                self._warn(f"restart_tasks failed, no restart from that rollout: {type(exc).__name__}: {exc}")
                memo[id(rollout)] = []
        return memo[id(rollout)]

    def _warn(self, message: str) -> None:
        """One warning a run for the env's failures (each costs only what it would have given)."""
        if not self.warned:
            warnings.warn(message, stacklevel=4)
            self.warned = True

    def _unsure(
        self, probes: Sequence[Rollout], by_id: dict[str, Task], known: set[str], memo: dict[int, list[Task]]
    ) -> int:
        """Queue the restart points before the probes' turns whose reply had a probability below
        `unsure` (the least sure first, at most `per_batch`); the number queued."""
        found: list[tuple[float, Task, str]] = []
        for probe in probes:
            task = by_id.get(probe.task_id)
            if task is None or probe.error is not None:
                continue
            for option in self._options(task, probe, memo):
                # the turn a point restarts: the model turns its prompt holds beyond the task's
                turn = sum(1 for m in option.prompt[len(task.prompt) :] if m.get("role") == "assistant")
                logprobs = probe.turns[turn].completion.logprobs if turn < len(probe.turns) else None
                if logprobs:
                    total = sum(float(x) for x in logprobs)  # (inf and -inf make NaN here, not an error)
                    if total < math.log(self.unsure):  # in log space: a NaN is not below, +1000 no overflow
                        found.append((total, option, task.id))
        before = len(self.buffer)
        for _, option, of in sorted(found, key=lambda x: x[0])[: self.per_batch]:
            self._push(option, of, known)
        return len(self.buffer) - before

    def _push(self, pick: Task, of: str, known: set[str], earlier: list[Task] | None = None) -> None:
        """Queue `pick` (a restart point of task `of`) under a new id, unless the buffer holds
        the same conversation."""
        key = _key(pick)
        if key in known:
            return
        known.add(key)
        self.serial += 1
        restart = dataclasses.replace(pick, id=f"{_root(of)}{SEP}{self.serial}")
        self.buffer.append(restart)
        if earlier:
            self.earlier[restart.id] = list(earlier)

    def _backtrack(self, rollouts: Sequence[Rollout], known: set[str]) -> None:
        """Each restart just played whose every rollout scored below `below` (none failed)
        queues its point one model turn earlier, if the episode has one."""
        groups: dict[str, list[Rollout]] = {}
        for rollout in rollouts:
            if rollout.task_id in self.played:
                groups.setdefault(rollout.task_id, []).append(rollout)
        self.backtracked = 0
        for task_id, group in groups.items():
            earlier = self.earlier.pop(task_id, [])
            if earlier and all(r.error is None and r.reward < self.below for r in group):
                self._push(earlier[-1], task_id, known, earlier=earlier[:-1])
                self.backtracked += 1

    def metrics(self, rollouts: Sequence[Rollout]) -> dict[str, float]:
        """restart/tasks (restarts in this batch), restart/buffer (waiting), restart/reward
        (the mean reward of the restarts' rollouts; absent when none was played); with
        explore, restart/given (rollouts given a reply) and the mean rewards of those and of
        the restarts' other rollouts (restart/given_reward, restart/own_reward)."""
        if not self.active:
            return {}
        out = {"restart/tasks": float(len(self.played)), "restart/buffer": float(len(self.buffer))}
        if self.points == "backtrack":
            out["restart/backtracked"] = float(self.backtracked)
        if self.probe_scores:  # how often the greedy policy scores below restart_below
            out["restart/greedy_below"] = sum(x < self.below for x in self.probe_scores) / len(self.probe_scores)
        if self.unsure > 0:
            out["restart/unsure"] = float(self.queued_unsure)
        scores = [r.reward for r in rollouts if r.task_id in self.played and r.error is None]
        if scores:
            out["restart/reward"] = sum(scores) / len(scores)
        if self.explore:  # the given replies' games beside the policy's own, in the same restarts
            given = [r.reward for r in rollouts if r.key in self.given and r.error is None]
            own = [
                r.reward for r in rollouts if r.task_id in self.played and r.key not in self.given and r.error is None
            ]
            out["restart/given"] = float(len(given))
            if given and own:
                out["restart/given_reward"] = sum(given) / len(given)
                out["restart/own_reward"] = sum(own) / len(own)
        return out

    def state_dict(self) -> dict[str, Any]:
        """The buffer and the serial number, in plain types (for a checkpoint)."""
        earlier = {k: [t.to_dict() for t in v] for k, v in self.earlier.items()}
        return {"serial": self.serial, "buffer": [t.to_dict() for t in self.buffer], "earlier": earlier}

    def load_state_dict(self, state: dict[str, Any] | None) -> None:
        if not state:  # a checkpoint from before restarts, or from a run without them
            return
        self.serial = int(state["serial"])
        self.buffer = [Task.from_dict(t) for t in state["buffer"]]
        self.earlier = {k: [Task.from_dict(t) for t in v] for k, v in state.get("earlier", {}).items()}


def weigh_given(
    rollouts: Sequence[Rollout], advantages: Sequence[float | Sequence[float]], weight: float
) -> list[float | Sequence[float]]:
    """`advantages` (one per rollout, or one per model turn) with the turn of each given first
    reply (finish reason "given") multiplied by `weight`; the rest of its episode keeps its own.
    Why (`restart_explore_weight`): a reply the policy almost never samples is given far more
    often than the policy would sample it, and its log-probability's gradient is far larger
    than a sampled reply's (`experiments/tictactoe/given.py grads`: 470x on a tic-tac-toe
    model), so at full weight one given sequence sets the step's direction."""
    out = list(advantages)
    for i, rollout in enumerate(rollouts):
        if rollout.turns and rollout.turns[0].completion.finish_reason == "given":
            adv = out[i]
            per_turn = [float(adv)] * len(rollout.turns) if isinstance(adv, (int, float)) else list(adv)
            per_turn[0] *= weight
            out[i] = per_turn
    return out


def _key(task: Task) -> str:
    """Two restarts are the same when they continue the same conversation with the same seed
    (their ids aside)."""
    return json.dumps({**task.to_dict(), "id": None}, sort_keys=True, default=str)


def _root(task_id: str) -> str:
    """The dataset task a restart (of a restart...) came from: ids do not grow with nesting."""
    return task_id.split(SEP, 1)[0]
