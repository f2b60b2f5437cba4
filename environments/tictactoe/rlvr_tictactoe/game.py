"""Tic-tac-toe play: minimax, the seeded opponent and reference players, over the rules of
`rlvr_tictactoe.board` and with the teacher of `rlvr_tictactoe.teacher` (both re-exported here:
`rlvr_tictactoe.game` is the package's game API).

No dependency on rlvr's core. Values are negamax values, from the perspective of the side to
move: +1 the mover wins with perfect play by both sides, 0 draw, -1 the mover loses. The solved
game is cached per (board, side to move) on first use (~11k positions, tens of ms), after which
an opponent move is a dict lookup and an RNG draw.

Players are plain functions ``(board, mark, rng) -> cell``; ``teacher_move`` also returns a
one-sentence reasoning, for building SFT data.
"""

from __future__ import annotations

import functools
import hashlib
import random
from collections.abc import Callable, Sequence

from rlvr_tictactoe.board import (
    CENTRE,
    CORNERS,
    EMPTY,
    EMPTY_BOARD,
    LINES,
    MARKS,
    SIDES,
    Board,
    apply_move,
    as_board,
    as_mark,
    game_outcome,
    is_draw,
    legal_moves,
    missed_win,
    other,
    parse_board,
    render,
    winner,
    winning_cells,
)
from rlvr_tictactoe.teacher import (
    TEACHER_RANDOM_PROB,
    centre_else_any,
    claim_truth,
    habit_moves,
    teacher_move,
    teacher_player,
    teacher_replies,
)

__all__ = [
    "CENTRE",
    "CORNERS",
    "EMPTY",
    "EMPTY_BOARD",
    "LINES",
    "MARKS",
    "SIDES",
    "TEACHER_RANDOM_PROB",
    "Board",
    "Player",
    "apply_move",
    "best_moves",
    "centre_else_any",
    "claim_truth",
    "game_outcome",
    "game_value",
    "habit_moves",
    "is_draw",
    "legal_moves",
    "missed_win",
    "move_rng",
    "opponent_move",
    "optimal_player",
    "other",
    "parse_board",
    "play_game",
    "random_player",
    "render",
    "reply_prob",
    "teacher_move",
    "teacher_player",
    "teacher_replies",
    "trap_moves",
    "winner",
    "winning_cells",
]

Player = Callable[[Board, str, random.Random], int]


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
    score = _solve(as_board(board), as_mark(to_move))[0]
    return (score > 0) - (score < 0)


def best_moves(board: Sequence[str], mark: str) -> list[int]:
    """Every move for `mark` that keeps the best game value, in increasing order.

    Among draws all drawing moves count as equally good. Among wins only the fastest count
    and among losses only the slowest, so the opponent takes a win on the board and still
    blocks when it is lost. [] if the game is over.

    >>> best_moves("XX OO    ", "X")
    [2]
    """
    return list(_solve(as_board(board), as_mark(mark))[1])


# ---------------------------------------------------------------- opponent --------------


def move_rng(example_seed: int, board: Sequence[str]) -> random.Random:
    """A fresh RNG determined by (example seed, board) alone, stable across processes and
    Python versions (blake2b, not the salted built-in hash), so two rollouts of one example
    that reach the same board get the same opponent reply."""
    key = f"{int(example_seed)}:{''.join(as_board(board))}".encode()
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
    return list(_trap_moves(as_board(board), as_mark(mark)))


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
    b = as_board(board)
    moves = legal_moves(b)
    if not moves:
        raise ValueError(f"the game is over, no move to make on {b!r}")
    if rng.random() < random_move_prob:
        return rng.choice(moves)
    if trap_prob > 0.0 and rng.random() < trap_prob:
        return rng.choice(_trap_moves(b, as_mark(mark)))
    return rng.choice(_solve(b, as_mark(mark))[1])


def reply_prob(board: Board, p: float, random_replies: int) -> float:
    """The opponent's random-move probability on `board`: 1 (uniformly random) while it has fewer
    than `random_replies` marks on the board, then the task's p. Every line of O's replies can so
    be followed by an opponent that punishes the model's mistakes, which is what exact evaluation
    counts."""
    return 1.0 if board.count("O") < random_replies else p


# ---------------------------------------------------------------- players ---------------


def random_player(board: Board, mark: str, rng: random.Random) -> int:
    """A uniformly random free cell."""
    return rng.choice(legal_moves(board))


def optimal_player(board: Board, mark: str, rng: random.Random) -> int:
    """A uniformly random choice among `best_moves`: never loses."""
    return rng.choice(best_moves(board, mark))


def play_game(x_player: Player, o_player: Player, first: str, rng: random.Random) -> str | None:
    """Play one game from the empty board; the winner's mark, or None for a draw."""
    board, mark = EMPTY_BOARD, as_mark(first)
    while True:
        player = x_player if mark == "X" else o_player
        board = apply_move(board, player(board, mark, rng), mark)
        if (w := winner(board)) is not None:
            return w
        if EMPTY not in board:
            return None
        mark = other(mark)
