"""How often training games and greedy probes meet the lines a model loses, exactly.

    python scripts/tictactoe_line_odds.py RUN... [--random-replies 4] [--p 0] [--trap-prob 1]
                                          [--probe-k 4] [--probes 64]

Each RUN is an `rlvr eval tictactoe --exhaustive` folder; its metadata lists the lost lines
(`exact.beaten`, e.g. O6.X4.O8.X7.O1.X5.O0.X2.O3). For each line this prints the probability
that one greedy game against the training opponent plays it: the model's moves are its own
(a greedy game of this model makes them), the opponent's are drawn as the env draws them (O
moves first in half the tasks; k from 0 to `random_replies`, uniformly; uniformly random
replies while O has fewer than k marks, then a random move with probability p, else a trap
move with probability `trap_prob`, else any best move). Their sum is the chance that a greedy
probe loses, which `restart/greedy_below` estimates during training; with `--probe-k` the
same for probes whose k is fixed (the env's `probe_random_replies`).
"""

from __future__ import annotations

import argparse
import json
from fractions import Fraction
from pathlib import Path

from rlvr_tictactoe.game import EMPTY_BOARD, apply_move, best_moves, legal_moves, trap_moves


def reply_odds(board: tuple[str, ...], cell: int, k: int, p: Fraction, trap: Fraction) -> Fraction:
    """The chance that the opponent answers `cell` on `board` (the env's `opponent_move`)."""
    free = legal_moves(board)
    uniform = Fraction(int(cell in free), len(free))
    if board.count("O") < k:
        return uniform
    traps, best = trap_moves(board, "O"), best_moves(board, "O")
    chosen = trap * Fraction(int(cell in traps), len(traps)) + (1 - trap) * Fraction(int(cell in best), len(best))
    return p * uniform + (1 - p) * chosen


def line_odds(line: str, ks: list[int], p: Fraction, trap: Fraction) -> Fraction:
    """The chance that one greedy game plays `line`, k drawn uniformly from `ks`."""
    moves = [(step[0], int(step[1:])) for step in line.split(".")]
    total = Fraction(0)
    for k in ks:
        odds, board = Fraction(1, 2), EMPTY_BOARD  # who starts: a fair coin
        for mark, cell in moves:
            if mark == "O":
                odds *= reply_odds(board, cell, k, p, trap)
            board = apply_move(board, cell, mark)
        total += odds / len(ks)
    return total


def every(odds: Fraction, games: int) -> str:
    return f"every {float(1 / (odds * games)):,.0f} steps" if odds else "never"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", nargs="+", type=Path, help="rlvr eval --exhaustive folders")
    ap.add_argument("--random-replies", type=int, default=4, help="the env's random_replies (k from 0 to this)")
    ap.add_argument("--p", type=Fraction, default=Fraction(0), help="the opponent's random-move probability after them")
    ap.add_argument("--trap-prob", type=Fraction, default=Fraction(1), help="the env's trap_prob")
    ap.add_argument("--probe-k", type=int, default=None, help="the probes' fixed k (probe_random_replies)")
    ap.add_argument("--probes", type=int, default=64, help="greedy probes a step (restart_greedy)")
    args = ap.parse_args(argv)
    for run in args.runs:
        exact = json.loads((run / "metadata.json").read_text())["exact"]
        lines = exact["beaten"]
        train = [line_odds(x, list(range(args.random_replies + 1)), args.p, args.trap_prob) for x in lines]
        print(f"{run}: {len(lines)} lost lines of {exact['games']} games")
        for line, odds in zip(lines, train, strict=True):
            fixed = f", k = {args.probe_k}: {float(line_odds(line, [args.probe_k], args.p, args.trap_prob)):.2e}"
            print(f"  {line:28} {float(odds):.2e} a game{fixed if args.probe_k is not None else ''}")
        total = sum(train, Fraction(0))
        print(
            f"  a greedy probe loses {100 * float(total):.4f}% of games: {args.probes} a step lose one {every(total, args.probes)}"
        )
        if args.probe_k is not None:
            fixed_total = sum((line_odds(x, [args.probe_k], args.p, args.trap_prob) for x in lines), Fraction(0))
            print(f"  with k = {args.probe_k}: {100 * float(fixed_total):.4f}%, one {every(fixed_total, args.probes)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
