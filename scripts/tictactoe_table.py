"""Print the tic-tac-toe results tables from a reproduce_tictactoe.sh run (or `make run`).

    python scripts/tictactoe_table.py runs/tictactoe
    python scripts/tictactoe_table.py runs/make-run --stages shipped

Cells are read from OUT/eval/STAGE-exact (`rlvr eval --exhaustive`: the whole game tree, exact)
and OUT/eval/STAGE-random, STAGE-optimal (200-game greedy samples, the reference's columns).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from rlvr_tictactoe.rewards import summarize
from rlvr_tictactoe.tree import minimax_rates_vs_random, never_losing_max_win_rate

from rlvr.errors import ResultsError
from rlvr.results import RunDir

STAGES = {
    "teacher": "teacher",
    "base": "base (random weights)",
    "sft": "after SFT",
    "rl": "after RL",
    "rl2": "after RL phase 2",
    "shipped": "models/tictactoe-tiny",
}


def exact_cell(run: Path) -> str:
    if not (run / "metadata.json").exists():
        return "not run | | | | "
    try:
        meta = RunDir.open(run).metadata
    except ResultsError as exc:
        return f"unreadable: {exc} | | | | "
    exact = meta.get("exact")
    if meta.get("status") != "complete" or not exact:
        return "unfinished | | | | "

    def wdl(opponent: str) -> str:
        r = exact["rates_pct"][opponent]
        other = max(0.0, 100.0 - r.get("win", 0.0) - r.get("draw", 0.0))  # losses, timeouts, errors; never -0.00
        return f"{r.get('win', 0.0):.2f}/{r.get('draw', 0.0):.2f}/{other:.2f}"

    verdict = "**yes**" if exact["unbeatable"] else "no"
    beaten = f"{len(exact['beaten'])} of {exact['games']}"
    if exact["beaten"] and "mistakes" in exact:  # (runs before the decisions were named have none)
        n = len(exact["mistakes"])
        beaten += f" ({n} decision{'s' * (n != 1)})"
    return f"{wdl('random')} | {wdl('optimal')} | {beaten} | {exact['rejected_move_games']} | {verdict}"


def sample_cell(run: Path) -> str:
    if not (run / "results.jsonl").exists():
        return "not run | | "
    try:
        row = summarize(RunDir.open(run).read())
    except ResultsError as exc:
        return f"unreadable: {exc} | | "
    if row is None:
        return "no games | | "
    wdl = f"{row['win %']:.1f}/{row['draw %']:.1f}/{row['loss %'] + row['timeout %']:.1f}"
    return f"{wdl} | {row['format %']:.1f} | {row['invalid %']:.1f}"


def label(root: Path, stage: str) -> str:
    """The stage's row name; the teacher's with the player its evaluations ran (TEACHER=), as
    one printable table cell whatever the metadata holds."""
    if stage != "teacher":
        return STAGES.get(stage, stage)
    for run in (root / f"teacher-{kind}" for kind in ("exact", "random", "optimal")):
        try:
            model = RunDir.open(run).metadata["model"]
        except (ResultsError, KeyError, OSError):
            continue
        name = " ".join(str(model).encode("utf-8", "replace").decode().replace("|", "/").split())[:80]
        return f"teacher ({name})"
    return "teacher (policy:teacher)"


def main(out: str, stages: list[str]) -> None:
    root = Path(out) / "eval"
    names = {stage: label(root, stage) for stage in stages}
    print("Exact, over the whole game tree (greedy; W/D/L %, L includes timeouts):\n")
    print("| model | vs random W/D/L | vs optimal W/D/L | games lost | games with a rejected move | unbeatable |")
    print("|---|---|---|---|---|---|")
    for stage in stages:
        print(f"| {names[stage]} | {exact_cell(root / f'{stage}-exact')} |")
    win, draw, _ = minimax_rates_vs_random()
    print(
        f"\nLimits: a player that never loses wins at most {100 * never_losing_max_win_rate():.2f}% vs random;"
        f" minimax with a uniform tie-break {100 * win:.2f}/{100 * draw:.2f}/0."
    )
    if any((root / f"{s}-{o}").exists() for s in stages for o in ("random", "optimal")):
        print("\n200 greedy games on held-out seeds (the reference's columns):\n")
        print("| model | vs random W/D/L | format % | invalid % | vs optimal W/D/L | format % | invalid % |")
        print("|---|---|---|---|---|---|---|")
        for stage in stages:
            cells = " | ".join(sample_cell(root / f"{stage}-{opp}") for opp in ("random", "optimal"))
            print(f"| {names[stage]} | {cells} |")
    seconds = {p.stem: int(p.read_text()) for p in Path(out).glob("*.seconds")}
    if seconds:
        print("\nseconds per stage: " + ", ".join(f"{k} {v}" for k, v in sorted(seconds.items())))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", nargs="?", default="runs/tictactoe", help="the run's output folder")
    parser.add_argument("--stages", default="teacher,base,sft,rl,rl2", help="rows, comma-separated")
    args = parser.parse_args()
    main(args.out, args.stages.split(","))
