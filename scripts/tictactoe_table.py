"""Print the tic-tac-toe results table (reference columns) from a reproduce_tictactoe.sh run.

    python scripts/tictactoe_table.py runs/tictactoe
    python scripts/tictactoe_table.py runs/make-run --stages shipped --opponents random,optimal

Cells are read from OUT/eval/STAGE-OPPONENT (`rlvr eval` result folders).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from rlvr_tictactoe.rewards import summarize

from rlvr.results import RunDir

STAGES = {
    "teacher": "teacher (policy:teacher)",
    "base": "base (random weights)",
    "sft": "after SFT",
    "rl1": "after RL phase 1",
    "rl2": "after RL phase 2",
    "shipped": "models/tictactoe-tiny",
}
OPPONENTS = {"random": "vs random", "optimal": "vs optimal", "optimal-reseeded": "vs optimal, other seeds"}


def cell(run: Path) -> str:
    if not (run / "results.jsonl").exists():
        return "not run | | | "
    row = summarize(RunDir.open(run).read())
    if row is None:
        return "no games | | | "
    wdl = f"{row['win %']:.1f}/{row['draw %']:.1f}/{row['loss %'] + row['timeout %']:.1f}"
    return f"{wdl} | {row['format %']:.1f} | {row['invalid %']:.1f} | {row['mean reward']:.3f}"


def main(out: str, stages: list[str], opponents: list[str]) -> None:
    root = Path(out) / "eval"
    head = " | ".join(f"{OPPONENTS.get(o, o)}: W/D/L % | format % | invalid % | reward" for o in opponents)
    print(f"| model | {head} |")
    print("|---" * (1 + 4 * len(opponents)) + "|")
    for stage in stages:
        cells = " | ".join(cell(root / f"{stage}-{opp}") for opp in opponents)
        print(f"| {STAGES.get(stage, stage)} | {cells} |")
    seconds = {p.stem: int(p.read_text()) for p in Path(out).glob("*.seconds")}
    if seconds:
        print("\nseconds per stage: " + ", ".join(f"{k} {v}" for k, v in sorted(seconds.items())))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", nargs="?", default="runs/tictactoe", help="the run's output folder")
    parser.add_argument("--stages", default="teacher,base,sft,rl1,rl2", help="rows, comma-separated")
    parser.add_argument("--opponents", default=",".join(OPPONENTS), help="column groups, comma-separated")
    args = parser.parse_args()
    main(args.out, args.stages.split(","), args.opponents.split(","))
