"""Every reasoning-gym dataset through the bridge, offline: load, 5 tasks, the reference players.

Run: python benchmarks/reasoning_gym_catalogue.py [--tasks 5] [--out benchmarks/results/reasoning-gym-catalogue.json]

For each dataset in ``reasoning_gym.factory.DATASETS`` (composite apart: not bridged), with the
default arguments (size 500, eval_size 100, seed 0):

- load: CPU seconds of ``load_environment`` plus the first `--tasks` eval tasks (what
  ``rlvr eval reasoning_gym -n 5`` builds before the first request), and wall seconds;
- oracle / guess: mean reward of ``policy:oracle`` (when offered) and ``policy:guess`` on them;
- one answer: the share of the first 20 eval items whose answer is the most common one (1.0:
  one constant answer is right on every item), for the datasets that have answers;
- errors: a dataset that fails to load or to play, with its one-line reason.

Prints one row a dataset and the totals; writes them as JSON. Each dataset runs under a 120 s
alarm, so one slow generator cannot stall the catalogue.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import signal
import statistics
import time
from pathlib import Path
from typing import Any

import reasoning_gym

from rlvr.engine import run_rollouts
from rlvr.envs.reasoning_gym import load_environment


def _alarm(signum: int, frame: Any) -> None:
    raise TimeoutError("over 120 s")


def one(dataset: str, tasks: int) -> dict[str, Any]:
    row: dict[str, Any] = {"dataset": dataset}
    cpu, wall = time.process_time(), time.perf_counter()
    env = load_environment(dataset=dataset)
    first = env.tasks()[:tasks]
    row["load_cpu_s"] = round(time.process_time() - cpu, 3)
    row["load_wall_s"] = round(time.perf_counter() - wall, 3)
    for name, make in env.policies().items():
        rollouts = asyncio.run(run_rollouts(env, make(), first))
        errors = [r.error for r in rollouts if r.error is not None]
        if errors:
            row.setdefault("errors", []).append(f"{name}: {errors[0]}")
        row[name] = round(statistics.fmean(r.reward for r in rollouts), 3)
    answers = [t.answer for t in env.tasks()[:20] if t.answer is not None]
    if answers:  # 5 datasets have no answer field
        row["one_answer"] = collections.Counter(answers).most_common(1)[0][1] / len(answers)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tasks", type=int, default=5)
    parser.add_argument("--out", default="benchmarks/results/reasoning-gym-catalogue.json")
    parser.add_argument("--only", nargs="*", help="these datasets only")
    args = parser.parse_args()
    names = args.only or sorted(n for n in reasoning_gym.factory.DATASETS if n != "composite")
    signal.signal(signal.SIGALRM, _alarm)
    rows = []
    for name in names:
        signal.alarm(120)
        try:
            row = one(name, args.tasks)
        except Exception as exc:
            row = {"dataset": name, "errors": [f"{type(exc).__name__}: {str(exc).strip()[:200]}"]}
        finally:
            signal.alarm(0)
        rows.append(row)
        print(json.dumps(row), flush=True)
    loaded = [r for r in rows if "load_cpu_s" in r]
    slowest = max(loaded, key=lambda r: r["load_cpu_s"])
    walls = sorted(r["load_wall_s"] for r in loaded)
    totals = {
        "datasets": len(rows),
        "loaded": len(loaded),
        "with_errors": sum("errors" in r for r in rows),
        "load_cpu_s_max": slowest["load_cpu_s"],
        "slowest": slowest["dataset"],
        "load_wall_s_max": walls[-1],
        "load_wall_s_median": walls[len(walls) // 2],
        "over_10_s": [r["dataset"] for r in loaded if r["load_wall_s"] > 10],
        "oracle_below_1": [r["dataset"] for r in loaded if r.get("oracle", 1.0) < 1.0],
        "guess_at_least_half": [r["dataset"] for r in loaded if r.get("guess", 0.0) >= 0.5],
        "one_answer_at_least_half": [r["dataset"] for r in loaded if r.get("one_answer", 0.0) >= 0.5],
    }
    print(json.dumps(totals, indent=1))
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps({"totals": totals, "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
