"""How often training games and greedy probes meet the lines a model loses, exactly.

    python experiments/tictactoe/line_odds.py RUN... [--random-replies 4] [--p 0] [--trap-prob 1]
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
import sys
from pathlib import Path

from rlvr_tictactoe.tree import line_chance


def line_odds(line: str, ks: list[int], p: float, trap: float) -> float:
    """The chance that one greedy game plays `line`, k drawn uniformly from `ks`: the env's
    draws (`tasks.reply_prob` for the random replies, `tree.reply_probability` for each reply)."""
    moves = [(step[0], int(step[1:])) for step in line.split(".")]
    return sum(line_chance(moves, k, p, trap) for k in ks) / len(ks)


def every(odds: float, games: int) -> str:
    """How often `games` games a step, each lost with chance `odds`, lose one: "one lost every N
    steps", or the number a step once it is one or more."""
    n = odds * games
    if not n:
        return "none lost"
    return f"{n:.1f} lost a step" if n >= 1 else f"one lost every {1 / n:,.0f} steps"


def lost_lines(run: Path) -> tuple[list[str], int]:
    """The lost lines and the number of games of an exhaustive eval folder; ValueError, saying
    why, for anything else (a plain eval, a torn metadata.json, a line that is not a game)."""
    try:
        exact = json.loads((run / "metadata.json").read_text())["exact"]
        lines, games = [str(x) for x in exact["beaten"]], int(exact["games"])
        for line in lines:  # each a game the env could play: legal moves, in turn
            line_odds(line, [0], 0.0, 0.0)
    except (OSError, ValueError, KeyError, TypeError, IndexError) as e:  # (json's errors are ValueErrors)
        raise ValueError(f"{run}: not a complete `rlvr eval tictactoe --exhaustive` folder ({type(e).__name__}: {e})")
    return lines, games


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", nargs="+", type=Path, help="rlvr eval --exhaustive folders")
    ap.add_argument("--random-replies", type=int, default=4, help="the env's random_replies (k from 0 to this)")
    ap.add_argument("--p", type=float, default=0.0, help="the opponent's random-move probability after them")
    ap.add_argument("--trap-prob", type=float, default=1.0, help="the env's trap_prob")
    ap.add_argument("--probe-k", type=int, default=None, help="the probes' fixed k (probe_random_replies)")
    ap.add_argument("--probes", type=int, default=64, help="greedy probes a step (restart_greedy)")
    args = ap.parse_args(argv)
    for name in ("p", "trap_prob"):
        if not 0.0 <= getattr(args, name) <= 1.0:  # (NaN fails this too)
            ap.error(f"--{name.replace('_', '-')} must be in [0, 1], got {getattr(args, name)}")
    if not 0 <= args.random_replies <= 5 or not (args.probe_k is None or 0 <= args.probe_k <= 5):
        ap.error("--random-replies and --probe-k must be from 0 to 5")
    if args.probes < 1:
        ap.error("--probes must be >= 1")
    ks = list(range(args.random_replies + 1))
    for run in args.runs:
        try:
            lines, games = lost_lines(run)
        except ValueError as e:
            print(e, file=sys.stderr)
            return 2
        train = [line_odds(x, ks, args.p, args.trap_prob) for x in lines]
        fixed = (
            [line_odds(x, [args.probe_k], args.p, args.trap_prob) for x in lines] if args.probe_k is not None else []
        )
        print(f"{run}: {len(lines)} lost lines of {games} games")
        for i, (line, odds) in enumerate(zip(lines, train, strict=True)):
            also = f", k = {args.probe_k}: {fixed[i]:.2e}" if fixed else ""
            print(f"  {line:28} {odds:.2e} a game{also}")
        total = sum(train)
        print(
            f"  a greedy probe loses {100 * total:.4f}% of games: {args.probes} probes a step, {every(total, args.probes)}"
        )
        if fixed:
            print(f"  with k = {args.probe_k}: {100 * sum(fixed):.4f}%, {every(sum(fixed), args.probes)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
