"""Print the tic-tac-toe results table (reference columns) from a reproduce_tictactoe.sh run.

    python scripts/tictactoe_table.py runs/tictactoe
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

from rlvr.results import RunDir

STAGES = [("teacher", "teacher (policy:teacher)"), ("base", "base (random weights)"), ("sft", "after SFT"),
          ("rl1", "after RL phase 1"), ("rl2", "after RL phase 2")]
OPPONENTS = [("random", "vs random"), ("optimal", "vs optimal"), ("optimal-reseeded", "vs optimal, other seeds")]


def cell(run: Path) -> str:
    if not (run / "results.jsonl").exists():
        return "not run | | | "
    rollouts = [r for r in RunDir.open(run).read() if r.error is None]
    if not rollouts:
        return "no games | | | "
    n = len(rollouts)

    def pct(name: str) -> float:
        return 100 * sum(r.rewards.get(name, 0.0) for r in rollouts) / n

    wdl = f"{pct('win'):.1f}/{pct('draw'):.1f}/{pct('loss') + pct('timeout'):.1f}"
    invalid = 100 * sum(r.rewards.get("invalid_moves", 0.0) > 0 for r in rollouts) / n
    mean = statistics.fmean(r.reward for r in rollouts)
    return f"{wdl} | {pct('format_reward'):.1f} | {invalid:.1f} | {mean:.3f}"


def main(out: str) -> None:
    root = Path(out) / "eval"
    head = " | ".join(f"{label}: W/D/L % | format % | invalid % | reward" for _, label in OPPONENTS)
    print(f"| model | {head} |")
    print("|---" * (1 + 4 * len(OPPONENTS)) + "|")
    for stage, label in STAGES:
        print(f"| {label} | " + " | ".join(cell(root / f"{stage}-{opp}") for opp, _ in OPPONENTS) + " |")
    seconds = {p.stem: int(p.read_text()) for p in Path(out).glob("*.seconds")}
    if seconds:
        print("\nseconds per stage: " + ", ".join(f"{k} {v}" for k, v in sorted(seconds.items())))


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "runs/tictactoe")
