"""Summaries of a set of rollouts: numbers (`summarize`, or `Summary` fed one rollout at a time)
and a terminal view (`print_summary`).

`Summary` streams: it keeps counters, not rollouts, so an eval of a million rollouts summarises
in the memory of a few (plus 8 bytes a rollout for the reward histogram, and the groups still in
flight for pass@k when the rollouts per task are known). Any float is survived: a reward of
1e308, or NaN, gives a mean and a std (NaN where the truth is), never an OverflowError.
"""

from __future__ import annotations

import math
from array import array
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from rlvr.types import Rollout

_CHUNK = 4096
"""Values summed exactly (`math.fsum`) at a time; the chunks' sums are then summed exactly."""
_HUGE = 2.0**500
"""Past this magnitude values are scaled down by `_SCALE` before squaring (no overflow)."""
_SCALE = 2.0**-600


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from n samples with c correct (Chen et al., 2021).

    >>> round(pass_at_k(4, 1, 2), 4)
    0.5
    """
    if n - c < k:
        return 1.0
    return 1.0 - math.prod((n - c - i) / (n - i) for i in range(k))


class Stats:
    """Mean and population standard deviation of a stream of floats, in constant memory.

    The mean is `math.fsum` of the values over their count (what `statistics.fmean` gives, for
    up to 4096 values exactly), the std Welford's update; values past 2**500 in magnitude switch
    both to a scaled unit, so finite values always give a finite mean and std. NaN anywhere, or
    both infinities, gives NaN; one infinity gives that infinity as the mean and a NaN std.

    >>> s = Stats()
    >>> for v in (1e308, 1e308, -1e308, 1e308):
    ...     s.add(v)
    >>> r = s.result()
    >>> r["mean"], round(r["std"] / 1e308, 9)
    (5e+307, 0.866025404)
    """

    __slots__ = ("n", "_finite", "_chunk", "_sums", "_mean", "_m2", "_scale", "_nan", "_pos_inf", "_neg_inf")

    def __init__(self) -> None:
        self.n = 0
        self._finite = 0
        self._chunk: list[float] = []
        self._sums: list[float] = []
        self._mean = 0.0  # Welford's running mean and sum of squared deviations, in scaled units
        self._m2 = 0.0
        self._scale = 1.0
        self._nan = self._pos_inf = self._neg_inf = False

    def add(self, value: float) -> None:
        self.n += 1
        if not math.isfinite(value):
            if math.isnan(value):
                self._nan = True
            elif value > 0:
                self._pos_inf = True
            else:
                self._neg_inf = True
            return
        if self._scale == 1.0 and abs(value) > _HUGE:
            self._rescale()
        u = value * self._scale
        self._chunk.append(u)
        if len(self._chunk) == _CHUNK:
            self._sums.append(math.fsum(self._chunk))
            self._chunk.clear()
        self._finite += 1
        delta = u - self._mean
        self._mean += delta / self._finite
        self._m2 += delta * (u - self._mean)

    def _rescale(self) -> None:
        self._scale = _SCALE
        self._chunk = [u * _SCALE for u in self._chunk]
        self._sums = [s * _SCALE for s in self._sums]
        self._mean *= _SCALE
        self._m2 *= _SCALE * _SCALE

    def result(self) -> dict[str, float]:
        if self.n == 0 or self._nan or (self._pos_inf and self._neg_inf):
            return {"mean": math.nan, "std": math.nan}
        if self._pos_inf or self._neg_inf:
            return {"mean": math.inf if self._pos_inf else -math.inf, "std": math.nan}
        mean = math.fsum([*self._sums, *self._chunk]) / self.n / self._scale
        std = math.sqrt(max(self._m2, 0.0) / self.n) / self._scale if self.n > 1 else 0.0
        return {"mean": mean, "std": std}


@dataclass
class _Group:
    """The rollouts of one task seen so far, for pass@k."""

    seen: int = 0
    scored: int = 0
    passed: Counter[str] = field(default_factory=Counter)


class Summary:
    """The numbers `summarize` gives, fed one rollout at a time (`add`), in bounded memory.

    With `rollouts_per_task`, a task's group is folded into the pass@k sums as soon as all its
    rollouts are in; without it, groups are kept to the end (pass@k needs the smallest).
    """

    def __init__(self, rollouts_per_task: int | None = None, weights: dict[str, float] | None = None) -> None:
        self.rollouts_per_task = rollouts_per_task
        self.weights = weights
        self.rollouts = 0
        self.errors = 0
        self.tasks = 0
        self.truncated = 0
        self.reward = Stats()
        self.rewards: dict[str, Stats] = {}
        self.turns = Stats()
        self.completion_tokens = Stats()
        self.prompt_tokens = Stats()
        self.seconds = Stats()
        self.stop_reasons: Counter[str] = Counter()
        self.errors_by_kind: Counter[str] = Counter()
        self.scored_rewards = array("d")
        """Total reward of every scored rollout, for the histogram."""
        self._binary: dict[str, int] = {}  # scored rollouts in which each function gave 0 or 1
        self._ones: set[str] = set()  # functions that gave a 1 at least once
        self._groups: dict[str, _Group] = {}
        self._pass_sums: dict[tuple[str, int], Stats] = {}  # (function, k) -> pass@k of complete groups

    def add(self, r: Rollout) -> None:
        self.rollouts += 1
        self.truncated += bool(r.truncated)
        self.turns.add(r.metrics.get("turns", 0.0))
        self.completion_tokens.add(float(r.usage.completion_tokens))
        self.prompt_tokens.add(float(r.usage.prompt_tokens))
        self.seconds.add(r.timing.get("total", 0.0))
        self.stop_reasons[r.stop_reason] += 1
        for name in r.rewards:
            self.rewards.setdefault(name, Stats())
        group = self._groups.get(r.task_id)
        if group is None:
            group = self._groups[r.task_id] = _Group()
            self.tasks += 1
        group.seen += 1
        if r.error is not None:
            self.errors += 1
            self.errors_by_kind[r.error_kind or ""] += 1
        else:
            self.reward.add(r.reward)
            self.scored_rewards.append(r.reward)
            group.scored += 1
            for name, value in r.rewards.items():
                self.rewards[name].add(value)
                if value == 0.0 or value == 1.0:
                    self._binary[name] = self._binary.get(name, 0) + 1
                if value == 1.0:
                    self._ones.add(name)
                    group.passed[name] += 1
        if self.rollouts_per_task is not None and group.seen >= self.rollouts_per_task:
            self._fold(self._groups.pop(r.task_id), self._ks(), self._pass_sums)  # complete: fold, forget

    def _ks(self) -> list[int]:
        n = self.rollouts_per_task
        if n is None:
            sizes = [g.scored for g in self._groups.values() if g.scored]
            n = min(sizes) if sizes else 1
        return sorted({1, n} | {k for k in (2, 4, 8) if k < n})

    def _fold(self, group: _Group, ks: list[int], into: dict[tuple[str, int], Stats]) -> None:
        if group.scored == 0:
            return  # a task with no scored rollout has no pass@k
        for k in ks:
            if group.scored >= k:
                for name in self.rewards:
                    into.setdefault((name, k), Stats()).add(pass_at_k(group.scored, group.passed[name], k))

    def pass_at(self) -> dict[str, dict[str, float]]:
        """pass@k for each graded reward function whose values are all 0 or 1 (pass = 1)."""
        sums = {key: _copy(s) for key, s in self._pass_sums.items()}
        ks = self._ks()
        for group in self._groups.values():  # groups not complete yet (or all of them, without r)
            self._fold(group, ks, sums)
        scored = self.rollouts - self.errors
        out: dict[str, dict[str, float]] = {}
        for name in self.rewards:
            graded = self.weights is None or self.weights.get(name, 0.0) != 0.0
            if not graded or self._binary.get(name, 0) != scored or name not in self._ones:
                continue  # a metric, not a pass/fail reward, or nothing ever passed
            out[name] = {f"pass@{k}": sums[(name, k)].result()["mean"] for k in ks if (name, k) in sums}
        return out

    def result(self) -> dict[str, Any]:
        """The summary as `summarize` returns it."""
        return {
            "rollouts": self.rollouts,
            "tasks": self.tasks,
            "errors": self.errors,
            "reward": self.reward.result(),
            "rewards": {n: s.result() for n, s in self.rewards.items()},
            "turns": self.turns.result(),
            "completion_tokens": self.completion_tokens.result(),
            "prompt_tokens": self.prompt_tokens.result(),
            "stop_reasons": dict(self.stop_reasons.most_common()),
            "truncated": self.truncated / self.rollouts if self.rollouts else 0.0,
            "errors_by_kind": dict(self.errors_by_kind.most_common()),
            "seconds_per_rollout": self.seconds.result(),
            "pass_at_k": self.pass_at() if self.rollouts > self.errors else {},
        }


def _copy(stats: Stats) -> Stats:
    out = Stats()
    for name in Stats.__slots__:
        value = getattr(stats, name)
        setattr(out, name, list(value) if isinstance(value, list) else value)
    return out


def summarize(
    rollouts: Iterable[Rollout],
    rollouts_per_task: int | None = None,
    weights: dict[str, float] | None = None,
) -> dict[str, Any]:
    """Numbers that describe a run: rewards, pass@k, turns, tokens, stops, errors, time.

    pass@k is given for reward functions whose values are all 0 or 1 and whose weight (when
    `weights` is known) is not 0: a logged metric is not something to pass.
    """
    s = Summary(rollouts_per_task, weights)
    for r in rollouts:
        s.add(r)
    return s.result()


def histogram(values: Sequence[float], bins: int = 10, width: int = 40) -> list[str]:
    """Text histogram lines, one per bin: `  0.40 -  0.50 | ######      12`."""
    finite = [v for v in values if math.isfinite(v)]
    if not finite:
        return []
    lo, hi = min(finite), max(finite)
    if hi == lo:
        return [f"{lo:7.3f}          | {'#' * width} {len(finite)}"]
    half = 0.5 if math.isinf(hi - lo) else 1.0  # (from -1e308 to 1e308: count in halves)
    step = (hi * half - lo * half) / bins
    counts = [0] * bins
    for v in finite:
        counts[min(int((v * half - lo * half) / step), bins - 1)] += 1
    peak = max(counts)
    edge = [lo + i * step / half if half == 1.0 else 2 * (lo * half + i * step) for i in range(bins + 1)]
    return [
        f"{edge[i]:7.3f} - {edge[i + 1]:7.3f} | {'#' * round(width * c / peak):<{width}} {c}"
        for i, c in enumerate(counts)
    ]


def print_summary(
    summary: Summary,
    *,
    title: str = "results",
    extra: dict[str, float] | None = None,
    elapsed_s: float | None = None,
    console: Any = None,
) -> dict[str, Any]:
    """Print a run's summary with rich; returns the numbers printed."""
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    console = console or Console(emoji=False)
    s = summary.result()
    # The title is a line of its own: as a table title it wraps at the table's width.
    console.print(escape(f"{title}: {s['rollouts']} rollouts of {s['tasks']} tasks"), soft_wrap=True)
    table = Table()
    table.add_column("metric")
    table.add_column("mean", justify="right")
    table.add_column("std", justify="right")
    table.add_row("reward (total)", f"{s['reward']['mean']:.4f}", f"{s['reward']['std']:.4f}", style="bold")
    for name, st in s["rewards"].items():
        table.add_row(escape(f"  {name}"), f"{st['mean']:.4f}", f"{st['std']:.4f}")
    for name, ks in s["pass_at_k"].items():
        for k, v in ks.items():
            table.add_row(f"  {name} {k}", f"{v:.4f}", "")
    table.add_row("model turns", f"{s['turns']['mean']:.2f}", f"{s['turns']['std']:.2f}")
    table.add_row("completion tokens", f"{s['completion_tokens']['mean']:.1f}", f"{s['completion_tokens']['std']:.1f}")
    seconds = s["seconds_per_rollout"]  # wall time from start to end, rollouts overlapping: not a cost
    table.add_row("wall seconds per rollout (overlapping)", f"{seconds['mean']:.3f}", f"{seconds['std']:.3f}")
    for name, value in (extra or {}).items():
        table.add_row(escape(name), f"{value:.1f}" if name.endswith("%") else f"{value:.3f}", "")
    console.print(table)
    stops = ", ".join(f"{k or '?'} {v}" for k, v in s["stop_reasons"].items())
    console.print(escape(f"stops: {stops}   truncated: {100 * s['truncated']:.1f}%"))
    errors = ", ".join(f"{k} {v}" for k, v in s["errors_by_kind"].items()) or "none"
    console.print(
        escape(f"errors: {s['errors']} ({errors})" + (f"   time: {elapsed_s:.1f} s" if elapsed_s is not None else ""))
        + (f" ({s['rollouts'] / elapsed_s:.2f} rollouts/s)" if elapsed_s and s["rollouts"] else "")
    )
    lines = histogram(summary.scored_rewards)
    if lines:
        console.print("reward histogram:")
        for line in lines:
            console.print("  " + line, markup=False, highlight=False)
    return s
