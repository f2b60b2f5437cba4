"""Data-parallel training: two processes (torchrun, gloo on CPU) train exactly like one."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from rlvr.models import build_tiny_model

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
    cfg = TrainConfig(env="vowels", model=model, output_dir=out, steps=3, batch_size=16,
                      group_size=4, lr=1e-2, max_tokens=6, loss="cispo", eval_every=None,
                      save_every=2, micro_batch_size=3)
    history = train(cfg, make_env=vowel_env, quiet=True, plots=False)
    if int(os.environ.get("RANK", "0")) == 0:
        with open(result, "w") as f:
            json.dump(history, f)
""")


def _run(argv: list[str], cwd: Path) -> None:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=240, check=False)
    assert done.returncode == 0, done.stderr[-3000:]


@pytest.mark.slow
def test_two_processes_match_one_process_step_by_step(tmp_path) -> None:
    model = build_tiny_model(tmp_path / "tiny", preset="tiny", seed=0)
    script = tmp_path / "train_vowels.py"
    script.write_text(SCRIPT)
    _run([sys.executable, str(script), str(model), str(tmp_path / "one"), str(tmp_path / "one.json")], tmp_path)
    _run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc-per-node",
            "2",
            str(script),
            str(model),
            str(tmp_path / "two"),
            str(tmp_path / "two.json"),
        ],
        tmp_path,
    )
    one = json.loads((tmp_path / "one.json").read_text())
    two = json.loads((tmp_path / "two.json").read_text())
    assert len(one) == len(two) == 3
    for step, (a, b) in enumerate(zip(one, two), start=1):
        assert set(a) == set(b)
        for name in a:
            if name.startswith(("time/", "throughput/")) or name == "logprob/gen_mismatch":
                continue  # timings; and a measure of float noise itself (~1e-7)
            # sums over ranks add up in another order: float noise only (a different sampled
            # token would move the rewards by far more)
            tol = 1e-4 if name in ("grad/norm", "loss/policy", "loss/total") else 1e-6
            same = math.isclose(a[name], b[name], rel_tol=tol, abs_tol=1e-9)
            assert same, (step, name, a[name], b[name])
    assert (tmp_path / "two" / "checkpoints" / "step_000002" / "rng_rank1.pt").is_file()
    assert (tmp_path / "two" / "final" / "config.json").is_file()
