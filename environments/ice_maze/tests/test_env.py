"""The LLM environment: dataset, episode rules, reference players through the engine."""

from __future__ import annotations

import asyncio
import json
import statistics

import pytest
from ice_maze import load_environment, optimal_success
from ice_maze.env import read_move
from ice_maze.rewards import maze_of

from rlvr import Policy, Rollout
from rlvr.engine import run_rollouts
from rlvr.registry import load_environment as load_by_name


def play(env, policy_name: str, tasks, rollouts: int = 1) -> list[Rollout]:
    client = env.policies()[policy_name]()
    return asyncio.run(run_rollouts(env, client, tasks, rollouts_per_task=rollouts))


def test_dataset_is_a_pure_function_of_the_arguments() -> None:
    a, b = load_environment(seed=3, slippery=True), load_environment(seed=3, slippery=True)
    assert [t.to_dict() for t in a.tasks("train")] == [t.to_dict() for t in b.tasks("train")]
    assert [t.to_dict() for t in a.tasks("eval")] == [t.to_dict() for t in b.tasks("eval")]
    c = load_environment(seed=4, slippery=True)
    assert [t.question for t in a.tasks()] != [t.question for t in c.tasks()]
    train = {tuple(t.info["rows"]) for t in a.tasks("train")}
    assert {t.info["size"] for t in a.tasks("train")} == {4, 5, 6}
    assert all(t.info["shortest_path"] for t in a.tasks("train"))
    assert not train & {tuple(t.info["rows"]) for t in a.tasks("eval")}


def test_registry_finds_the_environment() -> None:
    env = load_by_name("ice_maze", size=5, eval_tasks=3)
    assert env.name == "ice_maze" and len(env.tasks()) == 3
    assert all(t.info["size"] == 5 for t in env.tasks())


@pytest.mark.parametrize(
    "args",
    [
        {"size": 9},
        {"min_size": 6, "max_size": 5},
        {"slippery": True, "slip_prob": 0.0},
        {"max_turns": 0},
        {"num_tasks": 0},
    ],
)
def test_bad_arguments_are_rejected(args: dict) -> None:
    with pytest.raises(ValueError):
        load_environment(**args)


def test_optimal_player_solves_every_deterministic_maze_by_a_shortest_path() -> None:
    env = load_environment(eval_tasks=40, min_size=4, max_size=8)
    rollouts = play(env, "optimal", env.tasks(), rollouts=2)
    assert len(rollouts) == 80 and all(r.error is None for r in rollouts)
    assert all(r.rewards["goal_reward"] == 1.0 and r.stop_reason == "reached_goal" for r in rollouts)
    assert all(r.rewards["step_efficiency"] == 1.0 and r.rewards["format_reward"] == 1.0 for r in rollouts)
    assert all(r.reward == pytest.approx(1.2) and not r.truncated for r in rollouts)
    summary = env.summarize(rollouts)
    assert summary["goal %"] == summary["optimal goal %"] == 100.0


def test_optimal_player_scores_the_optimum_on_slippery_ice() -> None:
    env = load_environment(eval_tasks=30, slippery=True, slip_prob=0.2, seed=1)
    rollouts = play(env, "optimal", env.tasks(), rollouts=20)
    assert all(r.error is None for r in rollouts)
    achieved = statistics.fmean(r.rewards["goal_reward"] for r in rollouts)
    optimum = statistics.fmean(optimal_success(maze_of(t.info), t.info["max_moves"]) for t in env.tasks())
    # 600 episodes: the standard error of `achieved` is under 0.015; 0.045 is three of them.
    assert achieved == pytest.approx(optimum, abs=0.045)
    assert 0.5 < optimum < 1.0
    random_rollouts = play(env, "random", env.tasks(), rollouts=20)
    random_goal = statistics.fmean(r.rewards["goal_reward"] for r in random_rollouts)
    assert random_goal < optimum - 0.5


def test_slips_are_seeded_per_rollout() -> None:
    env = load_environment(eval_tasks=4, slippery=True, slip_prob=0.5, size=6)
    first, again = play(env, "random", env.tasks(), 4), play(env, "random", env.tasks(), 4)
    assert [r.to_dict()["turns"] for r in first] == [r.to_dict()["turns"] for r in again]
    texts = {tuple(m["content"] for m in r.completion) for r in first}
    assert len(texts) > len(env.tasks())  # a group's rollouts meet different ice


def test_invalid_moves_waste_the_turn_and_truncate_at_the_move_limit() -> None:
    env = load_environment(eval_tasks=1, size=4, max_turns=3)
    rollout = asyncio.run(run_rollouts(env, Policy(lambda m, rng: "north!", name="bad"), env.tasks()))[0]
    assert rollout.stop_reason == "out_of_moves" and rollout.truncated and len(rollout.turns) == 3
    assert rollout.rewards["invalid_move_rate"] == 1.0 and rollout.reward == 0.0
    last = rollout.turns[-1].env_messages[0]["content"]
    assert "Invalid move" in last and "Moves left: 0" in last and "out of moves" in last


def test_walking_into_a_hole_terminates() -> None:
    env = load_environment(eval_tasks=20, size=5, hole_prob=0.4)
    task = next(t for t in env.tasks() if "H" in "".join(t.info["rows"]))
    maze = maze_of(task.info)
    hole = "".join(maze.rows).index("H")
    path = _path(maze, maze.start, hole)
    replies = iter(f"<think>to the hole</think><move>{m}</move>" for m in path)
    rollout = asyncio.run(run_rollouts(env, Policy(lambda m, rng: next(replies), name="script"), [task]))[0]
    assert rollout.stop_reason == "fell_in_hole" and not rollout.truncated
    assert rollout.rewards["fell_in_hole"] == 1.0 and rollout.rewards["goal_reward"] == 0.0
    assert rollout.rewards["format_reward"] == 1.0
    assert "fell into a hole" in rollout.turns[-1].env_messages[0]["content"]


def _path(maze, start: int, target: int) -> list[str]:
    """Moves from start to target through safe cells (breadth first), the target may be a hole."""
    from ice_maze.maze import MOVES

    previous = {start: None}
    frontier = [start]
    while target not in previous:
        nxt = []
        for s in frontier:
            for a, name in enumerate(MOVES):
                t = maze.move(s, a)
                if t not in previous and (t == target or maze.cell(t) in "S."):
                    previous[t] = (s, name)
                    nxt.append(t)
        assert nxt, "target unreachable"
        frontier = nxt
    moves, s = [], target
    while previous[s] is not None:
        s, name = previous[s]
        moves.append(name)
    return moves[::-1]


def test_read_move() -> None:
    assert read_move("<move>UP</move>") == (0, None)
    assert read_move("up")[0] is None
    assert read_move("<move>up</move><move>down</move>")[0] == 1  # the last move counts


def test_rollouts_round_trip_through_json() -> None:
    env = load_environment(eval_tasks=2, slippery=True)
    for r in play(env, "optimal", env.tasks()):
        assert Rollout.from_dict(json.loads(json.dumps(r.to_dict()))).to_dict() == r.to_dict()


def test_check_env_passes() -> None:
    from rlvr import check_env

    env = load_environment(eval_tasks=3, slippery=True)
    check_env(env)
    check_env(env, client=env.policies()["random"]())
