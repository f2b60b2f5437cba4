"""The ice maze as a Gymnasium env: Gymnasium's own checker, the reset/step contract, and the
round trip back into rlvr through `GymEnv`."""

from __future__ import annotations

import asyncio

import pytest

gymnasium = pytest.importorskip("gymnasium")

from gymnasium.utils.env_checker import check_env
from ice_maze.gym import ENV_ID, IceMazeGymEnv
from ice_maze.maze import MOVES, Maze

from rlvr.engine import run_rollouts
from rlvr.envs.gym import GymEnv


@pytest.mark.parametrize("slippery", [False, True])
def test_gymnasium_env_checker_passes(slippery: bool) -> None:
    env = gymnasium.make(f"ice_maze.gym:{ENV_ID}", size=6, map_seed=2, slippery=slippery, render_mode="ansi")
    check_env(env.unwrapped)  # the checker wants the bare env (made by id, so that it has a spec)


def test_registered_and_made_by_id() -> None:
    env = gymnasium.make(f"ice_maze.gym:{ENV_ID}", size=5, map_seed=1, slippery=True)
    obs, _ = env.reset(seed=0)
    assert obs == env.unwrapped.maze.start
    assert ENV_ID in gymnasium.registry
    env.close()


def test_terminated_on_goal_and_hole_truncated_at_max_steps() -> None:
    up, down, right = (MOVES.index(m) for m in ("up", "down", "right"))
    env = IceMazeGymEnv(maze=Maze(("S.", "HG")), max_steps=3)
    env.reset(seed=0)
    assert env.step(right) == (1, 0.0, False, False, {"steps": 1, "slipped": False})
    assert env.step(down)[1:4] == (1.0, True, False)
    env.reset()
    assert env.step(down)[1:4] == (0.0, True, False)
    env.reset()
    results = [env.step(up) for _ in range(3)]
    assert [r[3] for r in results] == [False, False, True] and not any(r[2] for r in results)


def test_same_seed_same_episode_on_slippery_ice() -> None:
    env = IceMazeGymEnv(size=6, map_seed=4, slippery=True, slip_prob=0.5)

    def episode(seed: int) -> list[int]:
        env.reset(seed=seed)
        return [env.step(a % 4)[0] for a in range(10) if not env.maze.is_terminal(env.position)]

    assert episode(7) == episode(7)
    assert len({tuple(episode(s)) for s in range(10)}) > 1


def test_ice_maze_gym_env_plays_through_gym_env_and_the_engine() -> None:
    env = GymEnv(lambda: IceMazeGymEnv(size=4, map_seed=1, render_mode="ansi"), action_names=MOVES, num_tasks=3)
    rollouts = asyncio.run(run_rollouts(env, env.policies()["random"](), env.tasks(), rollouts_per_task=4))
    assert all(r.error is None for r in rollouts)
    assert {r.stop_reason for r in rollouts} <= {"terminated", "truncated"}
    for r in rollouts:
        assert r.reward == r.rewards["episode_return"] and r.reward in (0.0, 1.0)
        assert (r.stop_reason == "truncated") == r.truncated
    assert "@" in env.tasks()[0].question and "up, down, left, right" in env.tasks()[0].question
