"""Training metrics to three sinks: a CSV, TensorBoard, and PNG plots regenerated as it runs.

    log = MetricsLog(run_dir)                # run_dir/metrics.csv, tensorboard/, plots/
    log.write(step, {"reward/mean": 0.4, "loss/policy": 0.01})
    log.plot_async()                         # redraw plots/*.png in a child process
    log.close()                              # waits for it

Metric names are namespaced `group/name` (`reward/mean`, `eval/opponent=random/outcome/win_pct`).
`metrics.csv` is wide: one row per step, one column per metric; a metric first seen later
(an evaluation) adds a column and the file is rewritten with the wider header, and numbers
written for the step of the last row (an evaluation after a step) join that row.

Plots: `plots/<namespace>.png` holds one panel per metric of a namespace (`eval/LABEL` counts
as one namespace), `plots/overview.png` the headline panels. Drawing fifty panels takes
matplotlib a few seconds, so `plot_async` draws them in a child process from metrics.csv
(`python -m rlvr.train.logging RUN_DIR` does the same by hand) while training goes on.

Resuming at step k (`MetricsLog(run_dir, resume_step=k)`) drops CSV rows and TensorBoard
events after step k, so a run killed after its last checkpoint does not log those steps twice.
SFT and RL share this module.
"""

from __future__ import annotations

import csv
import math
import re
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

CSV_NAME = "metrics.csv"
OVERVIEW = (
    "reward/mean",
    "eval/*/reward/mean",
    "loss/policy",
    "kl/ref",
    "entropy/mean",
    "grad/norm",
    "rollout/completion_tokens",
    "throughput/rollouts_per_s",
    "loss/train",
    "loss/eval",
)
"""Panels of `plots/overview.png` (`*` matches one name part); absent ones are skipped."""

Row = Mapping[str, float]


def metric_name(text: str) -> str:
    """A metric-name part from free text: `win %` -> `win_pct`, `mean reward` -> `mean_reward`.

    >>> metric_name("win %"), metric_name("opponent=random, p=0.5")
    ('win_pct', 'opponent=random_p=0.5')
    """
    text = text.strip().replace("%", "pct")
    return re.sub(r"[^A-Za-z0-9=._-]+", "_", text).strip("_") or "value"


class MetricsLog:
    """Append-only metrics of one run (CSV + TensorBoard + PNG plots)."""

    def __init__(
        self, run_dir: str | Path, *, resume_step: int | None = None, tensorboard: bool = True, plots: bool = True
    ) -> None:
        self.dir = Path(run_dir)
        self.plots = plots
        """False: `plot_async` does nothing (tests, benchmarks)."""
        self.dir.mkdir(parents=True, exist_ok=True)
        self.csv_path = self.dir / CSV_NAME
        self.rows: list[dict[str, float]] = []
        self.columns: list[str] = ["step"]
        if resume_step is not None and self.csv_path.exists():
            rows, self.columns = _load_csv(self.csv_path)
            self.rows = [r for r in rows if r.get("step", math.inf) <= resume_step]
        self._rewrite()
        self._plotter: subprocess.Popen[bytes] | None = None
        self.tb: Any = None
        if tensorboard:
            try:
                from torch.utils.tensorboard import SummaryWriter
            except ImportError:  # the package `tensorboard` is missing: CSV and PNG only
                print(
                    "tensorboard is not installed: logging to metrics.csv and plots/ only (pip install tensorboard)",
                    file=sys.stderr,
                )
            else:
                purge = None if resume_step is None else resume_step + 1
                self.tb = SummaryWriter(str(self.dir / "tensorboard"), purge_step=purge)

    # ---- writing --------------------------------------------------------------------------

    def write(self, step: int, metrics: Mapping[str, float]) -> None:
        """Record `metrics` at `step` (non-finite values are kept in the CSV as nan/inf)."""
        row = {"step": float(step), **{k: float(v) for k, v in metrics.items()}}
        new = [k for k in row if k not in self.columns]
        self.columns += new
        if self.rows and self.rows[-1]["step"] == row["step"]:  # more numbers for the same step
            self.rows[-1].update(row)
            self._rewrite()
        else:
            self.rows.append(row)
            if new:
                self._rewrite()
            else:
                with self.csv_path.open("a", newline="", encoding="utf-8") as f:
                    csv.DictWriter(f, self.columns).writerow(row)
        if self.tb is not None:
            for name, value in metrics.items():
                self.tb.add_scalar(name, float(value), step)
            self.tb.flush()

    def write_text(self, step: int, tag: str, text: str) -> None:
        """A markdown note in TensorBoard (e.g. the evaluation table)."""
        if self.tb is not None:
            self.tb.add_text(tag, text, step)

    def series(self, name: str) -> tuple[list[float], list[float]]:
        """(steps, values) of one metric, where recorded."""
        points = [(r["step"], r[name]) for r in self.rows if name in r]
        return [p[0] for p in points], [p[1] for p in points]

    def close(self) -> None:
        self.wait_plots()
        if self.tb is not None:
            self.tb.close()
            self.tb = None

    # ---- plots ----------------------------------------------------------------------------

    def plot(self) -> list[Path]:
        """Redraw `plots/*.png` now, in this process; returns the files written."""
        return plot_metrics(self.rows, self.columns, self.dir / "plots")

    def plot_async(self) -> None:
        """Redraw the plots in a child process (from metrics.csv); skipped while the previous
        one still runs."""
        if not self.plots or (self._plotter is not None and self._plotter.poll() is None):
            return
        self._plotter = subprocess.Popen(
            [sys.executable, "-m", "rlvr.train.logging", str(self.dir)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )

    def wait_plots(self) -> None:
        """Wait for the child process drawing plots, if any."""
        if self._plotter is not None:
            self._plotter.wait()
            self._plotter = None

    def final_plots(self) -> None:
        """Draw the plots once more from everything logged: a drawing still running from
        older numbers is stopped first (its files are replaced anyway)."""
        if self._plotter is not None and self._plotter.poll() is None:
            self._plotter.terminate()
            self._plotter.wait()
        self._plotter = None
        self.plot_async()

    def _rewrite(self) -> None:
        tmp = self.csv_path.with_suffix(".csv.tmp")
        with tmp.open("w", newline="", encoding="utf-8") as f:
            writer = csv.DictWriter(f, self.columns)
            writer.writeheader()
            writer.writerows(self.rows)
        tmp.replace(self.csv_path)


# ---- drawing --------------------------------------------------------------------------------


def plot_metrics(rows: Sequence[Row], columns: Sequence[str], out: Path) -> list[Path]:
    """One PNG per namespace (a panel per metric) and `overview.png`."""
    names = [c for c in columns if c != "step"]
    if not rows or not names:
        return []
    out.mkdir(parents=True, exist_ok=True)
    groups: dict[str, list[str]] = {}
    for name in names:
        groups.setdefault(_namespace(name), []).append(name)
    written = []
    for group, members in groups.items():
        written.append(_figure(rows, members, out / f"{metric_name(group.replace('/', '_'))}.png", group))
    overview = list(dict.fromkeys(n for pattern in OVERVIEW for n in names if _matches(pattern, n)))
    if overview:
        written.append(_figure(rows, overview, out / "overview.png", "overview"))
    return written


def _figure(rows: Sequence[Row], names: Sequence[str], path: Path, title: str) -> Path:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    cols = min(3, len(names))
    n_rows = math.ceil(len(names) / cols)
    fig = Figure(figsize=(4.2 * cols, 2.6 * n_rows + 0.3))
    FigureCanvasAgg(fig)
    for i, name in enumerate(names):
        ax = fig.add_subplot(n_rows, cols, i + 1)
        _panel(ax, name, [(r["step"], r[name]) for r in rows if name in r and math.isfinite(r[name])])
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    tmp = path.with_suffix(".tmp.png")
    fig.savefig(tmp, dpi=80)
    tmp.replace(path)
    return path


def _namespace(name: str) -> str:
    parts = name.split("/")
    if parts[0] == "eval" and len(parts) > 2:
        return "/".join(parts[:2])
    return parts[0] if len(parts) > 1 else "misc"


def _matches(pattern: str, name: str) -> bool:
    p, n = pattern.split("/"), name.split("/")
    return len(p) == len(n) and all(a in ("*", b) for a, b in zip(p, n))


def _panel(ax: Any, name: str, points: Sequence[tuple[float, float]]) -> None:
    """One metric: the logged values and, from 20 points on, their centred moving mean, labelled."""
    if points:
        xs, ys = zip(*points)
        ax.plot(xs, ys, marker="o" if len(xs) < 30 else None, markersize=3, linewidth=1, label="logged")
        if len(ys) >= 20:
            smooth, window = centred_mean(ys)
            ax.plot(xs, smooth, linewidth=1.6, label=f"centred mean of {window}")
            ax.legend(fontsize=6, loc="best")
    ax.set_title(name, fontsize=9)
    ax.tick_params(labelsize=7)
    ax.grid(alpha=0.3)


def centred_mean(values: Sequence[float]) -> tuple[list[float], int]:
    """Each value averaged with its neighbours, `window // 2` on each side (fewer near the ends,
    the same number on both sides), where `window` is about a tenth of the points and odd.

    A centred window does not lag: a straight line comes back unchanged (an EMA of the same
    width trails a falling loss by about `window` steps). Returns the curve and the window.

    >>> centred_mean([0.0, 1.0, 2.0, 3.0, 10.0, 5.0, 6.0, 7.0, 8.0, 9.0] * 2)[1]
    3
    >>> [round(v, 3) for v in centred_mean([float(i) for i in range(30)])[0]] == list(range(30))
    True
    """
    n = len(values)
    window = max(3, n // 10) | 1
    prefix = [0.0]
    for v in values:
        prefix.append(prefix[-1] + v)
    out = []
    for i in range(n):
        half = min(window // 2, i, n - 1 - i)
        out.append((prefix[i + half + 1] - prefix[i - half]) / (2 * half + 1))
    return out, window


def _load_csv(path: Path) -> tuple[list[dict[str, float]], list[str]]:
    with path.open(newline="", encoding="utf-8") as f:
        reader = csv.DictReader(f)
        columns = list(reader.fieldnames or ["step"])
        rows = [{k: float(v) for k, v in raw.items() if k is not None and v not in (None, "")} for raw in reader]
    return rows, columns


if __name__ == "__main__":  # `python -m rlvr.train.logging RUN_DIR`: redraw a run's plots
    run = Path(sys.argv[1])
    plot_metrics(*_load_csv(run / CSV_NAME), run / "plots")
