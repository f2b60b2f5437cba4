"""The best model of a run by its evaluations (`keep_best`), beside the last one.

    keep_best = "min:exact/beaten_games,max:exact/random/win_pct"

After every evaluation the trainer compares that evaluation's metrics with the best so far,
in order (the first entry decides, the next breaks its ties); a tie on every entry goes to
the later step. An entry `METRIC>=X` (or `METRIC<=X`) is a floor (a ceiling): an evaluation that
meets it beats one that does not, and two that both meet it, or both miss it, tie there:

    keep_best = "exact/optimal/draw_pct>=97,max:exact/random/win_pct"   # the most wins with the draws held

The best model is written to `RUN_DIR/best` (a plain model folder, like `final`), and `RUN_DIR/best/keep_best.json` in it names its step and values: both appear at once
(the folder is renamed into place whole), so a kill never leaves a record of another model. A
resumed run reads that file, so the comparison goes on where it stopped.

This is a selection by the evaluation: a model kept this way was chosen by looking at the
metrics it is then reported with, and a report must say so. Training itself never sees them.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from pathlib import Path

from rlvr.errors import UsageError

FILE = "keep_best.json"
"""The record in the kept model's folder."""


def parse(spec: str) -> list[tuple[str, str, float]]:
    """`min:NAME,max:NAME,NAME>=X,NAME<=X,...` as (how, name, bound) triples, in order; `bound` is
    read by the floors and ceilings (`>=`, `<=`) alone."""
    out = []
    for part in spec.split(","):
        entry = _parse_entry(part.strip())
        if entry is None:
            raise UsageError(
                f"keep_best {spec!r}: each entry is min:METRIC, max:METRIC, METRIC>=NUMBER or METRIC<=NUMBER, "
                "comma-separated, e.g. min:exact/beaten_games,max:exact/random/win_pct"
            )
        out.append(entry)
    return out


def _parse_entry(entry: str) -> tuple[str, str, float] | None:
    prefix, _, name = entry.partition(":")
    if prefix in ("min", "max"):
        return (prefix, name.strip(), 0.0) if name.strip() else None
    for how in (">=", "<="):
        name, found, text = entry.rpartition(how)
        if found:
            try:
                bound = float(text)
            except ValueError:
                return None
            return (how, name.strip(), bound) if name.strip() and math.isfinite(bound) else None
    return None


def _entry(how: str, name: str, bound: float) -> str:
    return f"{how}:{name}" if how in ("min", "max") else f"{name}{how}{bound:.15g}"


class KeepBest:
    """Which evaluation is the best so far (rank 0's view; see the module)."""

    def __init__(self, spec: str, folder: Path) -> None:
        """`folder`: where the kept model lives (RUN_DIR/best)."""
        self.order = parse(spec)
        self.spec = ",".join(_entry(*entry) for entry in self.order)
        self.path = folder / FILE
        self.best: tuple[float, ...] | None = None
        if self.path.exists():
            try:
                saved = json.loads(self.path.read_text(encoding="utf-8"))
                if saved.get("keep_best") == self.spec:  # the same ordering: continue it
                    self.best = self.key(saved["metrics"])
            except (ValueError, KeyError, TypeError, AttributeError, UsageError) as exc:
                raise UsageError(
                    f"{self.path} is not a keep_best record ({type(exc).__name__}: {exc}); "
                    "remove it to start the comparison afresh"
                ) from None

    def key(self, metrics: Mapping[str, float]) -> tuple[float, ...]:
        """`metrics` in comparison order, each signed so that lower is better (a floor or ceiling:
        0 met, 1 missed; a NaN misses it)."""
        missing = [name for _, name, _ in self.order if name not in metrics]
        if missing:
            raise UsageError(
                f"keep_best: no evaluation metric {', '.join(missing)}; this run's are: {', '.join(sorted(metrics))}"
            )
        key = []
        for how, name, bound in self.order:
            value = float(metrics[name])
            if how in ("min", "max"):
                key.append(value if how == "min" else -value)
            else:  # (a NaN compares false both ways: missed)
                key.append(0.0 if (value >= bound if how == ">=" else value <= bound) else 1.0)
        return tuple(key)

    def better(self, metrics: Mapping[str, float]) -> bool:
        """Whether `metrics` are at least as good as the best so far (a NaN never is)."""
        key = self.key(metrics)
        return not any(math.isnan(k) for k in key) and (self.best is None or key <= self.best)

    def record(self, step: int, metrics: Mapping[str, float]) -> dict[str, str]:
        """Take `metrics` as the best; the record to write with the kept model (`export_final`'s
        `extra`)."""
        self.best = self.key(metrics)
        values = {n: float(metrics[n]) for _, n, _ in self.order}
        return {FILE: json.dumps({"keep_best": self.spec, "step": step, "metrics": values}) + "\n"}
