"""Summaries of a set of rollouts: numbers (`summarize`) and a terminal view (`print_summary`)."""

from __future__ import annotations

import math
import statistics
from collections import Counter, defaultdict
from collections.abc import Sequence
from typing import Any

from rlvr.types import Rollout


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from n samples with c correct (Chen et al., 2021).

    >>> round(pass_at_k(4, 1, 2), 4)
    0.5
    """
    if n - c < k:
        return 1.0
    return 1.0 - math.prod((n - c - i) / (n - i) for i in range(k))


def _stats(values: Sequence[float]) -> dict[str, float]:
    if not values:
        return {"mean": float("nan"), "std": float("nan")}
    return {"mean": statistics.fmean(values), "std": statistics.pstdev(values) if len(values) > 1 else 0.0}


def summarize(
    rollouts: Sequence[Rollout],
    rollouts_per_task: int | None = None,
    weights: dict[str, float] | None = None,
) -> dict[str, Any]:
    """Numbers that describe a run: rewards, pass@k, turns, tokens, stops, errors, time.

    pass@k is given for reward functions whose values are all 0 or 1 and whose weight (when
    `weights` is known) is not 0: a logged metric is not something to pass.
    """
    scored = [r for r in rollouts if r.error is None]
    names = list(dict.fromkeys(n for r in rollouts for n in r.rewards))
    out: dict[str, Any] = {
        "rollouts": len(rollouts),
        "tasks": len({r.task_id for r in rollouts}),
        "errors": len(rollouts) - len(scored),
        "reward": _stats([r.reward for r in scored]),
        "rewards": {n: _stats([r.rewards[n] for r in scored if n in r.rewards]) for n in names},
        "turns": _stats([r.metrics.get("turns", 0.0) for r in rollouts]),
        "completion_tokens": _stats([float(r.usage.completion_tokens) for r in rollouts]),
        "prompt_tokens": _stats([float(r.usage.prompt_tokens) for r in rollouts]),
        "stop_reasons": dict(Counter(r.stop_reason for r in rollouts).most_common()),
        "truncated": sum(r.truncated for r in rollouts) / len(rollouts) if rollouts else 0.0,
        "errors_by_kind": dict(Counter(r.error_kind for r in rollouts if r.error).most_common()),
        "seconds_per_rollout": _stats([r.timing.get("total", 0.0) for r in rollouts]),
    }
    graded = [n for n in names if weights is None or weights.get(n, 0.0) != 0.0]
    out["pass_at_k"] = _pass_at_k(scored, graded, rollouts_per_task)
    return out


def _pass_at_k(scored: Sequence[Rollout], names: list[str], r: int | None) -> dict[str, dict[str, float]]:
    """pass@k for each reward function whose values are all 0 or 1 (where 'pass' means 1)."""
    by_task: dict[str, list[Rollout]] = defaultdict(list)
    for ro in scored:
        by_task[ro.task_id].append(ro)
    if not by_task:
        return {}
    n = r or min(len(v) for v in by_task.values())
    ks = sorted({1, n} | ({k for k in (2, 4, 8) if k < n}))
    out: dict[str, dict[str, float]] = {}
    for name in names:
        values = [ro.rewards.get(name) for ro in scored]
        if not all(v in (0.0, 1.0) for v in values) or 1.0 not in values:
            continue  # not a pass/fail reward, or nothing ever passed (pass@k is 0, as the mean says)
        out[name] = {}
        for k in ks:
            vals = [
                pass_at_k(len(g), sum(ro.rewards[name] == 1.0 for ro in g), k) for g in by_task.values() if len(g) >= k
            ]
            if vals:
                out[name][f"pass@{k}"] = statistics.fmean(vals)
    return out


def histogram(values: Sequence[float], bins: int = 10, width: int = 40) -> list[str]:
    """Text histogram lines, one per bin: `  0.40 -  0.50 | ######      12`."""
    finite = [v for v in values if math.isfinite(v)]
    if not finite:
        return []
    lo, hi = min(finite), max(finite)
    if hi == lo:
        return [f"{lo:7.3f}          | {'#' * width} {len(finite)}"]
    step = (hi - lo) / bins
    counts = [0] * bins
    for v in finite:
        counts[min(int((v - lo) / step), bins - 1)] += 1
    peak = max(counts)
    return [
        f"{lo + i * step:7.3f} - {lo + (i + 1) * step:7.3f} | {'#' * round(width * c / peak):<{width}} {c}"
        for i, c in enumerate(counts)
    ]


def print_summary(
    rollouts: Sequence[Rollout],
    *,
    title: str = "results",
    extra: dict[str, float] | None = None,
    elapsed_s: float | None = None,
    rollouts_per_task: int | None = None,
    weights: dict[str, float] | None = None,
    console: Any = None,
) -> dict[str, Any]:
    """Print a run's summary with rich; returns the numbers printed."""
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    console = console or Console(emoji=False)
    s = summarize(rollouts, rollouts_per_task, weights)
    table = Table(title=escape(f"{title}: {s['rollouts']} rollouts of {s['tasks']} tasks"), title_justify="left")
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
    table.add_row(
        "seconds / rollout", f"{s['seconds_per_rollout']['mean']:.3f}", f"{s['seconds_per_rollout']['std']:.3f}"
    )
    for name, value in (extra or {}).items():
        table.add_row(escape(name), f"{value:.1f}" if name.endswith("%") else f"{value:.3f}", "")
    console.print(table)
    stops = ", ".join(f"{k or '?'} {v}" for k, v in s["stop_reasons"].items())
    console.print(escape(f"stops: {stops}   truncated: {100 * s['truncated']:.1f}%"))
    errors = ", ".join(f"{k} {v}" for k, v in s["errors_by_kind"].items()) or "none"
    console.print(
        escape(f"errors: {s['errors']} ({errors})" + (f"   time: {elapsed_s:.1f} s" if elapsed_s is not None else ""))
    )
    lines = histogram([r.reward for r in rollouts if r.error is None])
    if lines:
        console.print("reward histogram:")
        for line in lines:
            console.print("  " + line, markup=False, highlight=False)
    return s
