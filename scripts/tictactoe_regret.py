"""Where a greedy model gives up wins against the random opponent, exactly.

    python scripts/tictactoe_regret.py RUN [--top 12]

RUN is an `rlvr eval tictactoe --exhaustive` folder (or its results.jsonl). The model's move
after every line it reaches is read from each game's record (`info["exact"]["moves"]`, the
accepted moves in order; the model's reply depends on the conversation, so lines, not boards, are
the keys), and `rlvr_tictactoe.tree.win_rate_gaps` says, for each decision, how much win rate
against the uniform-random opponent it gives up against the best move that still never loses
(the policy whose exact rate is the 95.56% limit), weighted by how often the random opponent
leads there. For an unbeatable model the weighted gaps add up to its distance from that limit.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from rlvr_tictactoe import tree

from rlvr.errors import ResultsError
from rlvr.results import RunDir

Line = tuple[tuple[str, int], ...]


def read_policy(run: Path) -> dict[Line, int]:
    """The model's move after each line of the saved games. A torn last line (a killed run) is
    dropped by `RunDir`; a run without exact records is refused."""
    policy: dict[Line, int] = {}
    for rollout in RunDir.open(run).read():
        record = rollout.info.get("exact")
        if not isinstance(record, dict) or not record.get("moves"):
            raise ResultsError(f"{run}: game {rollout.task_id} has no exact record (not an --exhaustive run?)")
        moves = [(step[0], int(step[1:])) for step in record["moves"].split(".")]
        for i, (mark, cell) in enumerate(moves):
            if mark == "X":
                policy[tuple(moves[:i])] = cell
    return policy


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run", type=Path, help="an `rlvr eval tictactoe --exhaustive` folder or its results.jsonl")
    parser.add_argument("--top", type=int, default=12, help="decisions to list (largest weighted gap first)")
    args = parser.parse_args()
    try:
        policy = read_policy(args.run)
        wins, gaps = tree.win_rate_gaps(lambda line, board: policy[line])
    except ResultsError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyError as exc:  # a position the saved games never answer: a timed-out or unfinished tree
        line = " ".join(f"{mark}{cell}" for mark, cell in exc.args[0]) or "the empty board"
        print(
            f"error: {args.run} has no legal model move after {line} (a timeout, or an unfinished run)", file=sys.stderr
        )
        return 2
    total, limit = sum(g.weighted for g in gaps), tree.never_losing_max_win_rate()
    print(
        f"wins vs random {100 * wins:.2f}%, limit {100 * limit:.2f}%: {len(gaps)} decisions give up {100 * total:.2f} points"
    )
    print("| points | given up there | line | model | best never-losing moves |\n|---|---|---|---|---|")
    for g in gaps[: args.top]:
        line = " ".join(f"{mark}{cell}" for mark, cell in g.line) or "(X opens)"
        print(f"| {100 * g.weighted:.2f} | {g.gap:.3f} | {line} | X{g.move} | {', '.join(map(str, g.best))} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
