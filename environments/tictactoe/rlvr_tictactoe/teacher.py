"""The teacher: a good but imperfect player that gives a one-sentence reason for each move
(SFT data, the trainer's given replies), and a check of such reasons against the board.

It wins if it can, else blocks, else plays its habit (centre, corner, side), with some random
moves; it sees no forks. `rlvr_tictactoe.game` re-exports all of it.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable, Sequence

from rlvr_tictactoe.board import CENTRE, CORNERS, EMPTY, Board, as_board, as_mark, completing_cells, legal_moves, other

TEACHER_RANDOM_PROB = 0.1
"""Chance that the teacher, with no win or block on the board, plays any free cell."""


def _line(line: tuple[int, ...]) -> str:
    return "-".join(map(str, line))


_WINS = "I can complete the line {line} and win, so I play {cell}."
_BLOCKS = "{mark} threatens to complete {line}, so I block at {cell}."
_OPEN = "There is no immediate threat, so I play {cell} to keep my options open."


def _quiet_reason(b: Board, cell: int) -> str:
    """The teacher's reason for `cell` on a board with no win or threat: the centre, a corner,
    a side once only sides are left, else (its random move) keeping options open."""
    if cell == CENTRE:
        return "There is no immediate threat and the centre is free, so I take 4."
    if cell in CORNERS:
        return f"There is no immediate threat, so I take the corner {cell}."
    if b[CENTRE] != EMPTY and all(b[c] != EMPTY for c in CORNERS):
        return f"There is no immediate threat and only sides are left, so I take {cell}."
    return _OPEN.format(cell=cell)


def teacher_move(
    board: Sequence[str], mark: str, rng: random.Random, quiet: Callable[[Board], list[int]] | None = None
) -> tuple[int, str]:
    """A good but imperfect player, with a one-sentence reason: win if possible, else block,
    else (with probability TEACHER_RANDOM_PROB) any free cell, else centre, a random corner,
    a random side (`habit_moves`). It sees no forks, so it falls for fork traps. With `quiet`,
    a board with no win and no threat gets a uniform choice among `quiet(board)` instead, and
    no random moves: `centre_else_any` is the teacher less its corner habit (`policy:
    teacher_centre`), `tree.limit_moves` the limit player (`policy:limit`).

    >>> teacher_move("XX OO    ", "O", random.Random(0))
    (5, 'I can complete the line 3-4-5 and win, so I play 5.')
    """
    b = as_board(board)
    moves = legal_moves(b)
    if not moves:
        raise ValueError(f"the game is over, no move to make on {b!r}")
    if wins := completing_cells(b, as_mark(mark)):
        cell, line = rng.choice(wins)
        return cell, _WINS.format(line=_line(line), cell=cell)
    if threats := completing_cells(b, other(mark)):
        cell, line = rng.choice(threats)
        return cell, _BLOCKS.format(mark=other(mark), line=_line(line), cell=cell)
    if quiet is None:
        if rng.random() < TEACHER_RANDOM_PROB:
            cell = rng.choice(moves)
            return cell, _OPEN.format(cell=cell)
        quiet = habit_moves
    cells = quiet(b)
    cell = CENTRE if cells == [CENTRE] else rng.choice(cells)  # (the centre alone draws nothing from rng)
    return cell, _quiet_reason(b, cell)


def centre_else_any(board: Sequence[str]) -> list[int]:
    """The quiet moves of the teacher less its corner habit: the centre if free, else every free
    cell (an edge as often as a corner, where the habit plays an edge only in its random moves).

    >>> centre_else_any("O        "), centre_else_any("   OX   O")
    ([4], [0, 1, 2, 5, 6, 7])
    """
    b = as_board(board)
    return [CENTRE] if b[CENTRE] == EMPTY else legal_moves(b)


def habit_moves(board: Sequence[str]) -> list[int]:
    """The teacher's habit on a quiet board (no win, no threat), bar its random moves: the
    centre if free, else the free corners, else every free cell.

    >>> habit_moves("   OX   O"), habit_moves("O        ")
    ([0, 2, 6], [4])
    """
    b = as_board(board)
    if b[CENTRE] == EMPTY:
        return [CENTRE]
    return [c for c in CORNERS if b[c] == EMPTY] or legal_moves(b)


def teacher_replies(board: Sequence[str], mark: str) -> list[tuple[int, str]]:
    """Every move `teacher_move` can make on `board`, each with the reason it would give (one
    reason a move: the first winning or threatened line in `LINES` order where there are two;
    a free cell's reason for its own kind, `_quiet_reason`, where its random move has another).
    Where there is no threat, any free cell: the teacher's random move reaches them all.

    >>> teacher_replies("XX OO    ", "O")
    [(5, 'I can complete the line 3-4-5 and win, so I play 5.')]
    >>> [cell for cell, _ in teacher_replies("    X    ", "O")]
    [0, 1, 2, 3, 5, 6, 7, 8]
    """
    b = as_board(board)
    moves = legal_moves(b)
    if not moves:
        raise ValueError(f"the game is over, no move to make on {b!r}")
    for found, says in ((completing_cells(b, as_mark(mark)), _WINS), (completing_cells(b, other(mark)), _BLOCKS)):
        if found:
            first = {cell: line for cell, line in reversed(found)}
            return [(c, says.format(mark=other(mark), line=_line(first[c]), cell=c)) for c in sorted(first)]
    return [(cell, _quiet_reason(b, cell)) for cell in moves]


def teacher_player(board: Board, mark: str, rng: random.Random) -> int:
    """`teacher_move` without the reasoning, as a `Player`."""
    return teacher_move(board, mark, rng)[0]


_WIN_CLAIM = re.compile(r"I can complete the line ([0-8])-([0-8])-([0-8]) and win, so I play ([0-8])")
_BLOCK_CLAIM = re.compile(r"([XO]) threatens to complete ([0-8])-([0-8])-([0-8]), so I block at ([0-8])")


def claim_truth(text: str, board: Sequence[str], mark: str = "X") -> bool | None:
    """Whether the reasoning of a reply by `mark` on `board` states the board truly, for the
    three claims `teacher_move` makes: a line it completes to win, a line the opponent
    threatens to complete (and the cell that blocks it), or no immediate threat (the opponent
    can complete no line). None: the reply makes none of these claims.

    >>> claim_truth("O threatens to complete 0-1-2, so I block at 0.", ".O..X...O".replace(".", " "))
    False
    >>> claim_truth("O threatens to complete 2-5-8, so I block at 5.", "..O.X...O".replace(".", " "))
    True
    >>> claim_truth("There is no immediate threat, so I take the corner 0.", ".O..X...O".replace(".", " "))
    True
    >>> claim_truth("I like 3.", " " * 9) is None
    True
    """
    b = as_board(board)
    if found := _WIN_CLAIM.search(text):
        *line, cell = map(int, found.groups())
        return (cell, tuple(sorted(line))) in completing_cells(b, as_mark(mark))  # (LINES are ascending)
    if found := _BLOCK_CLAIM.search(text):
        who, *rest = found.groups()
        *line, cell = map(int, rest)
        return who == other(mark) and (cell, tuple(sorted(line))) in completing_cells(b, who)
    if "no immediate threat" in text:
        return not completing_cells(b, other(mark))
    return None
