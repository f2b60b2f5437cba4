"""The tic-tac-toe RL step of the weak-start recipes, variant against variant, alternated in one run:

    python benchmarks/bench_tictactoe_step.py --variant base= --variant packed="--micro-batch-size 256 --pack-sequences true"
    python benchmarks/bench_tictactoe_step.py --rounds 3 --steps 16 --out step.json --variant base= --variant x="--flag"
    python benchmarks/bench_tictactoe_step.py --variant base= --variant trim="MALLOC_TRIM_THRESHOLD_=1073741824"  # (env)

Each round runs `rlvr train tictactoe` once per variant, in the order given, from the same model
and seed: the recipe's flags (`RECIPE`: random replies, then a perfect opponent with traps; half
of each batch restarts walking back; 64 greedy probes a step, half after 4 random replies; 2
given moves a restart group; no evaluation) plus the variant's. From each run's metrics.csv it
takes the medians of `time/step`, `time/rollouts`, `time/train` (and `time/rollouts_wait`, with
overlap) over steps `--skip` + 1 to the last (the first steps compile, capture graphs and warm
the caches up), the means of the `gen/*` counts and the largest `memory/*` (GPU memory). Per
variant it prints the median over rounds and, for every variant after the first, the first's
step time over its own paired by round: median [min-max]. A variant that fails
is reported with its log's tail, and the others go on.

`--py-spy DIR` runs each training under `py-spy record --gil --threads` (a tool installed beside
the benchmark, not an rlvr dependency): only samples of a thread holding the GIL, that is host
Python work, which on a GPU is what keeps the device waiting. Each run's raw stacks go to
DIR/NAME-roundK.txt, and per variant it prints the seconds each thread held the GIL outside
imports and the frames that held it longest (`gil_profile`). With `--py-spy-idle` it records
every sample of every thread instead (`--idle`), waits included: the seconds are then each
thread's wall time, and the frames show where a thread waits (for the GPU, the GIL, a queue).

Why: the step time is the GPU-minutes per seed of the weak-start target, and it moves by 0.3-0.4 s
between runs of one variant on an H200 (docs/benchmarks.md), so one pair of runs says little.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from rlvr.report.training import read_metrics

ROOT = Path(__file__).resolve().parent.parent
ENV_ARGS = {
    "min_random_move_prob": 0.0,
    "max_random_move_prob": 0.0,
    "trap_prob": 1.0,
    "opening_plies": 0,
    "random_replies": 4,
    "probe_random_replies": 4,
    "probe_random_share": 0.5,
}
RECIPE = (
    "--group-size 8 --num-buckets 1 --loss cispo --max-tokens 48 --lr 2e-5 --eval-every none --probe-tasks 0 "
    "--restart-frac 0.5 --restart-below 0.65 --restart-points backtrack --restart-greedy 64 --restart-explore 2 -q"
)
TIMES = ("time/step", "time/rollouts", "time/train", "time/rollouts_wait")


def parse_variant(text: str) -> tuple[str, list[str]]:
    """NAME=FLAGS -> (NAME, the flags split as a shell would).

    >>> parse_variant('slots=--slot-prefill --seed 3')
    ('slots', ['--slot-prefill', '--seed', '3'])
    >>> parse_variant('base=')
    ('base', [])
    """
    name, sep, flags = text.partition("=")
    if not sep or not re.fullmatch(r"[A-Za-z0-9_.-]+", name.strip()):
        raise argparse.ArgumentTypeError(
            f"a variant is NAME=FLAGS, NAME of letters, digits, '_', '.' or '-' (FLAGS may be empty), got {text!r}"
        )
    return name.strip(), shlex.split(flags)


def split_env(flags: list[str]) -> tuple[dict[str, str], list[str]]:
    """A variant's leading NAME=VALUE words (NAME in capitals, as a shell reads them) are the run's
    environment, e.g. glibc's malloc settings; the rest are its flags.

    >>> split_env(["MALLOC_TRIM_THRESHOLD_=1073741824", "--seed", "3", "X=1"])
    ({'MALLOC_TRIM_THRESHOLD_': '1073741824'}, ['--seed', '3', 'X=1'])
    """
    env: dict[str, str] = {}
    while flags and (m := re.fullmatch(r"([A-Z_][A-Z0-9_]*)=(.*)", flags[0])):
        env[m[1]] = m[2]
        flags = flags[1:]
    return env, flags


def summarize(metrics: Path, skip: int) -> dict[str, float]:
    """Medians of the step's times over the steps after `skip`, means of its gen/* counts, the
    largest of its memory/* (GPU memory), and
    how many steps that was (`rlvr.report.training.read_metrics`'s rows: a torn or non-number
    cell is left out, and so is NaN or an infinity here)."""
    rows = read_metrics(metrics)
    timed = [r for r in rows if r["step"] > skip]
    if not timed:
        raise ValueError(f"{metrics} has no step after step {skip} ({len(rows)} steps in all)")
    out: dict[str, float] = {"steps": float(len(timed))}
    for key in sorted({k for r in timed for k in r if k in TIMES or k.startswith(("gen/", "memory/"))}):
        values = [r[key] for r in timed if math.isfinite(r.get(key, math.nan))]
        if values:
            pick = statistics.median if key in TIMES else max if key.startswith("memory/") else statistics.fmean
            out[key] = pick(values)
    return out


def ratios(results: dict[str, list[dict[str, float]]], key: str = "time/step") -> dict[str, dict[str, Any]]:
    """For each variant after the first: the first's `key` over its own, paired by round (rounds
    where either failed are left out), as median, min, max and each.

    >>> ratios({"a": [{"time/step": 2.0}, {"time/step": 3.0}], "b": [{"time/step": 1.0}, {}]})
    {'b': {'median': 2.0, 'min': 2.0, 'max': 2.0, 'each': [2.0]}}
    """
    names = list(results)
    out: dict[str, dict[str, Any]] = {}
    for name in names[1:]:
        each = [
            round(a[key] / b[key], 4) for a, b in zip(results[names[0]], results[name]) if a.get(key) and b.get(key)
        ]
        if each:
            out[name] = {"median": statistics.median(each), "min": min(each), "max": max(each), "each": each}
    return out


def run_one(args: argparse.Namespace, flags: list[str], out_dir: Path) -> tuple[dict[str, float], float]:
    env, flags = split_env(flags)
    command = [
        sys.executable, "-m", "rlvr.cli", "train", "tictactoe", "--model", args.model, "--output-dir", str(out_dir),
        "--steps", str(args.steps), "--batch-size", str(args.batch_size), "--seed", str(args.seed),
        "--env-args", json.dumps(ENV_ARGS), *shlex.split(RECIPE), *shlex.split(args.extra), *flags,
    ]  # fmt: skip
    if args.py_spy:
        args.py_spy.mkdir(parents=True, exist_ok=True)
        raw = args.py_spy / f"{out_dir.name}.txt"
        command = [
            "py-spy",
            "record",
            "--idle" if args.py_spy_idle else "--gil",
            "--threads",
            "--rate",
            str(SPY_RATE),
            "--format",
            "raw",
            "-o",
            str(raw),
            "--",
            *command,
        ]
    start = time.monotonic()
    log = out_dir.with_suffix(".log")
    with log.open("w") as f:
        done = subprocess.run(
            command, stdout=f, stderr=subprocess.STDOUT, cwd=ROOT, env=os.environ | {"PYTHONUNBUFFERED": "1"} | env
        )
    seconds = time.monotonic() - start
    if done.returncode != 0:
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-15:])
        raise RuntimeError(f"exit status {done.returncode}; the log's end:\n{tail}")
    return summarize(out_dir / "metrics.csv", args.skip), seconds


SPY_RATE = 100
"""py-spy's samples a second"""


def gil_profile(raw: Path, top: int = 12, rate: int = SPY_RATE) -> dict[str, Any]:
    """From py-spy's raw stacks ("thread (id): name;frame;...;frame count" a line): the seconds
    each thread name held the GIL outside imports (stacks through importlib's loader left out:
    the start-up), and the `top` innermost frames by seconds, over all threads.

    >>> import tempfile
    >>> f = Path(tempfile.mkdtemp()) / "raw.txt"
    >>> _ = f.write_text("thread (7): MainThread;run (a.py:1);step (b.py:2) 150\\n"
    ...     "thread (9): rlvr-local-model;decode (c.py:3) 50\\n"
    ...     "thread (7): MainThread;_find_and_load (<frozen importlib._bootstrap>:1);x (d.py:4) 900\\n")
    >>> gil_profile(f)
    {'threads': {'MainThread': 1.5, 'rlvr-local-model': 0.5}, 'frames': [['step (b.py:2)', 1.5], ['decode (c.py:3)', 0.5]]}
    """
    threads: dict[str, float] = {}
    frames: dict[str, float] = {}
    for line in raw.read_text(errors="replace").splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit() or "_find_and_load" in stack:
            continue
        names = stack.split(";")
        thread = names[0].split(": ", 1)[-1]
        seconds = int(count) / rate
        threads[thread] = threads.get(thread, 0.0) + seconds
        frame = names[-1] if len(names) > 1 else "(in C, no Python frame)"
        frames[frame] = frames.get(frame, 0.0) + seconds
    ranked = sorted(frames.items(), key=lambda kv: -kv[1])[:top]
    return {
        "threads": {k: round(v, 3) for k, v in sorted(threads.items(), key=lambda kv: -kv[1])},
        "frames": [[k, round(v, 3)] for k, v in ranked],
    }


def machine() -> dict[str, Any]:
    """`bench_scale_phases.environment`'s device, its peak and the library versions, and the CPUs."""
    import torch
    from bench_scale_phases import environment

    return {**environment("cuda" if torch.cuda.is_available() else "cpu"), "cpus": os.cpu_count()}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--variant", type=parse_variant, action="append", required=True, help="NAME=FLAGS (repeat)")
    p.add_argument("--model", default="models/tictactoe-tiny", help="the model every run starts from")
    p.add_argument("--steps", type=int, default=16)
    p.add_argument("--skip", type=int, default=3, help="steps left out of the medians (compiles, captures)")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--extra", default="", help="flags for every run (e.g. --bf16 on a GPU)")
    p.add_argument("--out", type=Path, help="write the results here as JSON")
    p.add_argument("--keep", type=Path, help="keep the runs' folders and logs here (default: a temporary folder)")
    p.add_argument("--py-spy", type=Path, help="record each run's GIL-held stacks with py-spy into this folder")
    p.add_argument(
        "--py-spy-idle", action="store_true",
        help="with --py-spy: every sample of every thread, waits included (where a thread waits), not only the GIL's",
    )  # fmt: skip
    args = p.parse_args(argv)
    names = [name for name, _ in args.variant]
    if len(set(names)) < len(names):
        p.error(f"variant names must differ: {names}")
    if args.rounds < 1:
        p.error(f"--rounds must be at least 1, got {args.rounds}")
    if args.py_spy_idle and not args.py_spy:
        p.error("--py-spy-idle changes what --py-spy DIR records; give --py-spy DIR too")
    if args.skip >= args.steps:
        p.error(f"--skip {args.skip} leaves none of {args.steps} steps to time")
    if args.keep and (
        taken := [n for n in names for r in range(args.rounds) if (args.keep / f"{n}-round{r + 1}").exists()]
    ):
        p.error(f"{args.keep} already holds runs of {sorted(set(taken))}; give an empty or new folder")
    results: dict[str, list[dict[str, float]]] = {name: [] for name in names}
    seconds: dict[str, list[float]] = {name: [] for name in names}
    gil: dict[str, list[dict[str, Any]]] = {name: [] for name in names}
    with tempfile.TemporaryDirectory() as scratch:
        folder = args.keep or Path(scratch)
        folder.mkdir(parents=True, exist_ok=True)
        for r in range(args.rounds):
            for name, flags in args.variant:
                try:
                    found, took = run_one(args, flags, folder / f"{name}-round{r + 1}")
                except (RuntimeError, ValueError, OSError) as exc:
                    print(f"round {r + 1} {name}: failed: {exc}", flush=True)
                    results[name].append({})
                    continue
                raw = args.py_spy / f"{name}-round{r + 1}.txt" if args.py_spy else None
                if raw is not None and not raw.is_file():
                    print(f"round {r + 1} {name}: py-spy wrote no stacks (see {folder}/{name}-round{r + 1}.log)")
                elif raw is not None:
                    found_spy = gil_profile(raw)
                    gil[name].append(found_spy)
                    what = "sampled, waits included" if args.py_spy_idle else "GIL held"
                    print(f"round {r + 1} {name}: {what} (s, imports aside): {found_spy['threads']}", flush=True)
                    for frame, secs in found_spy["frames"][:6]:
                        print(f"    {secs:7.2f} s  {frame}", flush=True)
                results[name].append(found)
                seconds[name].append(took)
                shown = " ".join(f"{k.split('/')[1]} {found[k]:.3f}" for k in TIMES if k in found)
                print(
                    f"round {r + 1} {name}: {shown} (medians of {found['steps']:.0f} steps; run {took:.0f} s)",
                    flush=True,
                )
    report: dict[str, Any] = {"machine": machine(), "args": {k: str(v) for k, v in vars(args).items()}, "variants": {}}
    for name in names:
        done = [x for x in results[name] if x]
        medians = {k: statistics.median(x[k] for x in done if k in x) for k in TIMES if any(k in x for x in done)}
        report["variants"][name] = {
            "each_round": results[name],
            "median_over_rounds": medians,
            "run_seconds": seconds[name],
            **({"idle_each_round" if args.py_spy_idle else "gil_each_round": gil[name]} if args.py_spy else {}),
        }
        shown = ", ".join(f"{k} {v:.3f} s" for k, v in medians.items()) or "no round completed"
        print(f"{name}: {shown} ({len(done)} of {args.rounds} rounds)")
    report["step_time_ratio"] = ratios(results)
    for name, r in report["step_time_ratio"].items():
        print(
            f"{names[0]} / {name} step time: {r['median']:.3f}x [{r['min']:.3f}-{r['max']:.3f}] over {len(r['each'])} rounds"
        )
    if args.out:
        write_report(args.out, report)
    return report


def write_report(path: Path, report: dict[str, Any]) -> None:
    """Write `report` as JSON whole or not at all: a kill mid-write leaves only `path`.part."""
    part = path.with_name(path.name + ".part")
    part.write_text(json.dumps(report, indent=1))
    part.replace(path)


if __name__ == "__main__":
    main()
