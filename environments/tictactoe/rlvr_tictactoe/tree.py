"""The game tree of tic-tac-toe for exact evaluation (see `rlvr.exact`), and its limits.

A *line* is a task whose opponent plays a fixed list of replies (`info["line"]`) after the
prompt's opening; when the list runs out at O's turn the episode ends (`line_ended`) and the
tree grows one child per legal reply. Roots: the model moves first, or O opens on any of the
9 cells.

Each line carries its probability under the two reference opponents (`info["line_weights"]`):
the env's coin for who starts (1/2 each), then each O move's probability. An opponent with
random-move probability p plays cell c on board b with probability
``p / |free cells| + (1 - p) * [c is a best move] / |best moves|``: `random` is p = 1, `optimal`
p = 0 (a uniform choice among the minimax-best moves, as the env's opponent plays).

The limits, computed on the bare game tree (no model), with those same weights:

>>> round(100 * never_losing_max_win_rate(), 2)
95.56
>>> [round(100 * x, 2) for x in minimax_rates_vs_random()]
[87.26, 12.74, 0.0]
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

from rlvr import Task
from rlvr_tictactoe.game import (
    EMPTY_BOARD,
    Board,
    apply_move,
    best_moves,
    game_outcome,
    game_value,
    legal_moves,
    parse_board,
    reply_prob,
    trap_moves,
    winner,
)
from rlvr_tictactoe.moves import read_move

OPPONENT_P = {"random": 1.0, "optimal": 0.0}
"""The opponents exact evaluation weighs every game for: name -> random-move probability."""
FAILURES = ("loss", "timeout")
"""Outcomes that mean the model was beaten (a game it did not finish counts as one)."""


def reply_probability(board: Sequence[str], cell: int, p: float, trap_prob: float = 0.0) -> float:
    """Probability that an opponent with random-move probability `p` plays `cell` as O, its
    best moves being one of `trap_moves` with probability `trap_prob` (`game.opponent_move`).

    >>> reply_probability(EMPTY_BOARD, 4, 1.0) == 1 / 9
    True
    >>> reply_probability(("X", "X", " ", "O", " ", " ", " ", " ", " "), 2, 0.0)
    1.0
    >>> reply_probability(("O", " ", " ", " ", "X", " ", " ", " ", " "), 8, 0.0, trap_prob=1.0) == 1 / 3
    True
    """
    moves = legal_moves(board)
    best = best_moves(board, "O")
    chosen = (cell in best) / len(best)
    if trap_prob > 0.0:
        traps = trap_moves(board, "O")
        chosen = trap_prob * (cell in traps) / len(traps) + (1.0 - trap_prob) * chosen
    return p / len(moves) + (1.0 - p) * chosen


def line_chance(line: Sequence[tuple[str, int]], k: int, p: float, trap_prob: float = 0.0) -> float:
    """The chance that one game against a training opponent plays `line` (("X" or "O", cell) in
    order; X's moves are given): O moves first in half the games, its replies are uniformly
    random while it has fewer than k marks (`tasks.reply_prob`), then `reply_probability`'s.

    >>> line_chance([("O", 4), ("X", 0), ("O", 8)], 2, 0.0) == 0.5 / 9 / 7  # both replies random
    True
    """
    chance, board = 0.5, EMPTY_BOARD  # who starts: a fair coin
    for mark, cell in line:
        if mark == "O":
            chance *= reply_probability(board, cell, reply_prob(board, p, k), trap_prob)
        board = apply_move(board, cell, mark)
    return chance


NO_MOVES = "X-first"
"""The id of the line where X moves first and no move has been played: the record of a game whose
first reply was never accepted."""


def line_id(opening: int | None, moves: Sequence[int]) -> str:
    """A readable id for a line: who moved where, in order.

    >>> line_id(None, [4, 0]), line_id(3, [4])
    ('X4.O0', 'O3.X4')
    """
    marks = ("O", "X") if opening is not None else ("X", "O")
    cells = ([opening] if opening is not None else []) + list(moves)
    return ".".join(f"{marks[i % 2]}{c}" for i, c in enumerate(cells)) or NO_MOVES


def line_task(base: Task, *, opening: int | None, moves: Sequence[int], line: Sequence[int], weights: dict) -> Task:
    """`base` (an opening task of the env) as the line `line` with the given weights."""
    info = {**base.info, "line": list(line), "line_weights": dict(weights)}
    return Task(id=line_id(opening, moves), prompt=base.prompt, info=info, seed=base.seed)


def root_weights(opening: int | None) -> dict[str, float]:
    """Probability of an opening under each opponent: the start coin, then O's first move."""
    if opening is None:
        return {name: 0.5 for name in OPPONENT_P}
    return {name: 0.5 * reply_probability(EMPTY_BOARD, opening, p) for name, p in OPPONENT_P.items()}


def children(task: Task, board: Board, moves: Sequence[int]) -> list[Task]:
    """The lines one O reply longer than `task`'s, on `board` (O to move) after `moves`."""
    opening = None if task.info["model_starts"] else _opening(task)
    weights = task.info["line_weights"]
    out = []
    for cell in legal_moves(board):
        w = {name: weights[name] * reply_probability(board, cell, p) for name, p in OPPONENT_P.items()}
        out.append(line_task(task, opening=opening, moves=[*moves, cell], line=[*task.info["line"], cell], weights=w))
    return out


def _opening(task: Task) -> int:
    return next(i for i, c in enumerate(task.info["board"]) if c == "O")


def leaf(state: Any) -> dict[str, Any]:
    """A finished game's record: outcome, the whole move sequence, the final board, and for a
    game the model did not hold, its losing decision (`mistake`)."""
    opening = None if state.task.info["model_starts"] else _opening(state.task)
    record = {
        "outcome": state.outcome or "timeout",
        "moves": line_id(opening, state.moves),
        "board": "".join(c if c != " " else "." for c in state.board),
        "rejected_moves": state.invalid_moves,
    }
    if record["outcome"] in FAILURES:
        found = mistake(record["moves"])
        if found is not None:
            record["mistake"] = found
    return record


def judge(messages: Sequence[Any], reply: str) -> str | None:
    """A reply of the model's to the conversation `messages` (whose last message shows the
    board), for the risky list of a sampled exact evaluation: `rejected` (the env would not
    play it), `losing` (a move after which O can force a win, on a board X could still hold),
    or None.

    >>> from rlvr_tictactoe.game import render
    >>> b = [{"role": "user", "content": render(("O", "O", " ", " ", "X", " ", " ", " ", " "))}]
    >>> judge(b, "<move>2</move>"), judge(b, "<move>3</move>"), judge(b, "<move>0</move>")
    (None, 'losing', 'rejected')
    """

    board = parse_board(str(messages[-1].get("content") or "")) if messages else EMPTY_BOARD
    cell, _ = read_move(reply, board)
    if cell is None:
        return "rejected"
    after = apply_move(board, cell, "X")
    if game_outcome(after) is None and game_value(board, "X") >= 0 and game_value(after, "O") > 0:
        return "losing"
    return None


def mistake(moves: str) -> str | None:
    """The model's (X's) first move in the line `moves` that turns a position it could still
    draw or win against perfect play into a lost one, with the moves that would have held:
    every lost game through one wrong decision gets the same label. None when no move of X's
    did (e.g. a timeout in a drawn position).

    >>> mistake("O0.X1.O4.X8.O6.X3.O2")
    'O0: X1 (holds: 4)'
    >>> mistake("X4.O0.X8.O2.X1.O7.X6.O3.X5") is None, mistake("X-first") is None
    (True, True)
    """
    if not re.fullmatch(r"[XO][0-8](\.[XO][0-8])*", moves):
        return None  # no move at all ("X-first": the model timed out before its first)
    board: Board = EMPTY_BOARD
    played = moves.split(".")
    for i, move in enumerate(played):
        mark, cell = move[0], int(move[1:])
        if mark == "X":
            after = apply_move(board, cell, "X")
            if game_value(board, "X") >= 0 and winner(after) is None and game_value(after, "O") > 0:
                holds = [m for m in legal_moves(board) if game_value(apply_move(board, m, "X"), "O") <= 0]
                before = ".".join(played[:i]) or "start"
                return f"{before}: X{cell} (holds: {', '.join(map(str, holds))})"
            board = after
        else:
            board = apply_move(board, cell, "O")
    return None


# ---- limits on the bare game tree -----------------------------------------------------------


def _average(boards: list[Board], value: Any) -> Any:
    return sum(value(b) for b in boards) / len(boards)


@functools.cache
def _safe_win(board: Board, x_to_move: bool) -> float:
    """Highest win probability vs the random O among X policies that never lose."""
    if (o := game_outcome(board)) is not None:
        return float(o == "win")
    if x_to_move:
        return max(_safe_win(apply_move(board, m, "X"), False) for m in _never_losing(board))
    return _average([apply_move(board, m, "O") for m in legal_moves(board)], lambda b: _safe_win(b, True))


def _never_losing(board: Board) -> list[int]:
    """X's moves that keep at least a draw against perfect play; every move where none does (a
    position a beatable player can reach: there the best move is the best against random)."""
    moves = legal_moves(board)
    return [m for m in moves if game_value(apply_move(board, m, "X"), "O") <= 0] or moves


def limit_moves(board: Board) -> list[int]:
    """X's best moves on `board` (X to move) for the limit: the never-losing moves whose best
    never-losing play after them wins most often against the random opponent. Playing one of
    them everywhere is the unbeatable player that wins `never_losing_max_win_rate()`.

    >>> limit_moves(EMPTY_BOARD), limit_moves(apply_move(EMPTY_BOARD, 4, "O"))
    ([0, 2, 6, 8], [0, 2, 6, 8])
    """
    top = _safe_win(board, True)
    return [m for m in _never_losing(board) if _safe_win(apply_move(board, m, "X"), False) >= top - 1e-9]


def _roots() -> list[tuple[float, Board]]:
    """The boards X first moves on, with their chance: the start coin, then O's uniform opening."""
    return [(0.5, EMPTY_BOARD)] + [(0.5 / 9, apply_move(EMPTY_BOARD, c, "O")) for c in range(9)]


def never_losing_max_win_rate() -> float:
    """The best exact win rate vs the random opponent of any player that never loses (the
    env's 50/50 starts, O's opening uniform): the ceiling for an unbeatable model."""
    return sum(w * _safe_win(b, True) for w, b in _roots())


@functools.cache
def _minimax_vs_random(board: Board, x_to_move: bool) -> tuple[float, float, float]:
    if (o := game_outcome(board)) is not None:
        return (float(o == "win"), float(o == "draw"), float(o == "loss"))
    mark, moves = ("X", best_moves(board, "X")) if x_to_move else ("O", legal_moves(board))
    rows = [_minimax_vs_random(apply_move(board, m, mark), not x_to_move) for m in moves]
    win, draw, loss = (sum(col) / len(rows) for col in zip(*rows))
    return win, draw, loss


def minimax_rates_vs_random() -> tuple[float, float, float]:
    """(win, draw, loss) of the minimax player with a uniform tie-break (`policy:optimal`,
    averaged over its own tie-breaks) against the random opponent."""
    rows = [(w, _minimax_vs_random(b, True)) for w, b in _roots()]
    win, draw, loss = (sum(w * r[i] for w, r in rows) for i in range(3))
    return win, draw, loss


class Gap(NamedTuple):
    """One decision of a player where it gives up wins against the random opponent."""

    weighted: float
    """`gap` times the chance that the random opponent (and the env's starts) lead there."""
    gap: float
    """Win probability given up there: the best never-losing move's, less the player's move's
    (both followed by the best never-losing play)."""
    line: tuple[tuple[str, int], ...]
    """The moves before it, ("X" or "O", cell) in order."""
    move: int | None
    """The player's move (None: none was accepted, the game ended there unwon)."""
    best: list[int]
    """The best never-losing moves there."""


def win_rate_gaps(choose: Callable[[tuple[tuple[str, int], ...], Board], int | None]) -> tuple[float, list[Gap]]:
    """(the player's exact win rate vs the random opponent, its `Gap`s largest first) for a
    deterministic X player `choose(line, board) -> cell` (a model's reply can depend on the
    conversation, so it gets the line, not only the board); None for no move, a game that ends
    there unwon (a model whose replies were all rejected: a timeout), whose gap is all the win
    rate the position held. The weighted gaps sum to `never_losing_max_win_rate()` less the
    player's win rate, when the player never loses nor times out: the list says where an
    unbeatable player's shortfall from the limit lies."""
    gaps: list[Gap] = []
    wins = 0.0

    def walk(board: Board, line: tuple[tuple[str, int], ...], chance: float) -> None:
        nonlocal wins
        move = choose(line, board)
        if move is None:  # the game ends here, not won
            if (gap := _safe_win(board, True)) > 1e-9:
                gaps.append(Gap(chance * gap, gap, line, None, limit_moves(board)))
            return
        after = apply_move(board, move, "X")
        if (gap := _safe_win(board, True) - _safe_win(after, False)) > 1e-9:
            gaps.append(Gap(chance * gap, gap, line, move, limit_moves(board)))
        if (o := game_outcome(after)) is not None:
            wins += chance * (o == "win")
            return
        replies = legal_moves(after)
        for cell in replies:
            board2, p = apply_move(after, cell, "O"), chance / len(replies)
            if (o := game_outcome(board2)) is not None:
                wins += p * (o == "win")
            else:
                walk(board2, (*line, ("X", move), ("O", cell)), p)

    for chance, root in _roots():
        walk(root, () if root == EMPTY_BOARD else (("O", root.index("O")),), chance)
    return wins, sorted(gaps, reverse=True)
