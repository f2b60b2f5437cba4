"""The report of a results directory (`rlvr eval`, or one evaluation of a training run).

From the top: the environment's own summary (its `summarize()`, the numbers `rlvr eval` prints
under its table: win/draw/loss %, solved %...), or for an exact evaluation its sections
(`rlvr.report.exact`: the weighted table, its plots, every game that beat the policy drawn as
its board); then the reward summary, plots, the run's settings, and every rollout as a
`<details>` block that opens on click. `render_report` adds each part with one line.
"""

from __future__ import annotations

import json
import math
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from rlvr.errors import RlvrError
from rlvr.report.charts import bar_chart, histogram_bins, number
from rlvr.report.exact import counted_note, exact_sections
from rlvr.report.exact_sampled import sampled_section
from rlvr.report.page import REPORT, e, numbers_table, page, settings_table, write_page
from rlvr.results import RunDir
from rlvr.summary import summarize
from rlvr.types import Message, Rollout

MAX_HISTOGRAMS = 8
"""Reward functions drawn as histograms, at most (the first ones that are not 0/1 flags)."""


def render_report(
    metadata: dict[str, Any],
    rollouts: Sequence[Rollout],
    *,
    source: str = "",
    max_rollouts: int = 1000,
    env_summary: Mapping[str, float] | str | None = None,
) -> str:
    """The report page as a string. `env_summary`: the environment's `summarize(rollouts)`, or
    a sentence saying why there is none (see `env_summary`)."""
    per_task = metadata.get("rollouts_per_task")
    weights = metadata.get("reward_weights")
    weights = weights if isinstance(weights, dict) else None
    stats = summarize(rollouts, per_task if isinstance(per_task, int) else None, weights)
    title = "rlvr report: " + " / ".join(str(metadata.get(k, "?")) for k in ("env", "model"))
    lead = f"{stats['rollouts']} rollouts of {stats['tasks']} tasks, {stats['errors']} errors"
    if isinstance(metadata.get("status"), str):
        lead += f" &middot; {e(metadata['status'])}"
    body = [f"<h1>{e(title)}</h1>", f'<p class="lead">{lead}</p>']
    body += _own_summary(metadata, env_summary)
    body += exact_sections(metadata, rollouts)
    body += sampled_section(metadata)  # a sampled exact run's bounds and risky boards
    body += ["<h2>Rewards and rollouts</h2>", *counted_note(metadata, rollouts), _summary(stats, metadata)]
    body += ["<h2>Plots</h2>", _plots(rollouts, stats, weights)]
    body += ["<h2>Run</h2>", _settings(metadata, source)]
    body += [f"<h2>Rollouts ({len(rollouts)})</h2>", _rollouts(rollouts, max_rollouts)]
    return page(title, body)


def _own_summary(metadata: Mapping[str, Any], env_summary: Mapping[str, float] | str | None) -> list[str]:
    if isinstance(env_summary, Mapping) and env_summary:
        return [f"<h2>{e(metadata.get('env', 'environment'))}: its own summary</h2>", numbers_table(env_summary)]
    if isinstance(env_summary, str) and env_summary:
        return [f'<p class="note">{e(env_summary)}</p>']
    return []


def _settings(metadata: Mapping[str, Any], source: str) -> str:
    return settings_table(
        {
            **{k: v for k, v in metadata.items() if k != "format"},
            "results": source,
            "report written": time.strftime("%Y-%m-%dT%H:%M:%S"),
        }
    )


def env_summary(metadata: Mapping[str, Any], rollouts: Sequence[Rollout]) -> dict[str, float] | str | None:
    """The run's environment's own `summarize(rollouts)`, loaded by name with the run's
    arguments; a sentence saying why not when it cannot be had; None when the environment has
    none, or for an exact run (whose table, weighted by line probability, is its summary)."""
    from rlvr.registry import load_environment

    name, args = metadata.get("env"), metadata.get("env_args") or {}
    if metadata.get("mode") == "exact" or not rollouts:
        return None
    if not isinstance(name, str) or not isinstance(args, dict):
        return "no environment summary: the run's metadata names no environment"
    try:
        env = load_environment(name, **args)
    except RlvrError as exc:
        return f"no environment summary: {exc}"
    try:
        numbers = env.summarize(list(rollouts))
    except Exception as exc:  # the environment's own code: its failure must not cost the report
        return f"no environment summary: {name}'s summarize failed ({type(exc).__name__}: {exc})"
    return {str(k): float(v) for k, v in numbers.items()} if numbers else None


# ---- numbers ------------------------------------------------------------------------------


def _summary(s: dict[str, Any], metadata: Mapping[str, Any]) -> str:
    rows = [("reward (total)", s["reward"]["mean"], s["reward"]["std"])]
    rows += [(f"  {name}", st["mean"], st["std"]) for name, st in s["rewards"].items()]
    rows += [(f"  {name} {k}", v, None) for name, ks in s["pass_at_k"].items() for k, v in ks.items()]
    rows += [
        ("model turns", s["turns"]["mean"], s["turns"]["std"]),
        ("completion tokens", s["completion_tokens"]["mean"], s["completion_tokens"]["std"]),
        ("prompt tokens", s["prompt_tokens"]["mean"], s["prompt_tokens"]["std"]),
        ("wall seconds per rollout (overlapping)", s["seconds_per_rollout"]["mean"], s["seconds_per_rollout"]["std"]),
        ("truncated share", s["truncated"], None),
    ]
    cells = "".join(
        f"<tr><td>{e(name).replace('  ', '&emsp;')}</td><td class=num>{number(mean)}</td>"
        f"<td class=num>{'' if std is None else number(std)}</td></tr>"
        for name, mean, std in rows
    )
    errors = ", ".join(f"{k} {v}" for k, v in s["errors_by_kind"].items()) or "none"
    seconds = metadata.get("seconds")
    timing = "A rollout's wall time runs while the others in flight run too: it is not what a rollout costs." + (
        f" The run took {number(seconds, 1)} s for {s['rollouts']} rollouts "
        f"({number(s['rollouts'] / seconds, 2)} rollouts/s)."
        if isinstance(seconds, (int, float)) and seconds > 0
        else ""
    )
    return (
        f"<table><tr><th>metric</th><th>mean</th><th>std</th></tr>{cells}</table>"
        f"<p>errors: {s['errors']} ({e(errors)})</p><p class=note>{e(timing)}</p>"
    )


# ---- plots --------------------------------------------------------------------------------


def _plots(rollouts: Sequence[Rollout], s: dict[str, Any], weights: Mapping[str, float] | None) -> str:
    if not rollouts:
        return '<p class="note">no rollouts yet</p>'
    scored = [r for r in rollouts if r.error is None]
    labels, counts, caption = histogram_bins([r.reward for r in scored])
    charts = [bar_chart(labels, counts, title="reward (total): rollouts per bin", caption=caption)]
    values = {n: [r.rewards[n] for r in scored if n in r.rewards] for n in s["rewards"]}
    counted = [n for n in values if is_count(values[n], None if weights is None else weights.get(n, 0.0))]
    scores = [n for n in values if n not in counted]
    for names, title, digits, caption in (
        (scores, "mean of each reward function", 3, "rewards and 0-1 metrics, before weighting"),
        (counted, "mean of each count metric", 2, "weight-0 metrics that pass 1 (counts), on their own axis"),
    ):
        if names:
            means = [s["rewards"][n]["mean"] for n in names]
            charts.append(bar_chart(names, means, title=title, digits=digits, caption=caption))
    turns = Counter(_turns(r) for r in rollouts)
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
    spread = [n for n in values if not set(values[n]) <= {0.0, 1.0}][:MAX_HISTOGRAMS]
    if len(values) > 1:
        for name in spread:
            labels, counts, caption = histogram_bins(values[name])
            charts.append(bar_chart(labels, counts, title=f"{name}: rollouts per bin", caption=caption))
    return '<div class="plots">' + "\n".join(charts) + "</div>"


def is_count(values: Sequence[float], weight: float | None) -> bool:
    """A metric drawn apart from the 0-1 rewards: weight 0 (or unknown) and a value outside
    [-1, 1], such as a number of turns or tool calls.

    >>> is_count([0.0, 3.0], 0.0), is_count([0.0, 3.0], 1.0), is_count([0.0, 1.0], None)
    (True, False, False)
    """
    return not weight and not all(-1.0 <= v <= 1.0 for v in values)


def _turns(r: Rollout) -> int:
    turns = r.metrics.get("turns", len(r.turns))
    return int(turns) if math.isfinite(turns) else len(r.turns)


# ---- rollouts -----------------------------------------------------------------------------


def _role_class(role: str) -> str:
    return f"role-{role}" if role in ("system", "user", "assistant", "tool") else "role-other"


def _message(m: Message) -> str:
    role = str(m.get("role", "?"))
    content = str(m.get("content") or "")
    failed = " tool-error" if role == "tool" and content.startswith("Error:") else ""
    parts = [f'<div class="msg {_role_class(role)}{failed}"><div class="role">{e(role)}']
    if m.get("tool_call_id"):
        parts.append(f' <span class="note">({e(m["tool_call_id"])})</span>')
    parts.append(f"</div><pre>{e(content)}</pre>")
    for call in m.get("tool_calls") or []:
        fn = call.get("function", {}) if isinstance(call, dict) else {}
        parts.append(
            f"<pre>&#8594; {e(fn.get('name', '?'))}({e(fn.get('arguments', ''))})"
            f" <span class=note>[{e(call.get('id', '') if isinstance(call, dict) else '')}]</span></pre>"
        )
    return "".join(parts) + "</div>"


def _kv_table(d: dict[str, Any]) -> str:
    cells = "".join(
        f"<tr><td>{e(k)}</td><td class=num>{e(number(v) if isinstance(v, float) else v)}</td></tr>"
        for k, v in d.items()
    )
    return f"<table>{cells}</table>"


def _rollout(r: Rollout) -> str:
    cls = "rollout error" if r.error else "rollout truncated" if r.truncated else "rollout"
    head = (
        f"task <b>{e(r.task_id)}</b> #{r.rollout_index} &middot; reward {number(r.reward, 3)} &middot; "
        f"{e(r.stop_reason or '?')}{' (truncated)' if r.truncated else ''} &middot; {len(r.turns)} turns"
    )
    if r.error:
        head += f' &middot; <span class="err">{e(r.error_kind)}</span>'
    parts = [f'<details class="{cls}"><summary>{head}</summary><div class="body">']
    if r.error:
        parts.append(f'<p class="err"><b>error</b></p><pre class="err">{e(r.error)}</pre>')
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
        parts.append(f"<p>info</p><pre>{e(json.dumps(r.info, ensure_ascii=False, default=str))}</pre>")
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


def write_results_report(run_path: str | Path, output: str | Path | None = None, *, max_rollouts: int = 1000) -> Path:
    """Read the results directory `run_path` and write its report (default RUN_DIR/report.html)."""
    run = RunDir.open(run_path)
    rollouts = run.read()
    out = Path(output) if output is not None else run.path / REPORT
    text = render_report(
        run.metadata,
        rollouts,
        source=str(run.results_path),
        max_rollouts=max_rollouts,
        env_summary=env_summary(run.metadata, rollouts),
    )
    write_page(out, text)
    return out
