"""Rewards and metrics of the tic-tac-toe environment, and the eval summary table.

Outcomes are from the model's side (it plays X). A game that did not finish (max_turns, or
any other truncation) is a *timeout*: no win, no draw, no loss.

Format credit: a turn is well formatted when it is exactly `<think>...</think>` then
`<move>N</move>` (N a cell number 0-8; whitespace between or around the blocks is fine, both
blocks non-empty, nothing else). The think block is required for format credit; a move
without it is still played, it only earns no format credit.
"""

from __future__ import annotations

import functools
import re
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from rlvr import Rubric, State, XMLParser
from rlvr.parsers import assistant_texts
from rlvr.rubric import RewardFn
from rlvr.types import Messages
from rlvr_tictactoe.game import EMPTY_BOARD, Board

PARSER = XMLParser(["think", "move"])
"""Lenient reading of the move (the last top-level `<move>` wins), strict format check."""
parse = functools.lru_cache(maxsize=16384)(PARSER.parse)
"""`PARSER.parse`, cached: the env reads each reply once and the rubric again. Read-only."""
INVALID_MOVE_PENALTY = -0.1
WEIGHTS = {"win_reward": 1.0, "format_reward": 0.2, "invalid_move_penalty": 1.0}
_CELL = re.compile(r"[0-8]")


@dataclass(kw_only=True)
class GameState(State):
    """One game, from the model's side: it plays X, the opponent O."""

    board: Board = EMPTY_BOARD
    random_move_prob: float = 0.0
    """Chance that the opponent plays a uniformly random cell instead of a minimax one."""
    outcome: str | None = None
    """`win`, `draw` or `loss` for the model once the game is over; None while it runs."""
    invalid_moves: int = 0
    """Model turns rejected: no readable move, not a cell number 0-8, or a taken cell."""
    moves: list[int] = field(default_factory=list)
    """Cells taken after the prompt's board, both sides, in order."""
    false_claims: int = 0
    """Model turns whose reasoning misstates the board (`game.claim_truth`: a win, a threat, or no
    threat that is not there)."""
    missed_wins: int = 0
    """Model turns that played another cell while a win was on the board (`game.winning_cells`)."""
    line_ended: bool = False
    """Exact evaluation only: O was to move and the task's fixed line of replies had run out."""


def is_formatted(text: str) -> bool:
    """True when one reply is exactly a non-empty think block, then a move 0-8.

    >>> is_formatted("<think>take the centre</think>\\n<move>4</move>")
    True
    >>> is_formatted("<move>4</move>"), is_formatted("<think>x</think><move>9</move>")
    (False, False)
    """
    parsed = parse(text)  # the rule of PARSER.is_formatted, without parsing twice
    if not parsed.well_formed or parsed.outside_text:
        return False
    if [el.name for el in parsed.elements] != ["think", "move"] or not parsed.elements[0].content:
        return False
    return _CELL.fullmatch(parsed.elements[1].content) is not None


# ---- rewards (weighted) ---------------------------------------------------------------------


def win_reward(state: GameState) -> float:
    """1 for a win, 0.5 for a draw, 0 for a loss or an unfinished game.

    >>> from rlvr import Task
    >>> [win_reward(GameState(task=Task("t"), outcome=o)) for o in ("win", "draw", "loss", None)]
    [1.0, 0.5, 0.0, 0.0]
    """
    return {"win": 1.0, "draw": 0.5}.get(state.outcome or "", 0.0)


def format_reward(completion: Messages) -> float:
    """Share of the model's turns that are exactly think-then-move (see `is_formatted`).

    >>> format_reward([{"role": "assistant", "content": "<think>a</think><move>4</move>"},
    ...                {"role": "user", "content": "board"},
    ...                {"role": "assistant", "content": "<move>0</move>"}])
    0.5
    """
    texts = assistant_texts(completion)
    return sum(map(is_formatted, texts)) / len(texts) if texts else 0.0


def invalid_move_penalty(state: GameState) -> float:
    """-0.1 if the model made any invalid move, else 0.

    >>> from rlvr import Task
    >>> invalid_move_penalty(GameState(task=Task("t"), invalid_moves=2))
    -0.1
    """
    return INVALID_MOVE_PENALTY if state.invalid_moves else 0.0


# ---- metrics (weight 0) ---------------------------------------------------------------------


def win(state: GameState) -> float:
    """1 if the model won."""
    return float(state.outcome == "win")


def draw(state: GameState) -> float:
    """1 if the game was drawn."""
    return float(state.outcome == "draw")


def loss(state: GameState) -> float:
    """1 if the model lost."""
    return float(state.outcome == "loss")


def timeout(state: GameState) -> float:
    """1 if the game did not finish (max_turns or another truncation)."""
    return float(state.outcome is None)


def invalid_moves(state: GameState) -> float:
    """Number of rejected model turns."""
    return float(state.invalid_moves)


def turns(state: GameState) -> float:
    """Number of model turns, rejected ones included."""
    return float(state.turn)


def false_claims(state: GameState) -> float:
    """Number of model turns whose reasoning misstates the board (`game.claim_truth`)."""
    return float(state.false_claims)


def missed_wins(state: GameState) -> float:
    """Number of model turns that played another cell while a win was on the board."""
    return float(state.missed_wins)


def penalty_if_any(name: str, metric: RewardFn, penalty: float) -> RewardFn:
    """The reward term `name`: -`penalty` for a game whose count `metric` is above 0, else 0 (an
    env option, not in the reference rubric: `claim_penalty` on `false_claims`,
    `missed_win_penalty` on `missed_wins`). Taking a win at once is always a best move, so
    `missed_win_penalty` never steers away from the best play.

    >>> from rlvr import Task
    >>> term = penalty_if_any("missed_win_penalty", missed_wins, 0.3)
    >>> term.__name__, [term(GameState(task=Task("t"), missed_wins=n)) for n in (0, 2)]
    ('missed_win_penalty', [0.0, -0.3])
    """

    def term(state: GameState) -> float:
        return -penalty if metric(state) else 0.0

    term.__name__ = term.__qualname__ = name
    return term


def outcome_reward(loss_reward: float) -> RewardFn:
    """`win_reward` with another value for a lost or unfinished game (an env option; the
    reference rubric is `loss_reward = 0`).

    >>> from rlvr import Task
    >>> outcome_reward(-1.0)(GameState(task=Task("t"), outcome="loss"))
    -1.0
    """
    if loss_reward == 0.0:
        return win_reward

    def scored(state: GameState) -> float:
        return {"win": 1.0, "draw": 0.5}.get(state.outcome or "", loss_reward)

    scored.__name__ = scored.__qualname__ = "win_reward"  # one metric name whatever the option
    scored.__doc__ = f"1 for a win, 0.5 for a draw, {loss_reward} for a loss or an unfinished game."
    return scored


def make_rubric(loss_reward: float = 0.0, claim_penalty: float = 0.0, missed_win_penalty: float = 0.0) -> Rubric:
    metrics: list[RewardFn] = [win, draw, loss, timeout, invalid_moves, turns, false_claims, missed_wins]
    funcs: list[RewardFn] = [outcome_reward(loss_reward), format_reward, invalid_move_penalty]
    weights = list(WEIGHTS.values())
    options = (("claim_penalty", false_claims, claim_penalty), ("missed_win_penalty", missed_wins, missed_win_penalty))
    for name, metric, penalty in options:
        if penalty:  # (the reference rubric has neither term)
            funcs.append(penalty_if_any(name, metric, penalty))
            weights.append(1.0)
    return Rubric([*funcs, *metrics], weights=[*weights, *[0.0] * len(metrics)], parser=PARSER)


def summarize(rollouts: Sequence[Any]) -> dict[str, float] | None:
    """The reference results table's columns over the scored (error-free) rollouts, in %:
    win, draw, loss, timeout, format (mean format reward), invalid (games with any invalid
    move), and the mean total reward."""
    scored = [r for r in rollouts if r.error is None]
    if not scored:
        return None

    def pct(name: str) -> float:
        return 100.0 * statistics.fmean(r.rewards.get(name, 0.0) for r in scored)

    return {
        "win %": pct("win"),
        "draw %": pct("draw"),
        "loss %": pct("loss"),
        "timeout %": pct("timeout"),
        "format %": pct("format_reward"),
        "invalid %": 100.0 * statistics.fmean(r.rewards.get("invalid_moves", 0.0) > 0 for r in scored),
        "mean reward": statistics.fmean(r.reward for r in scored),
    }
