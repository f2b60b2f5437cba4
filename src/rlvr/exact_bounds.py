"""Exact evaluation of a sampling policy, the arithmetic: rates, their bounds, risky decisions.

`rlvr.exact_sampled` walks the game tree and records every decision of the policy (a
`Decision`: the conversation's distinct replies and how likely each is) and every finished
game with its path of decisions. This module turns that record into numbers.

**The rates.** Against an opponent `o`, a game's probability is the opponent's line weight
(`GameTree.tree_weights`) times the product of the policy's reply probabilities along it; a rate
is the sum of those over the games with the outcome. With a sampled decision the probabilities
are the empirical shares of its K samples, so the rate is an estimate (an unbiased one: it is
multilinear in independent estimates).

**The bound**, per opponent and per reported number, is an interval that holds for all of them
at once with probability >= 1 - delta. It is computed bottom-up, a propagated worst case:

- a finished game's value is its indicator (1 if it has the outcome), times its line weight;
- a decision's lower / upper value is built from its replies' lower / upper values (the sum of
  the values of everything after the reply): for an *exact* decision (a distribution given,
  not sampled) it is their probability-weighted sum, plus the mass left unexplored times the
  whole weight on the upper side; for a *sampled* decision it is the KL (Chernoff) confidence
  bound on the mean of a [0, 1] variable from its K samples, at level delta_s: the reply a
  sample drew is worth its (normalised) lower or upper value, a reply never drawn is covered
  by the bound itself (it is a value the K draws may have missed, weighed by its unknown
  probability), and the true mean lies inside with probability >= 1 - delta_s (Hoeffding's
  Bernoulli domination; for K draws that all agree, the upper bound on a never-seen value is
  1 - delta_s ** (1 / K), the Clopper-Pearson zero-count bound);
- a reply that was drawn but never played (its reach fell below the pruning threshold) is
  worth [0, its whole weight]; so is every opponent line after a reply (and every root line)
  that ended unplayed further down, leaving no finished game: the opponent's replies split a
  reply's weight, and the part no recorded decision or game holds is added to the upper side.

delta_s = delta / 2 / (2 x sampled decisions x numbers x opponents): a union bound over every
(decision, side, number) whose bound is used. (The decisions are found by the walk itself; the
union is over those found, which is the usual reading of a per-node union bound in a tree
search, not a bound over every decision the walk could have met.)

This worst case is tight where few decisions are sampled, and loose where many are: each adds
about log(1 / delta_s) / K. So each interval is intersected with a second one, at the other
half of delta: the estimate +- an Azuma-Hoeffding bound on the sum of all the sampling errors
(`Bounds.martingale_halfwidth`), plus the mass not played on the upper side. On the tic-tac-toe
tree of a policy that picks among 4 corners (`policy:limit` at T = 1, 2,526 decisions) the half-
width is 17-21 points at K = 64, 6-8 at K = 512, and 3-4 with K in proportion to reach (125,345
draws, `Settings.per_reach`). Hoeffding-type bounds shrink as 1/sqrt(draws), so neither can
certify a rate near 0.1%: that needs exact reply distributions (`ReplyDistribution`), or a
variance-sensitive (Freedman / empirical Bernstein) martingale bound with draws in proportion to
reach, whose range term is log(1 / delta) / per_reach.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

REJECTED = "rejected"
"""The number 'a game with at least one rejected move' (beside the outcomes)."""
LOSING = "losing"
"""A reply after which the opponent can force a win (`tree_judge`), or that loses in the tree."""


@dataclass
class Decision:
    """One conversation where the policy moves, and what it replies there."""

    id: int
    board: str
    """The last environment message before the decision (for a board game, the position)."""
    weights: dict[str, float]
    """The opponent line's probability under each opponent model when the decision is reached."""
    reach: float
    """The product of the policy's own reply probabilities on the way here."""
    replies: list[str]
    """The distinct replies, in the order first drawn (or given)."""
    probs: list[float]
    """Each reply's probability: exact, or its share of the samples."""
    samples: int = 0
    """K, the replies drawn here to estimate `probs`; 0 for an exact distribution."""
    unexplored: float = 0.0
    """Exact decisions: the probability of every reply not listed (1 - sum(probs))."""
    judged: list[str | None] | None = None
    """Per reply: `rejected`, `losing` or None, from the env's `tree_judge`; None when the env
    has none (then a reply is losing when a beaten game follows it)."""

    played: list[bool] | None = None
    """Per reply: whether the walk played it (False: its reach fell below `min_reach`)."""

    def to_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


def kl_bernoulli(p: float, q: float) -> float:
    """kl(p || q) of two Bernoulli laws.

    >>> round(kl_bernoulli(0.5, 0.5), 12), kl_bernoulli(0.0, 0.5) == math.log(2)
    (0.0, True)
    """
    eps = 1e-15
    q = min(max(q, eps), 1 - eps)
    out = 0.0
    if p > 0:
        out += p * math.log(p / q)
    if p < 1:
        out += (1 - p) * math.log((1 - p) / (1 - q))
    return out


def kl_upper(mean: float, k: int, delta: float) -> float:
    """The largest q with k * kl(mean || q) <= log(1 / delta): an upper confidence bound at
    level 1 - delta on the mean of a [0, 1] variable whose k draws average `mean`.

    >>> abs(kl_upper(0.0, 64, 0.05) - (1 - 0.05 ** (1 / 64))) < 1e-9  # the zero-count bound
    True
    """
    mean = min(max(mean, 0.0), 1.0)
    target = math.log(1 / delta) / k
    lo, hi = mean, 1.0
    if kl_bernoulli(mean, hi) <= target:
        return 1.0
    for _ in range(100):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if kl_bernoulli(mean, mid) <= target else (lo, mid)
    return hi


def kl_lower(mean: float, k: int, delta: float) -> float:
    """The lower counterpart of `kl_upper`.

    >>> abs(kl_lower(1.0, 64, 0.05) - 0.05 ** (1 / 64)) < 1e-9
    True
    """
    return 1.0 - kl_upper(1.0 - mean, k, delta)


GRID, GRID_POINTS = 1.25, 207
"""The martingale bound's grid for its random C: powers of 1.25 from 1 down to 1e-20."""

Value = tuple[float, float, float]
"""(estimate, lower bound, upper bound) of a number, in absolute probability."""


class Bounds:
    """The rates and their bounds over a walked tree (see the module docstring)."""

    def __init__(self, decisions: Sequence[Decision], games: Sequence[dict[str, Any]], delta: float) -> None:
        """`games`: each finished game's `info["exact"]`: `path` ([decision id, reply index]
        pairs), `line_weights` (per opponent), `outcome`, `rejected_moves`."""
        self.decisions = {d.id: d for d in decisions}
        self.games = list(games)
        self.delta = delta
        self.after: dict[tuple[int, int], list[int]] = defaultdict(list)
        self.leaves: dict[tuple[int, int], list[int]] = defaultdict(list)
        self.roots: set[int] = set()
        self.root_leaves: list[int] = []
        for g, game in enumerate(self.games):
            path = [(int(step[0]), int(step[1])) for step in game.get("path", [])]
            if not path:
                self.root_leaves.append(g)
                continue
            self.roots.add(path[0][0])
            for (n, j), (m, _) in zip(path, path[1:]):
                if m not in self.after[(n, j)]:
                    self.after[(n, j)].append(m)
            self.leaves[path[-1]].append(g)
        self.sampled = sum(1 for d in decisions if d.samples)

    def delta_per_decision(self, numbers: int, opponents: int) -> float:
        """The worst case's level at each sampled decision (half of delta goes to it)."""
        return self.delta / 2 / max(1, 2 * self.sampled * numbers * opponents)

    def martingale_halfwidth(self, opponent: str, numbers: int, opponents: int) -> float:
        """The half-width of the martingale bound against `opponent` (the other half of delta).

        The estimate's error is a sum over the sampled decisions s and their draws i of
        reach(s) / K * (v(s, a_i) - E v(s, a)), v in [0, 1] the true value after a reply: a
        martingale whose steps have predictable ranges reach(s) / K, so Azuma-Hoeffding bounds it
        by sqrt(C log(2 / delta') / 2), C = sum of reach(s)^2 / K. C is random, so the bound is
        taken at the next power of `GRID` above it, with a union over `GRID_POINTS` such values
        (C from 1 down to 1e-20)."""
        c = sum((d.weights[opponent] * d.reach) ** 2 / d.samples for d in self.decisions.values() if d.samples)
        if c <= 0.0:
            return 0.0
        grid = GRID ** math.ceil(math.log(c, GRID))
        level = self.delta / 2 / (numbers * opponents * GRID_POINTS)
        return math.sqrt(grid * math.log(2 / level) / 2)

    def value(self, opponent: str, indicator: Callable[[dict[str, Any]], bool], delta_s: float) -> Value:
        """The estimate and bounds of P(indicator) against `opponent`."""
        memo: dict[int, Value] = {}

        def leaf(g: int) -> Value:
            w = float(self.games[g]["line_weights"][opponent]) * indicator(self.games[g])
            return (w, w, w)

        def node(n: int) -> Value:
            if n not in memo:
                memo[n] = decide(self.decisions[n])
            return memo[n]

        def after(subs: list[int], ends: list[int], whole: float) -> Value:
            """What follows a reply (or the start): the decisions and games after it, and on the
            upper side the part of its weight `whole` that none of them holds (the opponent's
            replies split it; a line that ended unplayed left no record: anything from nothing
            to everything)."""
            parts = [node(m) for m in subs] + [leaf(g) for g in ends]
            known = sum(float(self.decisions[m].weights[opponent]) for m in subs)
            known += sum(float(self.games[g]["line_weights"][opponent]) for g in ends)
            unknown = max(0.0, whole - known)
            return (sum(p[0] for p in parts), sum(p[1] for p in parts), sum(p[2] for p in parts) + unknown)

        def reply(n: int, j: int, whole: float) -> Value:
            return after(self.after.get((n, j), []), self.leaves.get((n, j), []), whole)

        def decide(d: Decision) -> Value:
            whole = float(d.weights[opponent])
            if whole <= 0.0:
                return (0.0, 0.0, 0.0)
            values = [reply(d.id, j, whole) for j in range(len(d.replies))]
            est = sum(p * v[0] for p, v in zip(d.probs, values))
            lo = sum(p * v[1] for p, v in zip(d.probs, values))
            hi = sum(p * v[2] for p, v in zip(d.probs, values))
            if not d.samples:
                return (est, lo, min(whole, hi + d.unexplored * whole))
            return (
                est,
                whole * kl_lower(lo / whole, d.samples, delta_s),
                whole * kl_upper(hi / whole, d.samples, delta_s),
            )

        est, lo, hi = after(sorted(self.roots), self.root_leaves, 1.0)  # the root lines' weights sum to 1
        return (est, lo, min(1.0, hi))

    def table(self, opponents: Sequence[str], outcomes: Sequence[str]) -> dict[str, dict[str, Value]]:
        """opponent -> number (each outcome, `rejected`, and `covered`, the mass the estimate
        accounts for) -> (estimate, lower, upper), all holding together at 1 - delta."""
        numbers = numbers_of(outcomes)
        delta_s = self.delta_per_decision(len(numbers) + 1, len(opponents))
        out: dict[str, dict[str, Value]] = {}
        for opponent in opponents:
            covered = self.value(opponent, lambda g: True, delta_s)
            t = self.martingale_halfwidth(opponent, len(numbers) + 1, len(opponents))
            rows = {name: self.value(opponent, fn, delta_s) for name, fn in numbers.items()}
            rows["covered"] = covered
            missing = max(0.0, 1.0 - covered[0])  # pruned or unexplored mass: 0 in the estimate
            out[opponent] = {
                name: (est, max(lo, est - t, 0.0), min(hi, est + t + missing, 1.0))
                for name, (est, lo, hi) in rows.items()
            }
        return out

    def missing(self, opponent: str) -> dict[str, float]:
        """The mass against `opponent` that no played game covers, by why: `unlisted`, left out
        of an exact distribution (`Decision.unexplored`), and `pruned`, replies listed or drawn
        but not played (below `min_reach`). Estimates, like `covered`; they sum to 1 with it."""
        unlisted = pruned = 0.0
        for d in self.decisions.values():
            mass = float(d.weights[opponent]) * d.reach
            unlisted += mass * d.unexplored
            played = d.played or [False] * len(d.probs)
            pruned += mass * sum(p for p, on in zip(d.probs, played) if not on)
        return {"unlisted": unlisted, "pruned": pruned}

    def risky(self, opponent: str, failures: Sequence[str], threshold: float) -> list[dict[str, Any]]:
        """Every decision where the policy puts >= `threshold` on rejected or on losing replies:
        replies the env judges so (`tree_judge`), or whose games after them include one beaten
        (an outcome in `failures`) that `opponent` plays with positive probability. One row per
        decision and kind, with the replies, their summed probability `prob` and `share`, the
        fraction of all games against `opponent` that take them (weight x reach x prob): the
        decisions that cost the most games first."""
        beaten = defaultdict(bool)
        for (n, j), gs in _games_after(self).items():
            beaten[(n, j)] = any(
                self.games[g].get("outcome") in failures and self.games[g]["line_weights"][opponent] > 0 for g in gs
            )
        rows: dict[tuple[int, str], dict[str, Any]] = {}
        for d in self.decisions.values():
            for j, (text, p) in enumerate(zip(d.replies, d.probs)):
                if d.judged is not None:  # the env's judgement (a reply in a lost position is not one)
                    kind = d.judged[j]
                else:
                    kind = LOSING if beaten[(d.id, j)] else None
                if kind is None:
                    continue
                row = rows.setdefault(
                    (d.id, kind),
                    {
                        "kind": kind,
                        "prob": 0.0,
                        "replies": [],
                        "board": d.board,
                        "decision": d.id,
                        "samples": d.samples,
                        "reach": d.reach,
                        "weights": d.weights,
                    },
                )
                row["prob"] += p
                row["replies"].append([text, p])
        out = [r for r in rows.values() if r["prob"] >= threshold]
        for r in out:
            r["share"] = risky_share(r, opponent)
        return sorted(out, key=lambda r: (-r["share"], -r["prob"], r["decision"], r["kind"]))


def risky_share(row: dict[str, Any], opponent: str) -> float:
    """The fraction of all games against `opponent` that take a risky row's replies: the
    opponent's weight of the position x the policy's reach of it x the replies' probability."""
    return float(row["weights"][opponent]) * float(row["reach"]) * float(row["prob"])


def numbers_of(outcomes: Sequence[str]) -> dict[str, Callable[[dict[str, Any]], bool]]:
    """The reported numbers: each outcome, and `rejected` (a game with a rejected move), as
    indicators of a game's leaf."""
    numbers: dict[str, Callable[[dict[str, Any]], bool]] = {o: _is(o) for o in outcomes}
    numbers[REJECTED] = lambda g: bool(g.get("rejected_moves"))
    return numbers


def _is(outcome: str) -> Callable[[dict[str, Any]], bool]:
    return lambda game: game.get("outcome") == outcome


def _games_after(bounds: Bounds) -> dict[tuple[int, int], list[int]]:
    """(decision, reply) -> the finished games whose path goes through it."""
    out: dict[tuple[int, int], list[int]] = defaultdict(list)
    for g, game in enumerate(bounds.games):
        for n, j in game.get("path", []):
            out[(n, j)].append(g)
    return out
