"""The sections of an exact evaluation's report (`rlvr eval --exhaustive`, see `rlvr.exact`).

An exact run has two kinds of numbers, and each figure says which it shows:

- **weighted**: a game counts with its probability under an opponent's moves (the product of
  that opponent's move probabilities along the line), so the rates are what that opponent
  would see in the long run: the W/D/L table and its bars;
- **counted**: every line of play counts once, whatever its probability: the number of games
  per outcome, and the page's reward summary and plots below (a mean reward of lines of play
  is not a rate of play).

From the top: the weighted table and the verdict, the bars (weighted per opponent, then games
counted), then every game that beat the policy drawn as its final board, under the decisions
that lost them. Each section is a function of (metadata, rollouts) returning its HTML parts;
`SECTIONS` lists them in page order.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from rlvr.report.charts import bar_chart, number
from rlvr.report.page import e
from rlvr.types import Rollout

OUTCOMES = ("win", "draw", "loss", "timeout", "error")
"""The order of an exact table's columns (others follow, by name)."""

WEIGHTED = "weighted: each game counts with its probability under {opponent}'s moves"
COUNTED = "counted: each line of play once, whatever its probability"

Section = Callable[[Mapping[str, Any], Sequence[Rollout]], list[str]]


def exact_summary(metadata: Mapping[str, Any]) -> dict[str, Any] | None:
    """The `exact` table a complete exact run keeps in its metadata; None for another run."""
    exact = metadata.get("exact")
    return exact if isinstance(exact, dict) and isinstance(exact.get("rates_pct"), dict) else None


def outcome_order(label: str) -> tuple[int, str]:
    return (OUTCOMES.index(label) if label in OUTCOMES else len(OUTCOMES), label)


def _labels(rates: Mapping[str, Mapping[str, float]]) -> list[str]:
    return sorted({k for r in rates.values() for k in r}, key=outcome_order)


def rates(metadata: Mapping[str, Any], rollouts: Sequence[Rollout]) -> list[str]:
    """The weighted W/D/L table per opponent, the verdict and what was counted."""
    exact = exact_summary(metadata) or {}
    table = exact["rates_pct"]
    labels = _labels(table)
    head = "".join(f"<th>{e(k)} %</th>" for k in labels)
    rows = "".join(
        f"<tr><td>{e(opp)}</td>" + "".join(f"<td class=num>{number(r.get(k, 0.0), 2)}</td>" for k in labels) + "</tr>"
        for opp, r in table.items()
    )
    beaten = len(exact.get("beaten") or ())
    verdict = "yes: no line of play beats it" if exact.get("unbeatable") else f"no: {beaten} games beat it"
    return [
        "<h2>Exact evaluation</h2>",
        f"<p>{e(exact.get('games'))} games: every line of play the policy can reach, "
        f"{e(exact.get('model_calls'))} positions it answered. Unbeatable: <b>{e(verdict)}</b>. "
        f"Games with a rejected move: {e(exact.get('rejected_move_games'))}.</p>",
        f'<table class="headline"><tr><th>opponent</th>{head}</tr>{rows}</table>',
        "<p class=\"note\">Rates weighted: each game counts with its probability under that row's opponent's moves "
        "(exact, no sampling).</p>",
    ]


def outcome_bars(metadata: Mapping[str, Any], rollouts: Sequence[Rollout]) -> list[str]:
    """A bar chart of the weighted rates per opponent, and one of the games counted."""
    exact = exact_summary(metadata) or {}
    table = exact["rates_pct"]
    labels = _labels(table)
    charts = [
        bar_chart(
            labels,
            [float(r.get(k, 0.0)) for k in labels],
            title=f"vs {opponent}: outcome % (weighted)",
            caption=WEIGHTED.format(opponent=opponent),
            digits=2,
        )
        for opponent, r in table.items()
    ]
    counted = Counter(str(g.info.get("exact", {}).get("outcome", "?")) for g in rollouts)
    if counted:
        names = sorted(counted, key=outcome_order)
        charts.append(
            bar_chart(names, [float(counted[n]) for n in names], title="games by outcome (counted)", caption=COUNTED)
        )
    return ['<div class="plots">' + "\n".join(charts) + "</div>"]


def lost_boards(metadata: Mapping[str, Any], rollouts: Sequence[Rollout]) -> list[str]:
    """The decisions that lost games, then each game that beat the policy: its moves, the
    decision, its probability per opponent, and its last environment message (the board)."""
    from rlvr.exact import lost_games

    exact = exact_summary(metadata) or {}
    lost = lost_games(rollouts, exact.get("failures", ()))
    found = exact.get("mistakes")
    mistakes: dict[str, Any] = found if isinstance(found, dict) else {}
    decisions = "".join(f"<li><code>{e(k)}</code>: {e(v)} game(s)</li>" for k, v in mistakes.items())
    boards = [_board(game) for game in lost]
    return [
        f"<h2>Games that beat the policy ({len(lost)})</h2>",
        f"<p>Through {len(mistakes)} decision(s) (the position, the move, the moves that hold):</p><ul>{decisions}</ul>"
        if decisions
        else "",
        '<div class="boards">' + "".join(boards) + "</div>" if boards else '<p class="note">none</p>',
    ]


def _board(game: Rollout) -> str:
    detail = game.info.get("exact", {})
    moves = str(detail.get("moves") or "")
    name = moves or game.task_id
    other = f" (task <code>{e(game.task_id)}</code>)" if moves and moves != game.task_id else ""
    weights = detail.get("weights") if isinstance(detail.get("weights"), dict) else {}
    chances = ", ".join(f"{e(o)} {number(100.0 * float(w), 3)}%" for o, w in weights.items())
    last = next((m for t in reversed(game.turns) for m in reversed(t.env_messages)), None)
    board = str(last.get("content") or "") if last else ""
    lines = [f"<b>{e(detail.get('outcome'))}</b>: <code>{e(name)}</code>{other}"]
    if detail.get("mistake"):
        lines.append(f"decision <code>{e(detail['mistake'])}</code>")
    if chances:
        lines.append(f'<span class="note">probability: {chances}</span>')
    return f'<div class="lost"><p>{"<br>".join(lines)}</p><pre>{e(board)}</pre></div>'


SECTIONS: tuple[Section, ...] = (rates, outcome_bars, lost_boards)
"""An exact run's sections, in page order."""


def exact_sections(metadata: Mapping[str, Any], rollouts: Sequence[Rollout]) -> list[str]:
    """Every section of an exact (greedy) walk's page, in order; [] for a run that is not one and
    for a sampled walk, whose rates are estimates with bounds (`report.exact_sampled`): "unbeatable"
    and "no sampling" would be false there."""
    exact = metadata.get("exact")
    if exact_summary(metadata) is None or (isinstance(exact, Mapping) and exact.get("sampled")):
        return []
    return [part for section in SECTIONS for part in section(metadata, rollouts)]


def counted_note(metadata: Mapping[str, Any], rollouts: Sequence[Rollout]) -> list[str]:
    """Above an exact run's reward summary: its numbers count each line of play once."""
    if exact_summary(metadata) is None:
        return []
    return [
        f'<p class="note">The summary and plots below are {e(COUNTED)}: over the {len(rollouts)} '
        "games, not the rates of play above.</p>"
    ]
