"""The exact best response to a training opponent, and what it scores against the evaluator's.

    python experiments/tictactoe/best_response.py                     # the plans' opponents (below)
    python experiments/tictactoe/best_response.py --p 0.7 --k 4 --trap 1
    python experiments/tictactoe/best_response.py --p 0 0.7 --k 4 --trap 1   # p uniform in [0, 0.7]
    python experiments/tictactoe/best_response.py --at O8.X4.O1 --model runs/make-run/eval/shipped-exact

A training opponent is the env's: O moves first in half the games; k is drawn uniformly from
0..K for each game, and O's moves are uniformly random while it has fewer than k marks; after
that it moves at random with probability p (drawn uniformly from [P_LOW, P_HIGH] for each game:
`--p LOW HIGH`, integrated over `--grid` midpoints), else plays one of the `trap_moves` with
probability `--trap`, else any best move (`rlvr_tictactoe.tree.reply_probability`). Its k and p
are hidden: the policy sees only the game so far, so the best response is a function of the
move history (an opponent that has played a non-best move is likelier to be a random one).

For each opponent the script walks every history once and finds the X policy of the highest
expected training reward (win 1, draw 0.5, loss 0: the env's rubric for a well-formed game), then
plays that policy against the random and the optimal opponent (uniform over best moves, no traps:
`rlvr eval --exhaustive`'s weights) and over every legal O reply, and prints its exact W/D/L and
its lost games: the ceiling of what RL against that opponent can reach, if it found the best
response. Ties between moves are broken towards more wins against the random opponent.

`--at LINE` (repeatable) prints each move's expected training reward at that decision (the line
before it, e.g. O8.X4.O1), given the history, with the best response after it: how much the
opponent pays for the better move there. `--model RUN` reads a greedy model's move at every line
of an `rlvr eval tictactoe --exhaustive` folder and prints its expected training reward beside the
best response's: what RL against that opponent has left to gain (its accepted moves only: a
rejected move and the reply format are not counted).
"""

from __future__ import annotations

import argparse
import functools
import runpy
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from rlvr_tictactoe.game import EMPTY_BOARD, Board, apply_move, legal_moves
from rlvr_tictactoe.tasks import game_outcome, reply_prob
from rlvr_tictactoe.tree import line_id, reply_probability

from rlvr.errors import ResultsError

REWARD = {"win": 1.0, "draw": 0.5, "loss": 0.0}
History = tuple[int, ...]


@functools.cache
def outcome(board: Board) -> str | None:
    """`game_outcome`, cached (5,478 boards)."""
    return game_outcome(board)


@functools.cache
def moves(board: Board, mark: str) -> tuple[tuple[int, Board], ...]:
    """(cell, the board after `mark` plays it) for each legal move, cached."""
    return tuple((c, apply_move(board, c, mark)) for c in legal_moves(board))


@dataclass(frozen=True)
class Opponent:
    """The training opponent: p uniform in [p_low, p_high], k uniform in 0..k_max, traps."""

    name: str
    p_low: float
    p_high: float
    k_max: int
    trap: float

    def types(self, grid: int) -> list[tuple[float, int]]:
        """(p, k) pairs of equal weight: p at `grid` midpoints of its range (one point when fixed)."""
        if self.p_high == self.p_low:
            ps = [self.p_low]
        else:
            step = (self.p_high - self.p_low) / grid
            ps = [self.p_low + step * (i + 0.5) for i in range(grid)]
        return [(p, k) for p in ps for k in range(self.k_max + 1)]


PLANS = [
    Opponent("random, the uniform-random opponent", 1.0, 1.0, 0, 0.0),
    Opponent("p = 0.7 (limits: its best response never loses)", 0.7, 0.7, 0, 0.0),
    Opponent("rlGX (phase 1): k <= 4 random replies, then p = 0, traps", 0.0, 0.0, 4, 1.0),
    Opponent("rlW0, rlGY2: k <= 4, then p = 0.7, traps", 0.7, 0.7, 4, 1.0),
    Opponent("rlGX2 (weakwins2): k <= 4, then p in [0, 0.7], traps", 0.0, 0.7, 4, 1.0),
]


class Solver:
    """The best response to one opponent, by history (X's moves only are chosen)."""

    def __init__(self, opponent: Opponent, grid: int, watch: frozenset[History] = frozenset()) -> None:
        self.types = opponent.types(grid)
        self.watch = watch
        """histories of decisions whose moves' values to record in `watched` (X moves at an even
        length when it starts, at an odd one when O does: a history names its start)"""
        self.watched: dict[History, dict[int, float]] = {}
        self.trap = opponent.trap
        self.policy: dict[History, int] = {}
        self._replies: dict[Board, np.ndarray] = {}
        self.ends = {name: np.full(len(self.types), value) for name, value in REWARD.items()}

    def replies(self, board: Board) -> np.ndarray:
        """The probability of each of O's legal moves on `board` (`moves` order), per type."""
        if board not in self._replies:
            self._replies[board] = np.array(
                [
                    [reply_probability(board, c, reply_prob(board, p, k), self.trap) for p, k in self.types]
                    for c, _ in moves(board, "O")
                ]
            )
        return self._replies[board]

    def solve(self) -> float:
        """The best response's expected training reward (types equally likely)."""
        reach = np.full(len(self.types), 0.5 / len(self.types))
        x_first = self._value(EMPTY_BOARD, (), True, reach)
        o_first = self._value(EMPTY_BOARD, (), False, reach)
        return float(reach @ (x_first + o_first))

    def _value(self, board: Board, history: History, x_to_move: bool, reach: np.ndarray) -> np.ndarray:
        """Per type: the expected reward from here, the best response playing X. A reply no type
        plays is solved too, so the policy covers every history."""
        if (end := outcome(board)) is not None:
            return self.ends[end]
        if not x_to_move:
            total = np.zeros(len(self.types))
            for (cell, child), probs in zip(moves(board, "O"), self.replies(board)):
                total += probs * self._value(child, (*history, cell), True, reach * probs)
            return total
        options = []
        for cell, child in moves(board, "X"):
            values = self._value(child, (*history, cell), False, reach)
            options.append((float(reach @ values), cell, child, values))
        if history in self.watch and reach.sum() > 0:  # each move's expected reward, given the history
            self.watched[history] = {cell: value / float(reach.sum()) for value, cell, _, _ in options}
        top = max(option[0] for option in options)
        tied = [option for option in options if option[0] >= top - 1e-12 * max(1.0, abs(top))]
        if len(tied) > 1:  # towards more wins against the random opponent (the policy below is set)
            tied.sort(key=lambda o: -rates(self.policy, 1.0, o[2], (*history, o[1]), False)[0])
        self.policy[history] = tied[0][1]
        return tied[0][3]


@functools.cache
def _fixed_replies(board: Board, p: float) -> np.ndarray:
    """The probability of each of O's legal moves (`moves` order), as a column, for the opponent
    of random-move probability `p` with no traps and no random replies (the evaluator's)."""
    return np.array([[reply_probability(board, c, p)] for c, _ in moves(board, "O")])


OUTCOMES = {name: row for name, row in zip(("win", "draw", "loss"), np.eye(3), strict=True)}


def expected(
    policy: Mapping[History, int | None],
    replies: Callable[[Board], np.ndarray],
    leaf: Callable[[str], np.ndarray],
    board: Board = EMPTY_BOARD,
    history: History = (),
    x_to_move: bool | None = None,
) -> np.ndarray:
    """The expectation of `leaf(outcome)` over the games `policy` plays as X against O's moves
    with the probabilities `replies(board)` gives (a row per legal move, `moves` order), from
    `board` after `history`; from the start (`x_to_move` None), both starts equally likely."""
    if x_to_move is None:
        return 0.5 * (
            expected(policy, replies, leaf, board, (), True) + expected(policy, replies, leaf, board, (), False)
        )
    if (end := outcome(board)) is not None:
        return leaf(end)
    if x_to_move:
        cell = policy[history]
        if cell is None:  # no reply accepted: a timeout, which the rubric scores as a loss
            return leaf("loss")
        return expected(policy, replies, leaf, apply_move(board, cell, "X"), (*history, cell), False)
    total = np.zeros_like(leaf("draw"))
    for (cell, child), probs in zip(moves(board, "O"), replies(board)):
        if probs.any():
            total += probs * expected(policy, replies, leaf, child, (*history, cell), True)
    return total


def rates(
    policy: Mapping[History, int | None],
    p: float,
    board: Board = EMPTY_BOARD,
    history: History = (),
    x_to_move: bool | None = None,
) -> tuple[float, float, float]:
    """(win, draw, loss) of `policy` against the opponent of random-move probability `p` (no
    traps, no random replies), from `board` after `history`; from the start, both starts. A
    timeout (no move) counts as a loss."""
    win, draw, loss = expected(
        policy, functools.partial(_fixed_replies, p=p), OUTCOMES.__getitem__, board, history, x_to_move
    )
    return float(win), float(draw), float(loss)


def policy_reward(solver: Solver, policy: Mapping[History, int | None]) -> float:
    """The expected training reward of `policy` (X's move for every history it reaches, both
    starts) against the solver's opponent (types equally likely)."""
    return float(expected(policy, solver.replies, solver.ends.__getitem__).mean())


def read_model_policy(run: Path) -> dict[History, int | None]:
    """A greedy model's move after every line of an `rlvr eval tictactoe --exhaustive` folder,
    by history (`regret.read_policy`: its accepted moves, None where none was, a
    timeout; a rejected move and the reply format are not counted)."""
    read_policy = runpy.run_path(str(Path(__file__).with_name("regret.py")))["read_policy"]
    return {tuple(cell for _, cell in line): cell for line, cell in read_policy(run).items()}


def lost_games(policy: dict[History, int]) -> list[str]:
    """The games `policy` loses over every legal O reply, both starts (the evaluator's lost
    games), as lines: O1.X6.O0... (X4.O0... when X starts)."""
    lost: list[str] = []

    def walk(board: Board, history: History, x_to_move: bool) -> None:
        if (end := outcome(board)) is not None:
            if end == "loss":  # O moved last: an even history when X started
                x_first = len(history) % 2 == 0
                lost.append(line_id(None, history) if x_first else line_id(history[0], history[1:]))
        elif x_to_move:
            cell = policy[history]
            walk(apply_move(board, cell, "X"), (*history, cell), False)
        else:
            for c, child in moves(board, "O"):
                walk(child, (*history, c), True)

    walk(EMPTY_BOARD, (), True)
    walk(EMPTY_BOARD, (), False)
    return lost


def parse_line(text: str) -> History:
    """A decision of X as the line before it, 'O8.X4.O1' (O opened) or 'X4.O0', as its history
    (the cells in order; its length's parity says who started).

    >>> parse_line("O8.X4.O1"), parse_line("X4.O0"), parse_line("")
    ((8, 4, 1), (4, 0), ())
    """
    marks = [m for m in text.replace(" ", ".").split(".") if m]
    if not all(len(m) == 2 and m[0] in "XO" and m[1] in "012345678" for m in marks):
        raise ValueError(f"a line is moves like O8.X4.O1, got {text!r}")
    x_first = not marks or marks[0][0] == "X"
    if any(m[0] != "XO"[(i + (not x_first)) % 2] for i, m in enumerate(marks)) or (marks and marks[-1][0] != "O"):
        raise ValueError(f"the marks must alternate and end with O's move (X to play), got {text!r}")
    cells = tuple(int(m[1]) for m in marks)
    if len(set(cells)) < len(cells):
        raise ValueError(f"a cell is played twice in {text!r}")
    return cells


def report(
    opponent: Opponent,
    grid: int,
    watch: frozenset[History] = frozenset(),
    model: Mapping[History, int | None] | None = None,
) -> dict[str, Any]:
    start = time.monotonic()
    solver = Solver(opponent, grid, watch)
    reward = solver.solve()
    extra = {} if model is None else {"model_reward": policy_reward(solver, model)}
    win, draw, loss = rates(solver.policy, 1.0)
    _, odraw, oloss = rates(solver.policy, 0.0)
    return {
        "training_reward": reward,
        "random_win": 100 * win,
        "random_draw": 100 * draw,
        "random_loss": 100 * loss,
        "optimal_draw": 100 * odraw,
        "optimal_loss": 100 * oloss,
        "lost_games": lost_games(solver.policy),
        "at": solver.watched,
        **extra,
        "seconds": time.monotonic() - start,
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--p", type=float, nargs="+", help="the opponent's p, or its range LOW HIGH (default: the plans')"
    )
    parser.add_argument("--k", type=int, default=0, help="random replies: k uniform in 0..K")
    parser.add_argument("--trap", type=float, default=0.0, help="the opponent's trap_prob")
    parser.add_argument("--grid", type=int, default=14, help="points of a p range")
    parser.add_argument(
        "--at",
        action="append",
        default=[],
        help="a decision, as the line before it (e.g. O8.X4.O1): each move's expected training reward there",
    )
    parser.add_argument(
        "--model",
        type=Path,
        help="an `rlvr eval --exhaustive` folder: also that greedy model's expected training reward",
    )
    args = parser.parse_args(argv)
    try:
        watched = [parse_line(line) for line in args.at]
    except ValueError as exc:
        parser.error(str(exc))
    if args.p is None:
        opponents = PLANS
    else:
        if len(args.p) > 2 or not all(0.0 <= p <= 1.0 for p in args.p) or args.p[0] > args.p[-1]:
            parser.error(f"--p takes P or LOW HIGH within [0, 1], got {args.p}")
        if not 0 <= args.k <= 5 or not 0.0 <= args.trap <= 1.0 or not 1 <= args.grid <= 1000:
            parser.error("--k in 0..5 (O moves at most 5 times), --trap in [0, 1], --grid in 1..1000")
        opponents = [
            Opponent(f"p {args.p}, k <= {args.k}, traps {args.trap}", args.p[0], args.p[-1], args.k, args.trap)
        ]
    try:
        model = read_model_policy(args.model) if args.model else None
        win, draw, loss = rates(model, 1.0) if model is not None else (0.0, 0.0, 0.0)
    except ResultsError as exc:
        parser.error(str(exc))
    except KeyError as exc:  # a line the model reaches whose next move the folder lacks
        parser.error(
            f"{args.model} has no move of the model after {exc.args[0]}: not a whole exhaustive run (cut short?)"
        )
    if model is not None:
        print(
            f"model {args.model}: {len(model)} decisions; vs random {100 * win:.2f} / {100 * draw:.2f} / {100 * loss:.2f}"
        )
    print("| training opponent | its reward | best response vs random W/D/L % | vs optimal D/L % | lost games |")
    print("|---|---|---|---|---|")
    for opponent in opponents:
        r = report(opponent, args.grid, frozenset(watched), model)
        if model is not None:
            print(
                f"({opponent.name}: the model's expected training reward {r['model_reward']:.4f}, "
                f"the best response's {r['training_reward']:.4f}: {r['training_reward'] - r['model_reward']:.4f} a game to gain)",
                file=sys.stderr,
            )
        for line, watch in zip(args.at, watched):
            at = r["at"].get(watch, {})
            shown = ", ".join(f"{cell}: {value:.4f}" for cell, value in sorted(at.items(), key=lambda kv: -kv[1]))
            print(
                f"({opponent.name}: at {line}, the expected training reward of each move: {shown or 'not reached'})",
                file=sys.stderr,
            )
        print(
            f"| {opponent.name} | {r['training_reward']:.4f} | {r['random_win']:.2f} / {r['random_draw']:.2f} / "
            f"{r['random_loss']:.2f} | {r['optimal_draw']:.2f} / {r['optimal_loss']:.2f} | {len(r['lost_games'])} |",
            flush=True,
        )
        lost = ", ".join(r["lost_games"][:8]) + (" ..." if len(r["lost_games"]) > 8 else "")
        print(f"({opponent.name}: {r['seconds']:.0f} s{'; lost: ' + lost if lost else ''})", file=sys.stderr)


if __name__ == "__main__":
    main()
