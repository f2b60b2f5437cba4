"""`rlvr report`: one self-contained HTML page of a run, for a browser.

A results directory (`rlvr eval`, or an evaluation a training run saved) gets the page of
`rlvr.report.evaluation`: the environment's own summary, the reward summary, plots and every
rollout. A training run (a folder with metrics.csv) gets the page of `rlvr.report.training`:
its curves and its evaluations, each linked to its own page.

A page has no script and loads nothing: the plots are inline SVG drawn by `rlvr.report.charts`
(no plotting library, so it works on the core install), the rollouts are `<details>` blocks
that open on click, and every piece of text from the run is HTML-escaped. Its skeleton and CSS
live in `templates/report.html`. tests/test_report_browser.py renders pages of every kind in
headless Chromium.
"""

from __future__ import annotations

from pathlib import Path

from rlvr.errors import ResultsError
from rlvr.report.charts import bar_chart, histogram_bins, line_chart
from rlvr.report.evaluation import env_summary, render_report, write_results_report
from rlvr.report.page import REPORT
from rlvr.report.training import is_training_run, write_training_report

__all__ = [
    "REPORT",
    "bar_chart",
    "env_summary",
    "histogram_bins",
    "line_chart",
    "render_report",
    "write_report",
]


def write_report(path: str | Path, output: str | Path | None = None, *, max_rollouts: int = 1000) -> Path:
    """Write the report of the run in `path` (default PATH/report.html): a results directory
    (or its results.jsonl) or a training run (or its metrics.csv). Returns the page's path.

    Raises `ResultsError` when `path` is neither; for a folder that only holds results
    directories (`eval/step_N/` of a training run), the message names them.
    """
    p = Path(path)
    if p.is_file() and p.name == "metrics.csv":
        p = p.parent
    if p.is_dir() and not (p / "metadata.json").exists() and not (p / "results.jsonl").exists():
        if is_training_run(p):
            return write_training_report(p, output, max_rollouts=max_rollouts)
        inside = sorted(str(d.parent) for d in p.glob("**/metadata.json"))[:3]
        if inside:
            raise ResultsError(
                f"{p} holds no run of its own; it holds results directories ({', '.join(inside)}, ...): "
                "pass one of them, or the training run's folder (with metrics.csv)"
            )
    return write_results_report(p, output, max_rollouts=max_rollouts)
