"""The report's section for a sampled exact evaluation (`rlvr eval ENV --exhaustive -T 1`):
each number with its bound, and every risky decision drawn as its board.

A risky decision is one where the policy puts at least the run's threshold (0.1% by default)
on replies the env rejects or that lose (`rlvr.exact_bounds.Bounds.risky`); its board is the
environment's last message before the decision, as the model saw it.
"""

from __future__ import annotations

from typing import Any

from rlvr.exact_bounds import risky_share
from rlvr.report.charts import number
from rlvr.report.page import e

NUMBERS = ("win", "draw", "loss", "timeout", "error", "rejected", "covered")
"""The table's columns, in order (`covered`: the probability the walk accounts for)."""


def sampled_section(metadata: dict[str, Any]) -> list[str]:
    """HTML blocks for a sampled exact run; [] for any other run."""
    exact = metadata.get("exact")
    s = exact.get("sampled") if isinstance(exact, dict) else None
    if not isinstance(s, dict) or not isinstance(s.get("bounds_pct"), dict):
        return []
    how = f"K = {e(s.get('samples'))} replies drawn at each decision" if s.get("sampled_decisions") else "exact"
    if not s.get("sampled_decisions") and s.get("enumerate"):
        how = "exact: every reply listed with its probability, down to the reach floor"
    if s.get("sampled_decisions") and s.get("per_reach"):
        how += f", {e(s['per_reach'])} x its reach where more ({e(s.get('samples_drawn'))} draws)"
    names = [n for n in NUMBERS if any(n in rows for rows in s["bounds_pct"].values())]
    head = "".join(f"<th>{e(n)} %</th>" for n in names)
    rows = "".join(
        f"<tr><td>{e(opp)}</td>" + "".join(f"<td class=num>{_cell(r.get(n))}</td>" for n in names) + "</tr>"
        for opp, r in s["bounds_pct"].items()
    )
    out = [
        "<h2>Exact evaluation of the sampling policy</h2>",
        f"<p>{e(s.get('decisions'))} decisions of the policy ({how}); replies reached with probability below "
        f"{e(s.get('min_reach'))} not played. Each cell: the estimate and its bound [lower, upper], all holding "
        f"together with probability &ge; {e(number(100 * (1 - float(s.get('delta', 0.05))), 3))}%.</p>",
        f"<table><tr><th>opponent</th>{head}</tr>{rows}</table>",
    ]
    missing = s.get("missing_pct")
    if isinstance(missing, dict) and missing:
        parts = "; ".join(
            f"vs {e(o)}: {e(number(float(m.get('unlisted', 0)), 4))}% unlisted, "
            f"{e(number(float(m.get('pruned', 0)), 4))}% pruned"
            for o, m in missing.items()
            if isinstance(m, dict)
        )
        tail = s.get("tail") or {}
        how_counted = "bounded by games drawn from it (below)" if tail else "counted on the upper side of every bound"
        out.append(
            f"<p>Not played, and {how_counted}: {parts} (unlisted: left out of an "
            "exact distribution below its floor; pruned: listed or drawn below the reach threshold).</p>"
        )
        for o, t in tail.items():
            out.append(
                f"<p>Tail vs {e(o)}: {e(t.get('games'))} games drawn from the "
                f"{e(number(100 * float(t.get('mass', 0)), 4))}% not played ({e(t.get('tries'))} draws for unlisted "
                f"replies; {e(t.get('unknown'))} games not had, counted 0 below and 1 above).</p>"
            )
    threshold = 100 * float(s.get("risky_threshold", 0.001))
    risky = risky_rows(s)
    out.append(
        f"<h3>Risky decisions ({len(risky)}): &ge; {e(number(threshold, 3))}% on a rejected or losing reply</h3>"
    )
    out.append("".join(_risky(row) for row in risky) or '<p class="note">none</p>')
    return out


def risky_rows(sampled: dict[str, Any]) -> list[dict[str, Any]]:
    """The risky decisions of every opponent, each (decision, kind) once with `shares`, the
    fraction of each opponent's games it costs, the costliest first (a reply judged by the env is
    risky whatever the opponent; one losing in the tree may be for one)."""
    seen: dict[tuple[Any, Any], dict[str, Any]] = {}
    for opponent, rows in (sampled.get("risky") or {}).items():
        for row in rows:
            merged = seen.setdefault((row.get("decision"), row.get("kind")), {**row, "shares": {}})
            merged.pop("share", None)  # one opponent's; `shares` has each
            try:  # from the row's own fields: runs saved before `share` was recorded have them too
                merged["shares"][opponent] = risky_share(row, opponent)
            except (KeyError, TypeError, ValueError):  # a hand-edited metadata.json: no cost shown
                pass
    return sorted(
        seen.values(),
        key=lambda r: (-max(r["shares"].values(), default=0.0), -float(r.get("prob", 0)), str(r.get("decision"))),
    )


def shares_text(row: dict[str, Any]) -> str:
    """'0.012% of games vs optimal, 0.003% vs random': what a risky decision costs."""
    costs = [(o, s) for o, s in row["shares"].items() if s > 0]  # not reached against some opponents
    return ", ".join(f"{number(100 * s, 3)}% {'' if i else 'of games '}vs {o}" for i, (o, s) in enumerate(costs))


def _cell(value: Any) -> str:
    if not isinstance(value, (list, tuple)) or len(value) != 3:
        return ""
    est, lo, hi = value
    return f"{number(est, 3)} <span class=note>[{number(lo, 3)}, {number(hi, 3)}]</span>"


def _risky(row: dict[str, Any]) -> str:
    replies = "".join(
        f"<li>{e(number(100 * float(p), 3))}%: <code>{e(text)}</code></li>" for text, p in row.get("replies", [])
    )
    return (
        f'<div class="lost"><p><b>{e(row.get("kind"))}</b>: {e(number(100 * float(row.get("prob", 0)), 3))}% '
        f"(decision {e(row.get('decision'))}, reached with policy probability {e(number(row.get('reach', 0), 4))}"
        f"{'; ' + e(cost) if (cost := shares_text(row)) else ''})"
        f"</p><pre>{e(row.get('board', ''))}</pre><ul>{replies}</ul></div>"
    )
