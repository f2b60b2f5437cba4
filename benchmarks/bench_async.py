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

`--tiny` runs in this process instead: a one-turn environment whose reward is the reply's share
of vowels (a random model scores ~0.19, so groups differ from the first step), on a tiny model
rlvr builds (`rlvr.models.build_tiny_model`, ~1.1M parameters; 16 tokens a turn, lr 1e-2, grpo),
and adds each run's wall and process CPU seconds (every thread's) and sync's over async's.

On a CPU both threads share the same cores, so this is only a check that the benchmark runs;
the measurement that decides the default needs a GPU.
"""

from __future__ import annotations

import argparse
import math
import statistics
import tempfile
import time
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
    for key in ("time/step", "time/rollouts_wait", *MEANS):
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


def vowel_share(completion: Any) -> float:
    """Share of the reply's characters that are vowels."""
    text = completion[-1]["content"] if completion else ""
    return sum(ch in "aeiou" for ch in text) / max(len(text), 1)


def vowels(**_: Any) -> Any:
    from rlvr import Rubric, SingleTurnEnv

    tasks = [{"id": str(i), "question": f"Write vowels, number {i}."} for i in range(64)]
    return SingleTurnEnv(tasks, rubric=Rubric([vowel_share]))


def tiny_runs(args: argparse.Namespace, folder: Path) -> dict[str, list[dict[str, Any]]]:
    """`--tiny`: the variants alternated in this process, each run's `summarize` with its wall
    and CPU seconds."""
    from rlvr.models import build_tiny_model
    from rlvr.train.config import TrainConfig
    from rlvr.train.grpo import train

    model = build_tiny_model(folder / "tiny", preset="tiny", seed=0)
    each: dict[str, list[dict[str, Any]]] = {name: [] for name in VARIANTS}
    for r in range(args.rounds):
        for name in VARIANTS:
            out = folder / f"{name}-round{r + 1}"
            cfg = TrainConfig(
                env="vowels", model=str(model), loss="grpo", output_dir=str(out), steps=args.steps, seed=args.seed,
                batch_size=args.batch_size, group_size=8, max_tokens=16, lr=1e-2, eval_every=None, probe_tasks=0,
                save_every=None, overlap=name == "async",
            )  # fmt: skip
            wall, cpu = time.perf_counter(), time.process_time()
            train(cfg, make_env=vowels, quiet=True, plots=False)
            found = summarize(out / "metrics.csv", args.skip)
            found |= {"wall": time.perf_counter() - wall, "cpu": time.process_time() - cpu}
            each[name].append(found)
            print(f"round {r + 1} {name}: wall {found['wall']:.2f} s, cpu {found['cpu']:.2f} s", flush=True)
    return each


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
    p.add_argument("--tiny", action="store_true", help="a vowel env on a tiny model, in this process (CPU seconds)")
    args = p.parse_args(argv)
    passed = ["--model", args.model, "--steps", str(args.steps), "--skip", str(args.skip), "--rounds", str(args.rounds)]
    passed += ["--batch-size", str(args.batch_size), "--seed", str(args.seed), f"--extra={args.extra}"]
    passed += [arg for name, flags in VARIANTS.items() for arg in ("--variant", f"{name}={flags}")]
    with tempfile.TemporaryDirectory() as scratch:
        if args.tiny:
            each = tiny_runs(args, Path(scratch))
            report = {"machine": step_bench.machine(), "args": vars(args) | {"out": str(args.out)}}
            report["variants"] = {name: {} for name in VARIANTS}
            for key in ("wall", "cpu", "time/step"):
                report[f"{key}_ratio"] = found = step_bench.ratios(each, key)["async"]
                print(f"sync / async {key}: {found['median']:.3f}x [{found['min']:.3f}-{found['max']:.3f}]")
        else:
            report = step_bench.main([*passed, "--keep", scratch])
            each = {
                name: [
                    summarize(Path(scratch) / f"{name}-round{r + 1}" / "metrics.csv", args.skip)
                    for r in range(args.rounds)
                ]
                for name in VARIANTS
            }  # (a failed run: its metrics.csv is missing and the benchmark stops here, after the runs)
    for name, rounds in each.items():
        keys = [
            k
            for k in ("time/step", "time/rollouts_wait", *MEANS, "reward_last", "wall", "cpu")
            if any(k in x for x in rounds)
        ]
        medians = {k: statistics.median(x[k] for x in rounds if k in x) for k in keys}
        report["variants"][name].update(overlap_rounds=rounds, overlap_medians=medians)
        print(f"{name}: " + ", ".join(f"{k} {v:.3f}" for k, v in medians.items()), flush=True)
        for r, x in enumerate(rounds, start=1):
            print(f"  round {r} reward vs seconds: {x['reward_vs_seconds']}")
    if args.out:
        step_bench.write_report(args.out, report)
    return report


if __name__ == "__main__":
    main()
