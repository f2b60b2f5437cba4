"""FSDP2 (`sharding = "fsdp"`): two processes (torchrun, gloo on CPU) with sharded weights,
gradients and AdamW state train like one process, write whole model folders, and resume."""

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

from rlvr.errors import UsageError
from rlvr.models import build_tiny_model
from rlvr.train.config import TrainConfig

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

    model, out, result, steps, resume = sys.argv[1:6]
    cfg = TrainConfig(env="vowels", model=model, output_dir=out, steps=int(steps), batch_size=16,
                      group_size=4, lr=1e-2, max_tokens=6, loss="cispo", eval_every=3, eval_tasks=4,
                      save_every=None, micro_batch_size=3, probe_tasks=4, sharding="fsdp")
    history = train(cfg, make_env=vowel_env, resume=resume == "resume", quiet=True, plots=False)
    if int(os.environ.get("RANK", "0")) == 0:
        with open(result, "w") as f:
            json.dump(history, f)
""")


def _run(argv: list[str], cwd: Path) -> None:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=240, check=False)
    assert done.returncode == 0, done.stderr[-3000:]


def _torchrun(*args: str) -> list[str]:
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", *args]


def _weights(path: Path) -> dict[str, torch.Tensor]:
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).state_dict()


@pytest.mark.slow
def test_fsdp_on_two_processes_matches_one_process_and_resumes(tmp_path) -> None:
    model = build_tiny_model(tmp_path / "tiny", preset="tiny", seed=0)
    script = tmp_path / "train_vowels.py"
    script.write_text(SCRIPT)
    one, two = tmp_path / "one", tmp_path / "two"
    # one process (nothing to shard: the plain model), 3 steps
    _run([sys.executable, str(script), str(model), str(one), str(tmp_path / "one.json"), "3", "new"], tmp_path)
    # two processes, sharded: 2 steps, then a second launch resumes from the step-2 checkpoint
    _run(_torchrun(str(script), str(model), str(two), str(tmp_path / "a.json"), "2", "new"), tmp_path)
    assert sorted(p.name for p in (two / "checkpoints" / "step_000002").iterdir()) == [
        "model",
        "optimizer",
        "rng_rank1.pt",
        "trainer.pt",
    ]
    _run(_torchrun(str(script), str(model), str(two), str(tmp_path / "b.json"), "3", "resume"), tmp_path)

    reference = json.loads((tmp_path / "one.json").read_text())
    sharded = json.loads((tmp_path / "a.json").read_text()) + json.loads((tmp_path / "b.json").read_text())
    assert len(reference) == len(sharded) == 3
    for step, (a, b) in enumerate(zip(reference, sharded), start=1):
        assert set(a) == set(b)
        for name in a:
            if name.startswith(("time/", "throughput/")) or name == "logprob/gen_mismatch":
                continue  # timings; and a measure of float noise itself (~1e-7)
            # gradients reduce-scattered in another order: float noise only (measured: 6e-5
            # relative at most); a different sampled token would move the rewards by far more
            tol = 1e-4 if name in ("grad/norm", "loss/policy", "loss/total") else 1e-6
            same = math.isclose(a[name], b[name], rel_tol=tol, abs_tol=1e-9)
            assert same, (step, name, a[name], b[name])

    # the final folders are ordinary models; the sharded run's update is the one-process update
    # up to float noise that Adam's division amplifies on small gradients (measured: 0.5% of
    # the update's norm; the weights moved by up to 3e-2)
    start, ref, got = _weights(model), _weights(one / "final"), _weights(two / "final")
    assert sorted(got) == sorted(ref)
    moved = torch.cat([(ref[k] - start[k]).flatten() for k in ref])
    gap = torch.cat([(got[k] - ref[k]).flatten() for k in ref])
    assert moved.norm() > 0.1
    assert gap.norm() / moved.norm() < 0.02, float(gap.norm() / moved.norm())


def test_fsdp_refuses_lora() -> None:
    with pytest.raises(UsageError, match="sharding = fsdp shards full fine-tuning"):
        TrainConfig(env="e", model="m", sharding="fsdp", lora_rank=8)
    with pytest.raises(UsageError, match="unknown sharding 'zero3'; expected one of ddp, fsdp"):
        TrainConfig(env="e", model="m", sharding="zero3")
