"""`rlvr train --resume` without -o continues the default run folder of ENV and MODEL, and a
larger --steps trains a finished run further."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("reverse_text")

from rlvr.cli import main
from rlvr.models import build_tiny_model
from rlvr.train.checkpoint import list_checkpoints

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.mark.heavy
def test_resume_without_output_dir_extends_a_finished_run(tmp_path, monkeypatch, capsys) -> None:
    tiny = build_tiny_model(tmp_path / "tiny", preset="tiny")
    monkeypatch.chdir(tmp_path)
    argv = ["train", "reverse_text", "-m", str(tiny), "--batch-size", "4", "--group-size", "2", "--max-tokens", "4"]
    argv += ["--eval-every", "none", "--probe-tasks", "0", "--save-every", "1"]
    assert main([*argv, "--steps", "1"]) == 0
    first = capsys.readouterr().out
    run = Path("runs/train/reverse_text--tiny")
    assert f"run dir {run}" in first and "on cpu;" in first  # bf16 unset: off on a CPU
    assert main([*argv, "--steps", "2", "--resume"]) == 0
    assert f"resuming {run} from step 1" in capsys.readouterr().out
    with (run / "metrics.csv").open() as f:
        steps = [int(float(row["step"])) for row in csv.DictReader(f) if row.get("loss/policy")]
    assert steps == [1, 2]
    assert [c.step for c in list_checkpoints(run)][-1] == 2 and (run / "final" / "config.json").exists()
