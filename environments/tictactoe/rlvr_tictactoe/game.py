"""Pure tic-tac-toe logic: board, minimax, the seeded opponent and reference players.

No dependency on rlvr's core. A board is a tuple of 9 cells numbered 0-8 row by row, each
"X", "O" or " " (empty). Every function accepts any sequence of 9 such strings (a list kept
in a game state is fine) and returns tuples.

Values are negamax values, from the perspective of the side to move: +1 the mover wins with
perfect play by both sides, 0 draw, -1 the mover loses. The solved game is cached per
(board, side to move) on first use (~11k positions, tens of ms), after which an opponent
move is a dict lookup and an RNG draw.

Players are plain functions ``(board, mark, rng) -> cell``; ``teacher_move`` also returns a
one-sentence reasoning, for building SFT data.
"""

from __future__ import annotations

import functools
import hashlib
import random
import re
from collections.abc import Callable, Sequence

Board = tuple[str, ...]
Player = Callable[[Board, str, random.Random], int]

EMPTY = " "
EMPTY_BOARD: Board = (EMPTY,) * 9
MARKS = ("X", "O")
LINES = ((0, 1, 2), (3, 4, 5), (6, 7, 8), (0, 3, 6), (1, 4, 7), (2, 5, 8), (0, 4, 8), (2, 4, 6))
CENTRE = 4
CORNERS = (0, 2, 6, 8)
SIDES = (1, 3, 5, 7)
TEACHER_RANDOM_PROB = 0.1
"""Chance that the teacher, with no win or block on the board, plays any free cell."""

_CELLS = frozenset({"X", "O", EMPTY})


# ---------------------------------------------------------------- board basics ----------


def other(mark: str) -> str:
    """The opponent's mark.

    >>> other("X")
    'O'
    """
    return "O" if mark == "X" else "X"


def _board(board: Sequence[str]) -> Board:
    b = tuple(board)
    if len(b) != 9 or not _CELLS.issuperset(b):
        raise ValueError(f"expected 9 cells of 'X', 'O' or ' ', got {board!r}")
    return b


def _mark(mark: str) -> str:
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
    b = _board(board)
    if not (isinstance(cell, int) and 0 <= cell <= 8):
        raise ValueError(f"expected a cell number 0-8, got {cell!r}")
    if b[cell] != EMPTY:
        raise ValueError(f"cell {cell} is already taken by {b[cell]}; free cells: {legal_moves(b)}")
    return b[:cell] + (_mark(mark),) + b[cell + 1 :]


def render(board: Sequence[str]) -> str:
    """The board as the model sees it: empty cells show their number.

    >>> print(render("X   O    "))
    X | 1 | 2
    ---------
    3 | O | 5
    ---------
    6 | 7 | 8
    """
    cells = [c if c != EMPTY else str(i) for i, c in enumerate(_board(board))]
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


# ---------------------------------------------------------------- minimax ---------------


@functools.cache
def _solve(board: Board, to_move: str) -> tuple[int, tuple[int, ...]]:
    """(score, best moves) for the mover. |score| = 1 + empty cells left when the game ends,
    so a sooner win / later loss scores higher; 0 is a draw."""
    w = winner(board)
    if w is not None:
        return (1 if w == to_move else -1) * (1 + board.count(EMPTY)), ()
    moves = [i for i, c in enumerate(board) if c == EMPTY]
    if not moves:
        return 0, ()
    opp = other(to_move)
    scores = [-_solve(board[:i] + (to_move,) + board[i + 1 :], opp)[0] for i in moves]
    best = max(scores)
    return best, tuple(m for m, s in zip(moves, scores) if s == best)


def game_value(board: Sequence[str], to_move: str) -> int:
    """+1 / 0 / -1: the result for `to_move` (the side about to play) under perfect play.

    >>> game_value(EMPTY_BOARD, "X")
    0
    >>> game_value("XX OO    ", "O")
    1
    """
    score = _solve(_board(board), _mark(to_move))[0]
    return (score > 0) - (score < 0)


def best_moves(board: Sequence[str], mark: str) -> list[int]:
    """Every move for `mark` that keeps the best game value, in increasing order.

    Among draws all drawing moves count as equally good. Among wins only the fastest count
    and among losses only the slowest, so the opponent takes a win on the board and still
    blocks when it is lost. [] if the game is over.

    >>> best_moves("XX OO    ", "X")
    [2]
    """
    return list(_solve(_board(board), _mark(mark))[1])


# ---------------------------------------------------------------- opponent --------------


def move_rng(example_seed: int, board: Sequence[str]) -> random.Random:
    """A fresh RNG determined by (example seed, board) alone, stable across processes and
    Python versions (blake2b, not the salted built-in hash), so two rollouts of one example
    that reach the same board get the same opponent reply."""
    key = f"{int(example_seed)}:{''.join(_board(board))}".encode()
    return random.Random(int.from_bytes(hashlib.blake2b(key, digest_size=8).digest(), "big"))


def _deep_losses(board: Board, replier: str) -> int:
    """How many of `replier`'s moves lose against perfect play without losing at once (a fork
    two moves on, not a missed block: blocks are what every player learns first)."""
    mover, count = other(replier), 0
    for r, c in enumerate(board):
        if c == EMPTY:
            after = board[:r] + (replier,) + board[r + 1 :]
            count += winner(after) is None and _solve(after, mover)[0] > 0 and not winning_cells(after, mover)
    return count


@functools.cache
def _trap_moves(board: Board, mark: str) -> tuple[int, ...]:
    best = _solve(board, mark)[1]
    counts = [_deep_losses(board[:m] + (mark,) + board[m + 1 :], other(mark)) for m in best]
    top = max(counts, default=0)
    return tuple(m for m, n in zip(best, counts) if n == top)


def trap_moves(board: Sequence[str], mark: str) -> list[int]:
    """The `best_moves` that leave the other side the most replies that lose against perfect
    play but not at once: a perfect player that sets traps. After O takes a corner and X the
    centre, the opposite corner (8) and the two far edges (5, 7) each leave X two replies that
    lose to a fork; the near edges and corners leave none:

    >>> trap_moves("O   X    ", "O")
    [5, 7, 8]
    """
    return list(_trap_moves(_board(board), _mark(mark)))


def opponent_move(
    board: Sequence[str], mark: str, random_move_prob: float, rng: random.Random, trap_prob: float = 0.0
) -> int:
    """With probability `random_move_prob` a uniformly random free cell, otherwise a best move:
    with probability `trap_prob` a uniformly random one of `trap_moves`, else of `best_moves`.
    Always draws one `rng.random()` first, and a second one for a best move when trap_prob > 0
    (so trap_prob = 0 replays the same games as before it existed)."""
    for name, value in (("random_move_prob", random_move_prob), ("trap_prob", trap_prob)):
        if not 0.0 <= value <= 1.0:
            raise ValueError(f"expected {name} in [0, 1], got {value!r}")
    b = _board(board)
    moves = legal_moves(b)
    if not moves:
        raise ValueError(f"the game is over, no move to make on {b!r}")
    if rng.random() < random_move_prob:
        return rng.choice(moves)
    if trap_prob > 0.0 and rng.random() < trap_prob:
        return rng.choice(_trap_moves(b, _mark(mark)))
    return rng.choice(_solve(b, _mark(mark))[1])


# ---------------------------------------------------------------- players ---------------


def random_player(board: Board, mark: str, rng: random.Random) -> int:
    """A uniformly random free cell."""
    return rng.choice(legal_moves(board))


def optimal_player(board: Board, mark: str, rng: random.Random) -> int:
    """A uniformly random choice among `best_moves`: never loses."""
    return rng.choice(best_moves(board, mark))


def _completing_cells(board: Sequence[str], mark: str) -> list[tuple[int, tuple[int, ...]]]:
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
    return {cell for cell, _ in _completing_cells(board, mark)}


def missed_win(board: Sequence[str], cell: int, mark: str = "X") -> bool:
    """Whether `mark` taking `cell` on `board` leaves a win on the board untaken (a cell of
    `winning_cells`, not this one).

    >>> missed_win("XX OO    ", 5), missed_win("XX OO    ", 2), missed_win("         ", 4)
    (True, False, False)
    """
    wins = winning_cells(board, mark)
    return bool(wins) and cell not in wins


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
    b = _board(board)
    moves = legal_moves(b)
    if not moves:
        raise ValueError(f"the game is over, no move to make on {b!r}")
    if wins := _completing_cells(b, _mark(mark)):
        cell, line = rng.choice(wins)
        return cell, _WINS.format(line=_line(line), cell=cell)
    if threats := _completing_cells(b, other(mark)):
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
    b = _board(board)
    return [CENTRE] if b[CENTRE] == EMPTY else legal_moves(b)


def habit_moves(board: Sequence[str]) -> list[int]:
    """The teacher's habit on a quiet board (no win, no threat), bar its random moves: the
    centre if free, else the free corners, else every free cell.

    >>> habit_moves("   OX   O"), habit_moves("O        ")
    ([0, 2, 6], [4])
    """
    b = _board(board)
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
    b = _board(board)
    moves = legal_moves(b)
    if not moves:
        raise ValueError(f"the game is over, no move to make on {b!r}")
    for found, says in ((_completing_cells(b, _mark(mark)), _WINS), (_completing_cells(b, other(mark)), _BLOCKS)):
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
    b = _board(board)
    if found := _WIN_CLAIM.search(text):
        *line, cell = map(int, found.groups())
        return (cell, tuple(sorted(line))) in _completing_cells(b, _mark(mark))  # (LINES are ascending)
    if found := _BLOCK_CLAIM.search(text):
        who, *rest = found.groups()
        *line, cell = map(int, rest)
        return who == other(mark) and (cell, tuple(sorted(line))) in _completing_cells(b, who)
    if "no immediate threat" in text:
        return not _completing_cells(b, other(mark))
    return None


def play_game(x_player: Player, o_player: Player, first: str, rng: random.Random) -> str | None:
    """Play one game from the empty board; the winner's mark, or None for a draw."""
    board, mark = EMPTY_BOARD, _mark(first)
    while True:
        player = x_player if mark == "X" else o_player
        board = apply_move(board, player(board, mark, rng), mark)
        if (w := winner(board)) is not None:
            return w
        if EMPTY not in board:
            return None
        mark = other(mark)
