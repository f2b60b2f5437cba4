"""The best model of a run by its evaluations (`keep_best`), beside the last one.

    keep_best = "min:exact/beaten_games,max:exact/random/win_pct"

After every evaluation the trainer compares that evaluation's metrics with the best so far,
in order (the first metric decides, the next breaks its ties); a tie on every metric goes to
the later step. The best model is written to `RUN_DIR/best` (a plain model folder, like
`final`), and `RUN_DIR/best/keep_best.json` in it names its step and values: both appear at once
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


def parse(spec: str) -> list[tuple[int, str]]:
    """`min:NAME,max:NAME,...` as (sign, name) pairs: a lower sign x value is better."""
    out = []
    for part in spec.split(","):
        how, _, name = part.strip().partition(":")
        if how not in ("min", "max") or not name:
            raise UsageError(
                f"keep_best {spec!r}: each entry is min:METRIC or max:METRIC, comma-separated, "
                "e.g. min:exact/beaten_games,max:exact/random/win_pct"
            )
        out.append((1 if how == "min" else -1, name))
    return out


class KeepBest:
    """Which evaluation is the best so far (rank 0's view; see the module)."""

    def __init__(self, spec: str, folder: Path) -> None:
        """`folder`: where the kept model lives (RUN_DIR/best)."""
        self.order = parse(spec)
        self.spec = ",".join(f"{'min' if sign == 1 else 'max'}:{name}" for sign, name in self.order)
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
        """`metrics` in comparison order, each signed so that lower is better."""
        missing = [name for _, name in self.order if name not in metrics]
        if missing:
            raise UsageError(
                f"keep_best: no evaluation metric {', '.join(missing)}; this run's are: {', '.join(sorted(metrics))}"
            )
        return tuple(sign * float(metrics[name]) for sign, name in self.order)

    def better(self, metrics: Mapping[str, float]) -> bool:
        """Whether `metrics` are at least as good as the best so far (a NaN never is)."""
        key = self.key(metrics)
        return not any(math.isnan(k) for k in key) and (self.best is None or key <= self.best)

    def record(self, step: int, metrics: Mapping[str, float]) -> dict[str, str]:
        """Take `metrics` as the best; the record to write with the kept model (`export_final`'s
        `extra`)."""
        self.best = self.key(metrics)
        values = {n: float(metrics[n]) for _, n in self.order}
        return {FILE: json.dumps({"keep_best": self.spec, "step": step, "metrics": values}) + "\n"}
