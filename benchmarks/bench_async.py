"""Overlap (`rlvr train --async`) against the plain loop, alternated in one run, on whatever device is present:

    python benchmarks/bench_async.py --rounds 3 --steps 16 --extra --bf16 --out async.json   # a GPU
    python benchmarks/bench_async.py --rounds 2 --steps 4 --skip 1 --batch-size 16 --extra "--max-tokens 16"  # CPU smoke

The runs are `bench_tictactoe_step.py`'s, two variants alternated round by round from the same
model and seed: `--no-async` and `--async`, each with `--save-every none` (no checkpoint before
the last step, so every step after the first overlaps), on its tic-tac-toe recipe with no
evaluation. It prints what that prints (the medians of `time/step`, `time/rollouts` and
`time/train` over the steps after `--skip`, and sync's step time over async's paired by round:
median [min-max]) and, from each run's metrics.csv, the median `time/rollouts_wait`, the means
of `ratio/max`, `clip/frac` and `async/staleness` after `--skip`, the mean reward of the last
steps, and the reward against wall-clock time (cumulative `time/step`: the curve to compare,
since overlap trains on one-step-stale batches and may need more steps for a reward).

On a CPU both threads share the same cores, so this is only a check that the benchmark runs;
the measurement that decides the default needs a GPU.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import tempfile
from pathlib import Path
from typing import Any

import bench_tictactoe_step as step_bench

from rlvr.report.training import read_metrics

VARIANTS = {"sync": "--no-async --save-every none", "async": "--async --save-every none"}
MEANS = ("ratio/max", "clip/frac", "async/staleness")


def summarize(metrics: Path, skip: int, last: int = 3) -> dict[str, Any]:
    """After `skip`: the median `time/rollouts_wait` and the means of `MEANS`; the mean reward of
    the `last` steps; the reward against cumulative step seconds (every step)."""
    rows = [r for r in read_metrics(metrics) if "time/step" in r and "reward/mean" in r]
    timed = [r for r in rows if r["step"] > skip]
    if not timed:
        raise ValueError(f"{metrics} has no step after step {skip} ({len(rows)} steps in all)")
    out: dict[str, Any] = {}
    for key in ("time/rollouts_wait", *MEANS):
        values = [r[key] for r in timed if math.isfinite(r.get(key, math.nan))]
        if values:
            out[key] = statistics.median(values) if key.startswith("time/") else statistics.fmean(values)
    out["reward_last"] = statistics.fmean(r["reward/mean"] for r in rows[-last:])
    clock, curve = 0.0, []
    for r in rows:
        clock += r["time/step"]
        curve.append([round(clock, 3), round(r["reward/mean"], 4)])
    out["reward_vs_seconds"] = curve
    return out


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="models/tictactoe-tiny", help="the model every run starts from")
    p.add_argument("--steps", type=int, default=16)
    p.add_argument("--skip", type=int, default=3, help="steps left out of the medians (compiles, captures)")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--extra", default="", help="flags for every run (e.g. --bf16 on a GPU)")
    p.add_argument("--out", type=Path, help="write the results here as JSON")
    args = p.parse_args(argv)
    passed = ["--model", args.model, "--steps", str(args.steps), "--skip", str(args.skip), "--rounds", str(args.rounds)]
    passed += ["--batch-size", str(args.batch_size), "--seed", str(args.seed), f"--extra={args.extra}"]
    passed += [arg for name, flags in VARIANTS.items() for arg in ("--variant", f"{name}={flags}")]
    with tempfile.TemporaryDirectory() as scratch:
        report = step_bench.main([*passed, "--keep", scratch])
        each = {
            name: [
                summarize(Path(scratch) / f"{name}-round{r + 1}" / "metrics.csv", args.skip) for r in range(args.rounds)
            ]
            for name in VARIANTS
        }  # (a failed run: its metrics.csv is missing and the benchmark stops here, after the runs)
    for name, rounds in each.items():
        keys = [k for k in ("time/rollouts_wait", *MEANS, "reward_last") if any(k in x for x in rounds)]
        medians = {k: statistics.median(x[k] for x in rounds if k in x) for k in keys}
        report["variants"][name].update(overlap_rounds=rounds, overlap_medians=medians)
        print(f"{name}: " + ", ".join(f"{k} {v:.3f}" for k, v in medians.items()), flush=True)
        for r, x in enumerate(rounds, start=1):
            print(f"  round {r} reward vs seconds: {x['reward_vs_seconds']}")
    if args.out:  # whole or not at all (a kill mid-write leaves the .part)
        part = args.out.with_name(args.out.name + ".part")
        part.write_text(json.dumps(report, indent=1))
        part.replace(args.out)
    return report


if __name__ == "__main__":
    main()
