"""Reference players as `Policy` clients (`-m policy:optimal|random|teacher|teacher_centre|limit`).

Each reads the board from the last message (`parse_board`), plays X, and answers in the exact
format the rubric rewards: a short reasoning in `<think>`, then `<move>N</move>`. Their RNG
comes from the request's sampling seed, so runs are reproducible.
"""

from __future__ import annotations

import random
from collections.abc import Callable

from rlvr import Policy
from rlvr.types import Messages
from rlvr_tictactoe import tree
from rlvr_tictactoe.game import Board, best_moves, centre_else_any, legal_moves, parse_board, teacher_move

MARK = "X"


def _optimal(board: Board, rng: random.Random) -> tuple[int, str]:
    moves = best_moves(board, MARK)
    cell = rng.choice(moves)
    if len(moves) == 1:
        return cell, f"Minimax: {cell} is the only best move, so I play {cell}."
    return cell, f"Minimax: {', '.join(map(str, moves))} are equally good; I play {cell}."


def _random(board: Board, rng: random.Random) -> tuple[int, str]:
    cell = rng.choice(legal_moves(board))
    return cell, f"I pick a free cell at random: {cell}."


def _teacher(board: Board, rng: random.Random) -> tuple[int, str]:
    return teacher_move(board, MARK, rng)


def _teacher_centre(board: Board, rng: random.Random) -> tuple[int, str]:
    return teacher_move(board, MARK, rng, quiet=centre_else_any)


def _limit(board: Board, rng: random.Random) -> tuple[int, str]:
    return teacher_move(board, MARK, rng, quiet=tree.limit_moves)


POLICIES: dict[str, Callable[[Board, random.Random], tuple[int, str]]] = {
    "optimal": _optimal,
    "random": _random,
    "teacher": _teacher,
    "teacher_centre": _teacher_centre,
    "limit": _limit,
}
"""Name -> (board, rng) -> (cell, reasoning). The first one is check_env's default."""


def reply(cell: int, reason: str) -> str:
    """The reply text in the rewarded format.

    >>> reply(4, "Centre.")
    '<think>Centre.</think>\\n<move>4</move>'
    """
    return f"<think>{reason}</think>\n<move>{cell}</move>"


def policy(name: str) -> Policy:
    """The reference player `name` as a chat client."""
    choose = POLICIES[name]

    def play(messages: Messages, rng: random.Random) -> str:
        board = parse_board(str(messages[-1].get("content") or ""))
        return reply(*choose(board, rng))

    return Policy(play, name=name)
