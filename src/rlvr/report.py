"""A self-contained HTML report of a run: metadata, summary numbers, plots, every rollout.

One file, no scripts and no external resources: the plots are inline SVG drawn here (bar charts
need no plotting library, so the report works with the core install), the rollouts are
`<details>` blocks that open on click. Every piece of text from the run is HTML-escaped. The
page skeleton and its CSS live in `templates/report.html`.
"""

from __future__ import annotations

import html
import json
import math
import string
import time
from collections import Counter
from collections.abc import Sequence
from importlib.resources import files
from pathlib import Path
from typing import Any

from rlvr.results import RunDir
from rlvr.summary import summarize
from rlvr.types import Message, Rollout

REPORT = "report.html"


def write_report(run_path: str | Path, output: str | Path | None = None, *, max_rollouts: int = 1000) -> Path:
    """Read the run in `run_path` and write its report (default: RUN_DIR/report.html).

    Raises `ResultsError` when the directory is not a readable rlvr results directory.
    """
    run = RunDir.open(run_path)
    rollouts = run.read()
    out = Path(output) if output is not None else run.path / REPORT
    page = render_report(run.metadata, rollouts, source=str(run.results_path), max_rollouts=max_rollouts)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(page, encoding="utf-8")
    return out


def render_report(
    metadata: dict[str, Any],
    rollouts: Sequence[Rollout],
    *,
    source: str = "",
    max_rollouts: int = 1000,
) -> str:
    """The report page as a string."""
    from rlvr import __version__

    per_task = metadata.get("rollouts_per_task")
    weights = metadata.get("reward_weights")
    stats = summarize(
        rollouts, per_task if isinstance(per_task, int) else None, weights if isinstance(weights, dict) else None
    )
    title = "rlvr report: " + " / ".join(str(metadata.get(k, "?")) for k in ("env", "model"))
    body = [
        f"<h1>{_e(title)}</h1>",
        _metadata(metadata, stats, source),
        *_exact(metadata, rollouts),
        "<h2>Summary</h2>",
        _summary(stats),
        "<h2>Plots</h2>",
        _plots(rollouts, stats),
        f"<h2>Rollouts ({len(rollouts)})</h2>",
        _rollouts(rollouts, max_rollouts),
    ]
    skeleton = files("rlvr").joinpath("templates", "report.html").read_text(encoding="utf-8")
    return string.Template(skeleton).substitute(title=_e(title), body="\n".join(body), version=_e(__version__))


# ---- header and numbers -------------------------------------------------------------------


def _e(value: Any) -> str:
    return html.escape(str(value), quote=True)


def _num(value: float, digits: int = 4) -> str:
    return f"{value:.{digits}f}" if isinstance(value, (int, float)) and math.isfinite(value) else "-"


def _metadata(metadata: dict[str, Any], stats: dict[str, Any], source: str) -> str:
    rows = {
        "counts": f"{stats['rollouts']} rollouts of {stats['tasks']} tasks, {stats['errors']} errors",
        **{k: v for k, v in metadata.items() if k != "format"},
        "results": source,
        "report written": time.strftime("%Y-%m-%dT%H:%M:%S"),
    }
    cells = "".join(
        f"<tr><td>{_e(k)}</td><td><code>{_e(v if isinstance(v, str) else json.dumps(v, default=str))}</code></td></tr>"
        for k, v in rows.items()
    )
    return f'<table class="meta">{cells}</table>'


def _summary(s: dict[str, Any]) -> str:
    rows = [("reward (total)", s["reward"]["mean"], s["reward"]["std"])]
    rows += [(f"  {name}", st["mean"], st["std"]) for name, st in s["rewards"].items()]
    rows += [(f"  {name} {k}", v, None) for name, ks in s["pass_at_k"].items() for k, v in ks.items()]
    rows += [
        ("turns", s["turns"]["mean"], s["turns"]["std"]),
        ("completion tokens", s["completion_tokens"]["mean"], s["completion_tokens"]["std"]),
        ("prompt tokens", s["prompt_tokens"]["mean"], s["prompt_tokens"]["std"]),
        ("seconds / rollout", s["seconds_per_rollout"]["mean"], s["seconds_per_rollout"]["std"]),
        ("truncated share", s["truncated"], None),
    ]
    cells = "".join(
        f"<tr><td>{_e(name).replace('  ', '&emsp;')}</td><td class=num>{_num(mean)}</td>"
        f"<td class=num>{'' if std is None else _num(std)}</td></tr>"
        for name, mean, std in rows
    )
    errors = ", ".join(f"{k} {v}" for k, v in s["errors_by_kind"].items()) or "none"
    return (
        f"<table><tr><th>metric</th><th>mean</th><th>std</th></tr>{cells}</table>"
        f"<p>errors: {s['errors']} ({_e(errors)})</p>"
    )


def _exact(metadata: dict[str, Any], rollouts: Sequence[Rollout]) -> list[str]:
    """An exact run (`rlvr eval --exhaustive`): its rates per opponent, the verdict, and every
    game that beat the policy with its last environment message (for a board game, the board)."""
    exact = metadata.get("exact")
    if not isinstance(exact, dict) or not isinstance(exact.get("rates_pct"), dict):
        return []
    from rlvr.exact import lost_games

    rates = exact["rates_pct"]
    labels = sorted({k for r in rates.values() for k in r})
    head = "".join(f"<th>{_e(k)} %</th>" for k in labels)
    rows = "".join(
        f"<tr><td>{_e(opp)}</td>" + "".join(f"<td class=num>{_num(r.get(k, 0.0), 2)}</td>" for k in labels) + "</tr>"
        for opp, r in rates.items()
    )
    lost = lost_games(rollouts, exact.get("failures", ()))
    verdict = "yes: no line of play beats it" if exact.get("unbeatable") else f"no: {len(lost)} games beat it"
    games = []
    for game in lost:
        detail = game.info.get("exact", {})
        last = next((m for t in reversed(game.turns) for m in reversed(t.env_messages)), None)
        board = str(last.get("content") or "") if last else ""
        games.append(
            f'<div class="lost"><p><b>{_e(detail.get("outcome"))}</b>: <code>{_e(game.task_id)}</code> '
            f"{_e(detail.get('moves', ''))}</p><pre>{_e(board)}</pre></div>"
        )
    return [
        "<h2>Exact evaluation</h2>",
        f"<p>{_e(exact.get('games'))} games: every line of play; exact rates, weighted by each opponent's "
        f"move probabilities. Unbeatable: <b>{_e(verdict)}</b>. Games with a rejected move: "
        f"{_e(exact.get('rejected_move_games'))}.</p>",
        f"<table><tr><th>opponent</th>{head}</tr>{rows}</table>",
        f"<h3>Games that beat the policy ({len(lost)})</h3>",
        "".join(games) or '<p class="note">none</p>',
    ]


# ---- plots --------------------------------------------------------------------------------


def bar_chart(
    labels: Sequence[str],
    values: Sequence[float],
    *,
    title: str,
    caption: str = "",
    width: int = 440,
    height: int = 230,
    digits: int = 0,
) -> str:
    """An inline SVG bar chart (negative values hang below the zero line; NaN shows as "-")."""
    left, right, top, bottom = 12, 12, 40, 44
    texts = [f"{v:.{digits}f}" if math.isfinite(v) else "-" for v in values]
    values = [v if math.isfinite(v) else 0.0 for v in values]
    lo, hi = min([0.0, *values]), max([0.0, *values])
    if hi == lo:
        hi = lo + 1.0

    def y(v: float) -> float:
        return top + (height - top - bottom) * (hi - v) / (hi - lo)

    slot = (width - left - right) / max(len(values), 1)
    parts = [
        (
            f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" role="img" '
            f'aria-label="{_e(title)}"><text class="title" x="{left}" y="18">{_e(title)}</text>'
        ),
        f'<text x="{width / 2}" y="{height - 8}" text-anchor="middle">{_e(caption)}</text>',
    ]
    bar_w = min(slot * 0.8, 60.0)
    small, fits = len(values) > 12, max(int(slot / 6.5), 3)
    for i, (label, v, text) in enumerate(zip(labels, values, texts)):
        cx = left + (i + 0.5) * slot
        x, y0, y1 = cx - bar_w / 2, y(max(v, 0.0)), y(min(v, 0.0))
        cls = "bar neg" if v < 0 else "bar"
        parts.append(
            f'<rect class="{cls}" x="{x:.1f}" y="{y0:.1f}" width="{bar_w:.1f}" '
            f'height="{max(y1 - y0, 0.5):.1f}"><title>{_e(label)}: {text}</title></rect>'
        )
        if not small or v:
            parts.append(f'<text x="{cx:.1f}" y="{y0 - 3:.1f}" text-anchor="middle">{_e(text)}</text>')
        if not small or i % max(len(values) // 6, 1) == 0:
            short = label if len(label) <= fits else label[: fits - 1] + "\u2026"
            parts.append(f'<text x="{cx:.1f}" y="{height - bottom + 14}" text-anchor="middle">{_e(short)}</text>')
    zero = y(0.0)
    parts.append(f'<line x1="{left}" x2="{width - right}" y1="{zero:.1f}" y2="{zero:.1f}" stroke="#888"/></svg>')
    return "".join(parts)


def histogram_bins(values: Sequence[float], bins: int = 10) -> tuple[list[str], list[float], str]:
    """Counts of `values` in `bins` equal bins spanning at least [0, 1]: labels (bin starts),
    counts, and a caption saying what the bins are.

    >>> histogram_bins([0.0, 0.05, 0.5, 1.0], bins=2)
    (['0.00', '0.50'], [2.0, 2.0], 'bins of width 0.5 from 0 to 1 (labels: bin start)')
    """
    finite = [v for v in values if math.isfinite(v)]
    lo, hi = min([0.0, *finite]), max([1.0, *finite])
    step = (hi - lo) / bins
    counts = [0.0] * bins
    for v in finite:
        counts[min(int((v - lo) / step), bins - 1)] += 1
    caption = f"bins of width {step:.3g} from {lo:g} to {hi:g} (labels: bin start)"
    return [f"{lo + i * step:.2f}" for i in range(bins)], counts, caption


def _plots(rollouts: Sequence[Rollout], s: dict[str, Any]) -> str:
    if not rollouts:
        return '<p class="note">no rollouts yet</p>'
    scored = [r for r in rollouts if r.error is None]
    labels, counts, caption = histogram_bins([r.reward for r in scored])
    charts = [bar_chart(labels, counts, title="reward (total): rollouts per bin", caption=caption)]
    names = list(s["rewards"])
    if names:
        charts.append(
            bar_chart(
                names,
                [s["rewards"][n]["mean"] for n in names],
                title="mean of each reward function",
                digits=3,
                caption="over scored rollouts, before weighting",
            )
        )
    turns = Counter(int(r.metrics.get("turns", len(r.turns))) for r in rollouts)
    span = range(min(turns), max(turns) + 1) if max(turns) - min(turns) <= 60 else sorted(turns)
    charts.append(
        bar_chart(
            [str(t) for t in span],
            [float(turns[t]) for t in span],
            title="turns per rollout",
            caption="model turns (bars: rollouts)",
        )
    )
    stops = Counter(r.stop_reason or "?" for r in rollouts).most_common()
    charts.append(
        bar_chart(
            [k for k, _ in stops],
            [float(v) for _, v in stops],
            title="stop reasons",
            caption="rollouts by the condition that ended them",
        )
    )
    if 1 < len(names) <= 8:
        for name in names:
            values = [r.rewards[name] for r in scored if name in r.rewards]
            labels, counts, caption = histogram_bins(values)
            charts.append(bar_chart(labels, counts, title=f"{name}: rollouts per bin", caption=caption))
    return '<div class="plots">' + "\n".join(charts) + "</div>"


# ---- rollouts -----------------------------------------------------------------------------


def _role_class(role: str) -> str:
    return f"role-{role}" if role in ("system", "user", "assistant", "tool") else "role-other"


def _message(m: Message) -> str:
    role = str(m.get("role", "?"))
    parts = [f'<div class="msg {_role_class(role)}"><div class="role">{_e(role)}']
    if m.get("tool_call_id"):
        parts.append(f' <span class="note">({_e(m["tool_call_id"])})</span>')
    parts.append(f"</div><pre>{_e(m.get('content') or '')}</pre>")
    for call in m.get("tool_calls") or []:
        fn = call.get("function", {}) if isinstance(call, dict) else {}
        parts.append(
            f"<pre>&#8594; {_e(fn.get('name', '?'))}({_e(fn.get('arguments', ''))})"
            f" <span class=note>[{_e(call.get('id', '') if isinstance(call, dict) else '')}]</span></pre>"
        )
    return "".join(parts) + "</div>"


def _kv_table(d: dict[str, Any]) -> str:
    cells = "".join(
        f"<tr><td>{_e(k)}</td><td class=num>{_e(_num(v) if isinstance(v, float) else v)}</td></tr>"
        for k, v in d.items()
    )
    return f"<table>{cells}</table>"


def _rollout(r: Rollout) -> str:
    cls = "rollout error" if r.error else "rollout truncated" if r.truncated else "rollout"
    head = (
        f"task <b>{_e(r.task_id)}</b> #{r.rollout_index} &middot; reward {_num(r.reward, 3)} &middot; "
        f"{_e(r.stop_reason or '?')}{' (truncated)' if r.truncated else ''} &middot; {len(r.turns)} turns"
    )
    if r.error:
        head += f' &middot; <span class="err">{_e(r.error_kind)}</span>'
    parts = [f'<details class="{cls}"><summary>{head}</summary><div class="body">']
    if r.error:
        parts.append(f'<p class="err"><b>error</b></p><pre class="err">{_e(r.error)}</pre>')
    parts.extend(_message(m) for m in r.messages)
    details = {
        "reward (total)": r.reward,
        **r.rewards,
        **{f"metric/{k}": v for k, v in r.metrics.items()},
        "stop reason": r.stop_reason,
        "truncated": r.truncated,
        "answer": r.answer,
        "seed": r.seed,
        "prompt tokens": r.usage.prompt_tokens,
        "completion tokens": r.usage.completion_tokens,
        **{f"seconds/{k}": v for k, v in r.timing.items()},
    }
    parts.append(_kv_table(details))
    if r.info:
        parts.append(f"<p>info</p><pre>{_e(json.dumps(r.info, ensure_ascii=False, default=str))}</pre>")
    return "".join(parts) + "</div></details>"


def _rollouts(rollouts: Sequence[Rollout], limit: int) -> str:
    shown = list(rollouts[:limit])
    note = (
        f'<p class="note">showing the first {len(shown)} of {len(rollouts)} rollouts '
        "(rlvr report --max-rollouts N shows more)</p>"
        if len(rollouts) > len(shown)
        else ""
    )
    return note + "\n".join(_rollout(r) for r in shown)
