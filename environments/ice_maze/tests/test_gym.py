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


def test_the_gym_bridge_loads_a_third_party_id_by_importing_its_module() -> None:
    from rlvr.envs.gym import load_environment
    from rlvr.errors import UsageError

    env = load_environment(f"ice_maze.gym:{ENV_ID}", num_tasks=2, env_kwargs={"size": 4, "map_seed": 1})
    assert env.action_names is None and "@" in env.tasks()[0].question  # its ansi render, numbered actions
    rollouts = asyncio.run(run_rollouts(env, env.policies()["random"](), env.tasks(), rollouts_per_task=2))
    assert all(r.error is None and r.reward in (0.0, 1.0) for r in rollouts)
    with pytest.raises(UsageError, match="cannot import 'no_such_module' \\(from env_id 'no_such_module:X-v0'\\)"):
        load_environment("no_such_module:X-v0")
    with pytest.raises(UsageError, match="no Gymnasium env 'NoSuchMaze-v0'"):
        load_environment("ice_maze.gym:NoSuchMaze-v0")


def test_the_text_view_passes_gymnasiums_checker_and_the_optimal_player_wins_through_it() -> None:
    from ice_maze.gym import TEXT_ENV_ID

    env = gymnasium.make(f"ice_maze.gym:{TEXT_ENV_ID}", eval_tasks=5, render_mode="ansi")
    check_env(env.unwrapped)
    rlvr_env = env.unwrapped.env
    player = rlvr_env.policies()["optimal"]()
    for task in range(5):
        observation, info = env.reset(seed=task, options={"task": task})
        messages = info["messages"]  # the same text as `observation`, as chat messages
        assert info["task_id"] == f"eval-{task}" and "You are at row" in observation
        done, turns = False, 0
        while not done:
            reply = asyncio.run(player.chat(messages, rlvr_env.sampling)).text
            observation, reward, terminated, truncated, info = env.step(reply)
            messages += [{"role": "assistant", "content": reply}, {"role": "user", "content": observation}]
            done, turns = terminated or truncated, turns + 1
        shortest = rlvr_env.tasks()[task].info["shortest_path"]
        assert terminated and info["stop_reason"] == "reached_goal" and turns == shortest
        assert reward == pytest.approx(1.2) and info["rewards"]["goal_reward"] == 1.0  # goal + 0.2 format
    env.close()
