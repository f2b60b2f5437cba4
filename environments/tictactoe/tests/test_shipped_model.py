"""The trained model in models/tictactoe-tiny: the default model, and it plays as its card says."""

from __future__ import annotations

import asyncio

import pytest
from rlvr_tictactoe import env as env_module
from rlvr_tictactoe import load_environment

from rlvr.engine import run_rollouts
from rlvr.types import SamplingArgs


def test_the_default_model_is_the_shipped_one_unless_overridden(monkeypatch, tmp_path):
    monkeypatch.delenv(env_module.MODEL_VAR, raising=False)
    assert (env_module.SHIPPED_MODEL / "config.json").is_file()  # this is a source checkout
    assert load_environment().default_model() == str(env_module.SHIPPED_MODEL)
    monkeypatch.setenv(env_module.MODEL_VAR, "policy:teacher")
    assert load_environment().default_model() == "policy:teacher"
    monkeypatch.delenv(env_module.MODEL_VAR)
    monkeypatch.setattr(env_module, "SHIPPED_MODEL", tmp_path / "absent")  # e.g. a wheel install
    assert load_environment().default_model() == "policy:optimal"


@pytest.mark.parametrize("opponent", ["optimal", "random"])
def test_the_shipped_model_plays_well_on_cpu(opponent):
    pytest.importorskip("torch")
    from rlvr.clients.local import LocalModel

    env = load_environment(opponent=opponent, eval_examples=24)
    model = LocalModel(str(env_module.SHIPPED_MODEL), device="cpu", max_batch_size=24)
    rollouts = asyncio.run(
        run_rollouts(env, model, env.tasks("eval"), rollouts_per_task=1, concurrency=24,
                     sampling=SamplingArgs(temperature=0.0, max_tokens=48))
    )
    assert len(rollouts) == 24 and all(r.error is None for r in rollouts)
    assert all(r.rewards["format_reward"] == 1.0 for r in rollouts)
    assert sum(r.rewards["invalid_moves"] > 0 for r in rollouts) <= 1
    losses = sum(r.rewards["loss"] + r.rewards["timeout"] for r in rollouts)
    wins = sum(r.rewards["win"] for r in rollouts)
    assert losses <= 2  # the card: 2% losses to the optimal player, none to the random one
    if opponent == "random":
        assert wins >= 18  # the card: 91% wins
    asyncio.run(model.aclose())
