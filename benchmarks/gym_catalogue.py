"""Every installed Gymnasium id through the bridge, with its defaults and the `random` player.

Run: python benchmarks/gym_catalogue.py [--episodes 3] [--out benchmarks/results/gym-catalogue.json]

For each id in ``gymnasium.registry``: ``gymnasium.make`` first (ids whose dependencies are
not installed, MuJoCo, Box2D, jax, shimmy, are counted apart with the reason); then
``load_environment(env_id, num_tasks=EPISODES)`` with its defaults and ``policy:random``, one
rollout a task. A row: the turn limit (the env's own or 100), whether the prompt names the
rules (toy-text and classic-control envs), the stop reasons, the mean return, and errors.

Prints one row an id and the totals; writes them as JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import statistics
import warnings
from pathlib import Path
from typing import Any

import gymnasium

from rlvr.engine import run_rollouts
from rlvr.envs.gym import load_environment
from rlvr.envs.gym.env import RULES


def one(env_id: str, episodes: int) -> dict[str, Any]:
    row: dict[str, Any] = {"id": env_id}
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            gymnasium.make(env_id).close()
    except Exception as exc:
        row["missing"] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:120]}"
        return row
    env = load_environment(env_id, num_tasks=episodes)
    row["max_turns"], row["described"] = env.max_turns, env.kind in RULES
    rollouts = asyncio.run(run_rollouts(env, env.policies()["random"](), env.tasks()))
    row["stops"] = dict(collections.Counter(r.stop_reason for r in rollouts))
    row["return"] = round(statistics.fmean(r.reward for r in rollouts), 3)
    row["turns"] = round(statistics.fmean(len(r.turns) for r in rollouts), 1)
    errors = [r.error for r in rollouts if r.error is not None]
    if errors:
        row["error"] = errors[0]
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--episodes", type=int, default=3)
    parser.add_argument("--out", default="benchmarks/results/gym-catalogue.json")
    args = parser.parse_args()
    rows = []
    for env_id in list(gymnasium.registry):
        try:
            row = one(env_id, args.episodes)
        except Exception as exc:
            row = {"id": env_id, "error": f"{type(exc).__name__}: {str(exc).strip()[:200]}"}
        rows.append(row)
        print(json.dumps(row), flush=True)
    played = [r for r in rows if "stops" in r]
    totals = {
        "ids": len(rows),
        "not_installed": sum("missing" in r for r in rows),
        "played": len(played),
        "with_errors": [r["id"] for r in rows if "error" in r],
        "described": [r["id"] for r in played if r["described"]],
    }
    print(json.dumps(totals, indent=1))
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps({"totals": totals, "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
