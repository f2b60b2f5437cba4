"""Where a greedy model gives up wins against the random opponent, exactly.

    python scripts/tictactoe_regret.py RUN/results.jsonl [--top 12]

RUN is an `rlvr eval tictactoe --exhaustive` folder. The model's move after every line it
reaches is read from the saved games (its reply depends on the conversation, so lines, not
boards, are the keys), and `rlvr_tictactoe.tree.win_rate_gaps` says, for each decision, how much
win rate against the uniform-random opponent it gives up against the best move that still never
loses (the policy whose exact rate is the 95.56% limit), weighted by how often the random
opponent leads there. For an unbeatable model the weighted gaps add up to its distance from
that limit.
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

from rlvr_tictactoe import tree

Line = tuple[tuple[str, int], ...]


def read_policy(results: Path) -> dict[Line, int]:
    """The model's move after each line of the saved games (X's moves from its replies, in order;
    O's from the game's id, e.g. O7.X4.O5.X8.O2)."""
    policy: dict[Line, int] = {}
    for text in results.read_text().splitlines():
        row = json.loads(text)
        moves = {
            "X": [
                int(m.group(1)) for t in row["turns"] if (m := re.search(r"<move>(\d)</move>", t["completion"]["text"]))
            ],
            "O": [int(t[1:]) for t in row["task_id"].split(".") if t.startswith("O")],
        }
        line: Line = ()
        turn = "O" if row["task_id"].startswith("O") else "X"
        while moves[turn]:
            cell = moves[turn].pop(0)
            if turn == "X":
                policy[line] = cell
            line, turn = (*line, (turn, cell)), "O" if turn == "X" else "X"
    return policy


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("results", type=Path, help="results.jsonl of an `rlvr eval tictactoe --exhaustive` run")
    parser.add_argument("--top", type=int, default=12, help="decisions to list (largest weighted gap first)")
    args = parser.parse_args()
    policy = read_policy(args.results)
    wins, gaps = tree.win_rate_gaps(lambda line, board: policy[line])
    total, limit = sum(g.weighted for g in gaps), tree.never_losing_max_win_rate()
    print(
        f"wins vs random {100 * wins:.2f}%, limit {100 * limit:.2f}%: {len(gaps)} decisions give up {100 * total:.2f} points"
    )
    print("| points | given up there | line | model | best never-losing moves |\n|---|---|---|---|---|")
    for g in gaps[: args.top]:
        line = " ".join(f"{mark}{cell}" for mark, cell in g.line) or "(X opens)"
        print(f"| {100 * g.weighted:.2f} | {g.gap:.3f} | {line} | X{g.move} | {', '.join(map(str, g.best))} |")


if __name__ == "__main__":
    main()
