"""Data-parallel training: two processes (torchrun, gloo on CPU) train exactly like one."""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from vowel_training import alone, assert_same_metrics, run, torchrun, write_script

from rlvr.models import build_tiny_model


@pytest.mark.slow
def test_two_processes_match_one_process_step_by_step(tmp_path) -> None:
    model = build_tiny_model(tmp_path / "tiny", preset="tiny", seed=0)
    script = str(write_script(tmp_path))
    run(alone(script, str(model), str(tmp_path / "one"), str(tmp_path / "one.json")), tmp_path)
    run(torchrun(script, str(model), str(tmp_path / "two"), str(tmp_path / "two.json")), tmp_path)
    one = json.loads((tmp_path / "one.json").read_text())
    two = json.loads((tmp_path / "two.json").read_text())
    assert len(one) == len(two) == 3
    assert_same_metrics(one, two)
    assert (tmp_path / "two" / "checkpoints" / "step_000002" / "rng_rank1.pt").is_file()
    assert (tmp_path / "two" / "final" / "config.json").is_file()
