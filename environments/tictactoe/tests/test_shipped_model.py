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


@pytest.mark.heavy
def test_the_shipped_model_plays_well_on_cpu():
    """24 greedy games against each opponent, played together (a CPU decode step costs about
    the same for 20 rows as for 50, so the two sets share their steps)."""
    pytest.importorskip("torch")
    from rlvr.clients.local import LocalModel

    model = LocalModel(str(env_module.SHIPPED_MODEL), device="cpu", max_batch_size=48)
    sampling = SamplingArgs(temperature=0.0, max_tokens=48)

    async def both():
        envs = [load_environment(opponent=o, eval_tasks=24) for o in ("optimal", "random")]
        out = await asyncio.gather(
            *(run_rollouts(env, model, env.tasks("eval"), concurrency=24, sampling=sampling) for env in envs)
        )
        await model.aclose()
        return out

    for opponent, rollouts in zip(("optimal", "random"), asyncio.run(both())):
        assert len(rollouts) == 24 and all(r.error is None for r in rollouts)
        assert all(r.rewards["format_reward"] == 1.0 for r in rollouts)
        assert sum(r.rewards["invalid_moves"] > 0 for r in rollouts) == 0, opponent
        losses = sum(r.rewards["loss"] + r.rewards["timeout"] for r in rollouts)
        assert losses == 0, opponent  # the card, exact: no line of play beats it
        if opponent == "random":
            assert sum(r.rewards["win"] for r in rollouts) >= 19  # the card, exact: 95.4% wins
