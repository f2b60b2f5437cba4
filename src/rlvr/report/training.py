"""The report of a training run: a folder holding `metrics.csv` (`rlvr train`, `rlvr sft`).

One self-contained page like a results report, in three parts (`GROUPS`): the reward (the
training batch's and each reward function, outcome rates, a table of every evaluation with a
link to its rollouts, their curves), loss and training statistics (KL, entropy, clipping,
lengths, learning rate and the rest), throughput and time; then the run's config. A curve of
many steps is drawn faint under its moving mean in bold (`charts.line_chart(smooth=True)`):
one step's reward is noise, a trend over tens of steps is the signal. The evaluations saved under
`eval/step_N/LABEL/` (and `eval/step_N/exact/`) are results directories: their own reports
are written beside them, so the links open pages too.

Which curves share an axis: rates of one namespace (`outcome/*_pct`, `exact/random/*_pct`,
`*_frac`), the reward functions of one namespace whose values stay within [-1, 1] (rewards and
0-1 metrics), and the parts of `loss/`, `clip/`, `ratio/`, `is_weight/` and `time/`; the total
reward of the training batch with each evaluation set's. Everything else, counts included
(`reward/turns`), gets an axis of its own.
"""

from __future__ import annotations

import csv
import json
import math
import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import quote

from rlvr.errors import ResultsError
from rlvr.report.charts import line_chart, number
from rlvr.report.evaluation import write_results_report
from rlvr.report.page import REPORT, e, page, settings_table, write_page

METRICS = "metrics.csv"
CONFIGS = ("config.json", "sft_config.json")
"""The config a run saves: `rlvr train`'s, `rlvr sft`'s."""

SECTIONS = (
    ("Reward", ("reward",)),
    ("Outcomes", ("outcome",)),
    ("Evaluation sets", ("eval",)),
    ("Exact evaluation", ("exact",)),
    ("Loss", ("loss",)),
    ("KL and entropy", ("kl", "entropy")),
    ("Clipping and importance weights", ("clip", "ratio", "is_weight", "logprob")),
    ("Lengths", ("rollout", "tokens")),
    ("Groups", ("group", "batch")),
    ("Throughput and time", ("throughput", "time")),
    ("Learning rate and gradients", ("optim", "grad")),
)
"""Headings of the curves, and the metric namespaces under each; a namespace listed nowhere
goes under "Other"."""

GROUPS = (
    ("Reward", ("Reward", "Outcomes", "Evaluations", "Evaluation sets", "Exact evaluations", "Exact evaluation")),
    (
        "Loss and training statistics",
        (
            "Loss",
            "KL and entropy",
            "Clipping and importance weights",
            "Lengths",
            "Groups",
            "Learning rate and gradients",
            "Other",
        ),
    ),
    ("Throughput and time", ("Throughput and time",)),
)
"""The page's three parts, in order (each an h2), and the sections under each (an h3; a
section named as its part goes right under the part's heading): what training achieved, how
it behaved, what it cost. "Evaluations" and "Exact evaluations" are tables, the rest curves."""

SHARED = frozenset({"loss", "clip", "ratio", "is_weight", "time"})
"""Namespaces whose metrics share one axis (the same unit)."""

Row = dict[str, float]
TOTAL = ("reward (total)",)
"""The panel of the total reward: the training batch's and each evaluation set's."""


def is_training_run(path: Path) -> bool:
    return (path / METRICS).is_file()


def read_metrics(path: Path) -> list[Row]:
    """The rows of a metrics.csv that have a (finite) step; cells that are empty or not a
    number (a row being written while the file is read) are left out. nan and inf are numbers."""
    try:
        with path.open(newline="", encoding="utf-8") as f:
            rows = []
            for raw in csv.DictReader(f):
                row = {k: _float(v) for k, v in raw.items() if k is not None and isinstance(v, str)}
                rows.append({k: v for k, v in row.items() if v is not None})
    except (UnicodeDecodeError, csv.Error) as exc:
        raise ResultsError(f"{path} is not a metrics file ({exc})") from None
    return [r for r in rows if math.isfinite(r.get("step", math.nan))]


def _float(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def eval_dirs(run: Path) -> dict[tuple[int, str], Path]:
    """The saved evaluations of a run: (step, label) -> `eval/step_N/LABEL/` (`exact` included)."""
    found = {}
    for path in sorted(run.glob("eval/step_*/*/")):
        step = re.fullmatch(r"step_(\d+)", path.parent.name)
        if step and ((path / "metadata.json").exists() or (path / "results.jsonl").exists()):
            found[int(step.group(1)), path.name] = path
    return found


def write_training_report(run: Path, output: str | Path | None = None, *, max_rollouts: int = 1000) -> Path:
    """Write the report of the training run in `run` (default RUN/report.html), and the report
    of each evaluation it saved (in its own folder) for the page to link to."""
    out = Path(output) if output is not None else run / REPORT
    links: dict[tuple[int, str], str | None] = {}
    for key, path in eval_dirs(run).items():
        try:
            links[key] = href(write_results_report(path, max_rollouts=max_rollouts), out.parent)
        except ResultsError:
            links[key] = None  # shown as unreadable; the curves do not depend on it
    text = render_training_report(run, read_metrics(run / METRICS), read_config(run), links)
    write_page(out, text)
    return out


def render_training_report(
    run: Path, rows: Sequence[Row], config: Mapping[str, Any], links: Mapping[tuple[int, str], str | None]
) -> str:
    """The page of a training run. `links`: (step, label) -> the href of that evaluation's
    report (None: its folder is unreadable).

    From the top: what training achieved (reward, outcomes, the evaluations: a table, then
    their curves; the exact evaluations the same), how training behaved (loss, KL, ...), what
    it cost (throughput, time), the config."""
    what = " / ".join(str(config[k]) for k in ("env", "data", "model") if k in config)
    title = f"rlvr report: training run {run.name}" + (f" ({what})" if what else "")
    steps = [int(r["step"]) for r in rows]
    lead = f"{len(rows)} rows of metrics, steps {steps[0]} to {steps[-1]}" if rows else "no steps logged yet"
    sections = {
        **_curves(rows),
        "Evaluations": _eval_table(rows, links),
        "Exact evaluations": _exact_table(rows, links),
    }
    body = [f"<h1>{e(title)}</h1>", f'<p class="lead">{e(lead)} &middot; {len(links)} saved evaluations</p>']
    for group, names in GROUPS:
        parts = [(name, sections[name]) for name in names if sections.get(name)]
        if parts:
            body.append(f"<h2>{e(group)}</h2>")
            body += [
                piece for name, html in parts for piece in ([] if name == group else [f"<h3>{e(name)}</h3>"]) + html
            ]
    body += ["<h2>Config</h2>", settings_table(_rows(config)) if config else '<p class="note">no config file</p>']
    return page(title, body)


def _rows(config: Mapping[str, Any]) -> dict[str, Any]:
    """One row a setting: a section's fields as `section.field` (a saved config nests them).

    >>> _rows({"steps": 3, "eval": {"every": 5, "exact": True}})
    {'steps': 3, 'eval.every': 5, 'eval.exact': True}
    """
    rows: dict[str, Any] = {}
    for key, value in config.items():
        if isinstance(value, Mapping):
            rows.update((f"{key}.{name}", v) for name, v in value.items())
        else:
            rows[key] = value
    return rows


def read_config(run: Path) -> dict[str, Any]:
    for name in CONFIGS:
        path = run / name
        if path.is_file():
            try:
                config = json.loads(path.read_text(encoding="utf-8"))
            except (json.JSONDecodeError, UnicodeDecodeError) as exc:
                raise ResultsError(f"{path} is not valid JSON ({exc})") from None
            return config if isinstance(config, dict) else {}
    return {}


def href(target: Path, page_dir: Path) -> str:
    """A link from a page in `page_dir` to `target`, relative, URL-quoted."""
    return quote(Path(os.path.relpath(target, page_dir)).as_posix())


# ---- evaluation tables --------------------------------------------------------------------


def _eval_table(rows: Sequence[Row], links: Mapping[tuple[int, str], str | None]) -> list[str]:
    """One row per (step, evaluation set): its reward, outcomes and errors, and a link."""
    at = {int(r["step"]): r for r in rows}
    names = list(dict.fromkeys(n for r in rows for n in r if n.startswith("eval/") and n.count("/") >= 2))
    logged = {(s, n.split("/")[1]) for s, r in at.items() for n in r if n in names}
    sets = sorted(logged | {k for k in links if k[1] != "exact"})
    if not sets:
        return []
    outcomes = list(dict.fromkeys(n.split("/", 3)[3] for n in names if n.split("/")[2:3] == ["outcome"]))
    head = "".join(f"<th>{e(_label(c))}</th>" for c in ("step", "set", "reward", *outcomes, "errors", ""))
    lines = []
    for step, label in sets:
        row, key = at.get(step, {}), f"eval/{label}/"
        cells = [(row.get(key + "reward/mean"), 3)]
        cells += [(row.get(f"{key}outcome/{c}"), 1 if c.endswith("_pct") else 3) for c in outcomes]
        cells.append((row.get(key + "error_frac"), 3))
        lines.append(
            f"<tr><td class=num>{step}</td><td>{e(label)}</td>"
            + "".join(f"<td class=num>{number(v, digits, small=False)}</td>" for v, digits in cells)
            + f"<td>{_link(links, (step, label), 'rollouts')}</td></tr>"
        )
    return [f'<table class="wide"><tr>{head}</tr>{"".join(lines)}</table>']


def _exact_table(rows: Sequence[Row], links: Mapping[tuple[int, str], str | None]) -> list[str]:
    """One row per (step, opponent) of the exact evaluations: the rates; a link per step."""
    at = {int(r["step"]): r for r in rows}
    steps = sorted({s for s, r in at.items() if "exact/beaten_games" in r} | {s for s, lb in links if lb == "exact"})
    if not steps:
        return []
    opponents = sorted({n.split("/")[1] for r in rows for n in r if n.startswith("exact/") and n.count("/") == 2})
    head = "".join(
        f"<th>{c}</th>" for c in ("step", "opponent", "win %", "draw %", "loss %", "other %", "beaten", "decisions", "")
    )
    lines = []
    for step in steps:
        row = at.get(step, {})
        for i, opponent in enumerate(opponents or ["-"]):
            rates = [row.get(f"exact/{opponent}/{k}_pct") for k in ("win", "draw", "loss", "other")]
            beaten = number(row.get("exact/beaten_games"), 0) if i == 0 else ""
            decisions = number(row.get("exact/losing_decisions"), 0) if i == 0 else ""
            lines.append(
                f"<tr><td class=num>{step}</td><td>{e(opponent)}</td>"
                + "".join(f"<td class=num>{number(v, 2, small=False)}</td>" for v in rates)
                + f"<td class=num>{beaten}</td><td class=num>{decisions}</td><td>{_link(links, (step, 'exact'), 'games') if i == 0 else ''}</td></tr>"
            )
    return [
        '<p class="note">greedy play over every line of the game tree; rates weighted by each '
        "opponent's move probabilities; beaten: games (lines of play) the policy loses or times out; "
        "decisions: the distinct losing decisions those games went through</p>",
        f'<table class="wide"><tr>{head}</tr>{"".join(lines)}</table>',
    ]


def _link(links: Mapping[tuple[int, str], str | None], key: tuple[int, str], text: str) -> str:
    if key not in links:
        return '<span class="note">not saved</span>'
    target = links[key]
    return f'<a href="{e(target)}">{e(text)}</a>' if target else '<span class="err">unreadable</span>'


def _label(column: str) -> str:
    return column.removesuffix("_pct") + " %" if column.endswith("_pct") else column


# ---- curves -------------------------------------------------------------------------------


def _curves(rows: Sequence[Row]) -> dict[str, list[str]]:
    """Heading -> its plots, in `SECTIONS` order."""
    names = list(dict.fromkeys(n for r in rows for n in r if n != "step"))
    series = {n: ([r["step"] for r in rows if n in r], [r[n] for r in rows if n in r]) for n in names}
    panels: dict[tuple[str, ...], list[str]] = {}
    for name in names:
        panels.setdefault(_axis(name, series[name][1]), []).append(name)
    by_section: dict[str, list[str]] = {}
    for key, members in panels.items():
        section = "Reward" if key == TOTAL else _section(members[0])
        by_section.setdefault(section, []).append(_panel(key, members, series))
    return {
        heading: ['<div class="plots">' + "\n".join(by_section[heading]) + "</div>"]
        for heading in [h for h, _ in SECTIONS] + ["Other"]
        if heading in by_section
    }


def _axis(name: str, values: Sequence[float]) -> tuple[str, ...]:
    """The key of the panel `name` is drawn in: metrics with equal keys share an axis."""
    parts = name.split("/")
    prefix, leaf = "/".join(parts[:-1]), parts[-1]
    if name == "reward/mean" or (parts[0] == "eval" and parts[2:] == ["reward", "mean"]):
        return TOTAL
    if leaf.endswith("_pct"):
        return (prefix, "%")
    if leaf == "frac" or leaf.endswith("_frac"):
        return (prefix, "share")
    if parts[-2:-1] == ["reward"] and leaf != "std" and all(-1.0 <= v <= 1.0 for v in values):
        return (prefix, "0-1")
    if parts[0] in SHARED and len(parts) > 1:
        return (prefix,)
    return (name,)


def _section(name: str) -> str:
    head = name.split("/")[0]
    return next((heading for heading, spaces in SECTIONS if head in spaces), "Other")


_UNITS = {"%": "(%)", "share": "(share)", "0-1": "(0-1 scale)"}


def _panel(key: tuple[str, ...], members: list[str], series: Mapping[str, tuple[list[float], list[float]]]) -> str:
    if key == TOTAL:
        title = "reward (total)"
        members = sorted(members, key=lambda n: n != "reward/mean")
        labels = ["training batch" if n == "reward/mean" else n.split("/")[1] for n in members]
    else:
        unit = f" {_UNITS[key[1]]}" if len(key) > 1 else ""
        title = (members[0] if len(members) == 1 else key[0]) + unit
        labels = members if len(members) == 1 else [n.removeprefix(key[0] + "/") for n in members]
    include = {"%": (0.0, 100.0), "share": (0.0, 1.0)}.get(key[-1], ())
    curves = {label: series[n] for label, n in zip(labels, members)}
    return line_chart(curves, title=title, include=include, smooth=True)
