"""A training script for multi-process tests: `rlvr train` on a vowel-counting task, run alone or
under torchrun (gloo on CPU); rank 0 writes the metrics of each step as JSON.

    python SCRIPT MODEL OUT_DIR RESULT_JSON [CONFIG_JSON [resume]]

CONFIG_JSON: TrainConfig fields over the defaults below.
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
import textwrap
from pathlib import Path

SCRIPT = textwrap.dedent("""
    import json, os, sys
    import torch
    from rlvr import Rubric, SingleTurnEnv
    from rlvr.train.config import TrainConfig
    from rlvr.train.grpo import train

    torch.set_num_threads(1)

    def vowel_share(completion) -> float:
        text = completion[-1]["content"] if completion else ""
        return sum(ch in "aeiou" for ch in text) / max(len(text), 1)

    def vowel_env(**_):
        tasks = [{"id": str(i), "question": f"Write vowels, number {i}."} for i in range(8)]
        return SingleTurnEnv(tasks, rubric=Rubric([vowel_share]))

    model, out, result = sys.argv[1:4]
    overrides = json.loads(sys.argv[4]) if len(sys.argv) > 4 else {}
    fields = dict(steps=3, batch_size=16, group_size=4, lr=1e-2, max_tokens=6, loss="cispo",
                  eval_every=None, save_every=2, micro_batch_size=3)
    cfg = TrainConfig(env="vowels", model=model, output_dir=out, **{**fields, **overrides})
    history = train(cfg, make_env=vowel_env, resume=sys.argv[5:] == ["resume"], quiet=True, plots=False)
    if int(os.environ.get("RANK", "0")) == 0:
        with open(result, "w") as f:
            json.dump(history, f)
""")


def write_script(folder: Path) -> Path:
    path = folder / "train_vowels.py"
    path.write_text(SCRIPT)
    return path


def run(argv: list[str], cwd: Path) -> None:
    """Run `argv` (one thread per process); fail the test with its stderr."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=240, check=False)
    assert done.returncode == 0, done.stderr[-3000:]


def alone(*args: str) -> list[str]:
    return [sys.executable, *args]


def torchrun(*args: str) -> list[str]:
    """Two processes on this machine."""
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", *args]


def run_dependent(name: str) -> bool:
    """Metrics that differ between two runs of one computation: timings, generation's batching
    (which timing decides: its admissions and prompt tokens kept or shared, `gen/*`), and the
    generation log-probs' gap to the trainer's and their sum over a rollout (`logprob/gen_mismatch`,
    `rollout/logprob`: the same tokens, their log-probs as the batch's float order gave them)."""
    return name.startswith(("time/", "throughput/", "gen/")) or name in ("logprob/gen_mismatch", "rollout/logprob")


def assert_same_metrics(one: list[dict[str, float]], other: list[dict[str, float]]) -> None:
    """Every metric of every step equal up to float summation order (sums over ranks, gradients
    reduced in another order); a different sampled token would move the rewards by far more."""
    for step, (a, b) in enumerate(zip(one, other, strict=True), start=1):
        assert set(a) == set(b)
        for name in a:
            if run_dependent(name):
                continue
            tol = 1e-4 if name in ("grad/norm", "loss/policy", "loss/total") else 1e-6
            same = math.isclose(a[name], b[name], rel_tol=tol, abs_tol=1e-9)
            assert same, (step, name, a[name], b[name])
