"""The board and the rules of tic-tac-toe: cells, marks, lines, moves, the drawn board, outcomes.

No dependency on rlvr's core. A board is a tuple of 9 cells numbered 0-8 row by row, each
"X", "O" or " " (empty). Every function accepts any sequence of 9 such strings (a list kept
in a game state is fine) and returns tuples. `rlvr_tictactoe.game` re-exports all of it.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

Board = tuple[str, ...]

EMPTY = " "
EMPTY_BOARD: Board = (EMPTY,) * 9
MARKS = ("X", "O")
LINES = ((0, 1, 2), (3, 4, 5), (6, 7, 8), (0, 3, 6), (1, 4, 7), (2, 5, 8), (0, 4, 8), (2, 4, 6))
CENTRE = 4
CORNERS = (0, 2, 6, 8)
SIDES = (1, 3, 5, 7)

_CELLS = frozenset({"X", "O", EMPTY})


# ---------------------------------------------------------------- board basics ----------


def other(mark: str) -> str:
    """The opponent's mark.

    >>> other("X")
    'O'
    """
    return "O" if mark == "X" else "X"


def as_board(board: Sequence[str]) -> Board:
    """`board` as a tuple of 9 cells; ValueError for anything else."""
    b = tuple(board)
    if len(b) != 9 or not _CELLS.issuperset(b):
        raise ValueError(f"expected 9 cells of 'X', 'O' or ' ', got {board!r}")
    return b


def as_mark(mark: str) -> str:
    """`mark` itself when it is "X" or "O"; ValueError otherwise."""
    if mark not in MARKS:
        raise ValueError(f"expected mark 'X' or 'O', got {mark!r}")
    return mark


def winner(board: Sequence[str]) -> str | None:
    """'X' or 'O' if that side has three in a line, else None.

    >>> winner("XO XO X  ")
    'X'
    """
    for i, j, k in LINES:
        m = board[i]
        if m != EMPTY and m == board[j] == board[k]:
            return m
    return None


def legal_moves(board: Sequence[str]) -> list[int]:
    """Free cells in increasing order; [] once the game is over (won or full).

    >>> legal_moves("XO XO    ")
    [2, 5, 6, 7, 8]
    """
    if winner(board) is not None:
        return []
    return [i for i, c in enumerate(board) if c == EMPTY]


def is_draw(board: Sequence[str]) -> bool:
    """True when the board is full and nobody has won."""
    return EMPTY not in board and winner(board) is None


def apply_move(board: Sequence[str], cell: int, mark: str) -> Board:
    """The board after `mark` takes `cell`; ValueError if the cell is off-board or taken.

    >>> apply_move(EMPTY_BOARD, 4, "X")
    (' ', ' ', ' ', ' ', 'X', ' ', ' ', ' ', ' ')
    """
    b = as_board(board)
    if not (isinstance(cell, int) and 0 <= cell <= 8):
        raise ValueError(f"expected a cell number 0-8, got {cell!r}")
    if b[cell] != EMPTY:
        raise ValueError(f"cell {cell} is already taken by {b[cell]}; free cells: {legal_moves(b)}")
    return b[:cell] + (as_mark(mark),) + b[cell + 1 :]


def render(board: Sequence[str]) -> str:
    """The board as the model sees it: empty cells show their number.

    >>> print(render("X   O    "))
    X | 1 | 2
    ---------
    3 | O | 5
    ---------
    6 | 7 | 8
    """
    cells = [c if c != EMPTY else str(i) for i, c in enumerate(as_board(board))]
    return "\n---------\n".join(" | ".join(cells[r : r + 3]) for r in (0, 3, 6))


_ROW = r"[ \t]*([XO0-8]) \| ([XO0-8]) \| ([XO0-8])[ \t]*"
_SEP = r"\r?\n[ \t]*-{9}[ \t]*\r?\n"
_BOARD_RE = re.compile(_ROW + _SEP + _ROW + _SEP + _ROW)


def parse_board(text: str) -> Board:
    """Read back the last board drawn by `render` in `text` (which may hold other lines).

    >>> parse_board("Your turn.\\n" + render("X   O    ") + "\\nAvailable: 1, 2")[:5]
    ('X', ' ', ' ', ' ', 'O')
    """
    matches = list(_BOARD_RE.finditer(text))
    if not matches:
        raise ValueError(f"no board like '0 | 1 | 2' / '---------' / ... found in {text!r}")
    cells = matches[-1].groups()
    for i, c in enumerate(cells):
        if c not in MARKS and c != str(i):
            raise ValueError(f"cell {i} of the board shows {c!r}; expected X, O or {i}")
    return tuple(c if c in MARKS else EMPTY for c in cells)


def game_outcome(board: Board) -> str | None:
    """ "win" or "loss" (for X), "draw" on a full board, None while the game runs."""
    w = winner(board)
    if w is not None:
        return "win" if w == "X" else "loss"
    return "draw" if EMPTY not in board else None


# ---------------------------------------------------------------- wins on the board -----


def completing_cells(board: Sequence[str], mark: str) -> list[tuple[int, tuple[int, ...]]]:
    """(free cell, line) pairs where `mark` playing the cell completes the line."""
    found: list[tuple[int, tuple[int, ...]]] = []
    for line in LINES:
        cells = [board[i] for i in line]
        if cells.count(mark) == 2 and cells.count(EMPTY) == 1:
            found.append((line[cells.index(EMPTY)], line))
    return found


def winning_cells(board: Sequence[str], mark: str) -> set[int]:
    """The free cells where `mark` completes a line at once (a win on the board).

    >>> sorted(winning_cells("XX OO    ", "X")), sorted(winning_cells("XX OO    ", "O"))
    ([2], [5])
    """
    return {cell for cell, _ in completing_cells(board, mark)}


def missed_win(board: Sequence[str], cell: int, mark: str = "X") -> bool:
    """Whether `mark` taking `cell` on `board` leaves a win on the board untaken (a cell of
    `winning_cells`, not this one).

    >>> missed_win("XX OO    ", 5), missed_win("XX OO    ", 2), missed_win("         ", 4)
    (True, False, False)
    """
    wins = winning_cells(board, mark)
    return bool(wins) and cell not in wins
