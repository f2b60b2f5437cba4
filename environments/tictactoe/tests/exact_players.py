"""Deterministic scripted players for the tic-tac-toe tests, `exact` (one played over the whole
game tree through the real env, messages and engine), and `win_cells`, the tests' own count of the
cells that win at once."""

from __future__ import annotations

import asyncio

from rlvr_tictactoe import load_environment
from rlvr_tictactoe.game import EMPTY_BOARD, LINES, apply_move, best_moves, legal_moves, parse_board

from rlvr import Policy
from rlvr.exact import ExactResult, enumerate_games
from rlvr.types import SamplingArgs

GREEDY = SamplingArgs(temperature=0.0)


def as_policy(choose) -> Policy:
    """A deterministic player `choose(board) -> cell` as a chat client in the rewarded format."""

    def play(messages, rng):
        cell = choose(parse_board(messages[-1]["content"]))
        return f"<think>scripted</think>\n<move>{cell}</move>"

    return Policy(play, name="scripted")


def win_cells(board) -> set[int]:
    """The cells where X completes a line at once, counted from the lines (not through the
    env's `winning_cells`, which the tests check)."""
    found = set()
    for line in LINES:
        marks = [board[i] for i in line]
        if marks.count("X") == 2 and marks.count(" ") == 1:
            found.add(line[marks.index(" ")])
    return found


def first_best(board) -> int:
    return best_moves(board, "X")[0]


def lowest_free(board) -> int:
    return legal_moves(board)[0]


BLUNDER = apply_move(EMPTY_BOARD, 0, "O")
"""O took a corner; X must take the centre, and a side (cell 1) loses to best play."""


def blunders_once(board) -> int:
    return 1 if tuple(board) == BLUNDER else first_best(board)


def exact(choose=None, client=None, **env_args) -> ExactResult:
    env = load_environment(**env_args)
    return asyncio.run(enumerate_games(env, client or as_policy(choose), GREEDY, concurrency=64))
