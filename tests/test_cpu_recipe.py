"""scripts/cpu_recipe.sh end to end at a much smaller size: every stage runs and leaves its outputs.

The recipe of docs/training.md ("Train on a CPU"): scaffold the multi-turn env, build a tiny
model, evaluate it, SFT, evaluate, RL, evaluate. Here with 2 eval tasks (16 tokens a turn), 40 SFT
games, 3 SFT steps and 2 RL steps of 16 rollouts; it checks that each stage prints its line and writes what
the next one reads, not the gain (the docs report the full-size numbers). Instead of
`pip install -e` (which would change the venv) the scaffolded module and a dist-info folder
with its entry point go on PYTHONPATH.
"""

from __future__ import annotations

import csv
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

pytestmark = [pytest.mark.slow, pytest.mark.timeout(440)]  # 86 s idle; 222 s beside `make run` on 2 cores

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "cpu_recipe.sh"
NAME = "cpu_recipe_probe"
STAGES = ["install", "model+data", "eval-base", "sft", "eval-sft", "rl", "eval-rl"]


@pytest.mark.heavy
def test_cpu_recipe_runs_every_stage(tmp_path: Path) -> None:
    out = tmp_path / "run"
    site = tmp_path / "site"  # what `pip install -e` would register: the entry point
    dist = site / f"{NAME}-0.0.0.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {NAME}\nVersion: 0.0.0\n")
    (dist / "entry_points.txt").write_text(f"[rlvr.environments]\n{NAME} = {NAME}:load_environment\n")
    env = os.environ | {
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
        "PYTHONPATH": os.pathsep.join([str(site), str(out / "envs" / NAME)]),
        "RECIPE_ENV": NAME,
        "RECIPE_INSTALL": "0",
        "GEN_TASKS": "40",
        "EVAL_TASKS": "2",
        "BASE_EVAL_TASKS": "2",
        "SFT_STEPS": "3",
        "RL_STEPS": "2",
        "RL_BATCH": "16",  # 2 tasks x 8: the untrained model's 64 rollouts took 26 s a step
        "EVAL_TOKENS": "16",  # an untrained model fills each turn: at 128 tokens an eval took 41-54 s
        "OMP_NUM_THREADS": "1",
    }
    proc = subprocess.run(["bash", str(SCRIPT), str(out)], env=env, capture_output=True, text=True, timeout=420)
    assert proc.returncode == 0, proc.stdout + proc.stderr

    lines = [line for line in proc.stdout.splitlines() if line.startswith("stage ")]
    assert [line.split()[1] for line in lines] == STAGES, proc.stdout
    for line in lines:
        assert re.search(r"\d+s \(total +\d+s\)", line), line
    assert all(re.search(r"solved \d+\.\d% of 2 tasks, format \d+\.\d%", line) for line in lines if "eval-" in line)
    compare = re.search(r"RL - SFT, the same 2 eval tasks: ([+-]\d+\.\d) points solved \(95% interval "
                        r"([+-]\d+\.\d) to ([+-]\d+\.\d); (\d) tasks gained, (\d) lost\)", proc.stdout)  # fmt: skip
    assert compare, proc.stdout
    assert float(compare[2]) <= float(compare[1]) <= float(compare[3])
    assert int(compare[4]) + int(compare[5]) <= 2

    assert (out / "base" / "config.json").is_file()
    assert len((out / "sft.jsonl").read_text().splitlines()) == 40  # the player solves every task
    for model in ("sft/final", "rl/final"):
        assert (out / model / "config.json").is_file(), model
    for stage in ("base", "sft", "rl"):
        rows = [json.loads(line) for line in (out / "eval" / stage / "results.jsonl").read_text().splitlines()]
        assert len(rows) == 2 and all("solved" in r["rewards"] for r in rows), stage
    with (out / "rl" / "metrics.csv").open() as f:
        steps = [int(float(row["step"])) for row in csv.DictReader(f) if row.get("reward/mean")]
    assert steps == [1, 2]
