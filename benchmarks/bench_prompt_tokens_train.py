"""`rlvr train tictactoe` with the recipe of `bench_tictactoe_step.py`, on the CPU: the prompt
ids' host work a step, the whole render tokenized every turn (as `LocalModel.render` did) against
`PromptTokens`, runs alternated in one process:

    OMP_NUM_THREADS=1 python benchmarks/bench_prompt_tokens_train.py --steps 2 --batch-size 32 --repeats 2

Each run trains the shipped model from the same seed for `--steps` steps; `PromptTokens.ids`
(every prompt `LocalModel.chat` renders and every reply `LocalModel.give` renders) is timed by
`time.thread_time` (the CPU time of the thread that calls it: the rollouts' event loop), and for
the `whole` runs replaced by the earlier way (`bench_prompt_tokens.whole_prompt`). Printed per
way: renders and CPU seconds of prompt ids a step, median [min-max] over repeats, and the step's
`time/step` median (wall clock: on a shared CPU, context only). `bench_prompt_tokens.py` measures
the same work on a recorded trace with less noise.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
from bench_prompt_tokens import spread, whole_prompt  # noqa: E402
from bench_tictactoe_step import ENV_ARGS, RECIPE  # noqa: E402

from rlvr.cli import main as rlvr  # noqa: E402
from rlvr.clients import local_tokens  # noqa: E402
from rlvr.report.training import read_metrics  # noqa: E402

INCREMENTAL = local_tokens.PromptTokens.ids


def whole(
    self: local_tokens.PromptTokens, messages: Any, tools: Any = None, *, generation_prompt: bool = True
) -> list[int]:
    kept = self.__dict__.setdefault("_whole", {})
    self.stats.renders += json.dumps([messages, tools or None, generation_prompt], sort_keys=True) not in kept
    return whole_prompt(self.tokenizer, kept, messages, tools, generation_prompt)


def run(way: str, args: argparse.Namespace, out: Path) -> dict[str, float]:
    """One training run with `way`'s prompt ids; its renders, prompt-id CPU s, step time a step."""
    spent = {"seconds": 0.0, "calls": 0.0, "renders": 0.0}
    inner = whole if way == "whole" else INCREMENTAL

    def timed(self: local_tokens.PromptTokens, *a: Any, **k: Any) -> list[int]:
        start, before = time.thread_time(), self.stats.renders
        try:
            return inner(self, *a, **k)
        finally:
            spent["seconds"] += time.thread_time() - start
            spent["calls"] += 1
            spent["renders"] += self.stats.renders - before

    local_tokens.PromptTokens.ids = timed  # type: ignore[method-assign]
    try:
        flags = ["--model", args.model, "--output-dir", str(out), "--steps", str(args.steps), "--seed", "0"]
        flags += ["--batch-size", str(args.batch_size), "--env-args", json.dumps(ENV_ARGS), *shlex.split(RECIPE)]
        if rlvr(["train", "tictactoe", *flags, *shlex.split(args.extra)]) not in (0, None):
            raise SystemExit(f"rlvr train failed ({way})")
    finally:
        local_tokens.PromptTokens.ids = INCREMENTAL  # type: ignore[method-assign]
    steps = read_metrics(out / "metrics.csv")
    step_s = statistics.median(r["time/step"] for r in steps)
    return {**{k: v / args.steps for k, v in spent.items()}, "time/step": step_s}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default=str(ROOT / "models" / "tictactoe-tiny"))
    p.add_argument("--steps", type=int, default=2)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--extra", default="--restart-greedy 8", help="more flags for every run")
    p.add_argument("--out", type=Path, default=None, help="also write the results here as JSON")
    args = p.parse_args()
    results: dict[str, list[dict[str, float]]] = {"whole": [], "incremental": []}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.repeats):
            for way in results:
                results[way].append(run(way, args, Path(tmp) / f"{way}-{r}"))
    print(f"{os.cpu_count()} CPUs, OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS')}, batch {args.batch_size}")
    for way, rows in results.items():
        print(
            f"{way:12s} prompts a step {statistics.median(x['calls'] for x in rows):.0f}, "
            f"renders {statistics.median(x['renders'] for x in rows):.0f}, "
            f"CPU s {spread([x['seconds'] for x in rows])}, time/step {spread([x['time/step'] for x in rows])}"
        )
    ratios = [w["seconds"] / i["seconds"] for w, i in zip(results["whole"], results["incremental"])]
    print(f"prompt ids, whole / incremental: {statistics.median(ratios):.2f}x [{min(ratios):.2f}-{max(ratios):.2f}]")
    if args.out:
        args.out.write_text(json.dumps({"args": vars(args) | {"out": str(args.out)}, **results}, indent=1, default=str))


if __name__ == "__main__":
    main()
