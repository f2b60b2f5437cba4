"""Tabular Q-learning reaches the value-iteration optimum on a fixed set of seeded ice mazes.

Deterministic ice: the classic stationary agent (one Q table, discount 0.99) must solve the
maze exactly, by a shortest path. Slippery ice (slip 0.2, episodes of size**2 moves): success
within the move limit is what counts, and its optimum depends on the moves left, so the agent
keeps a table per number of moves left (``horizon``); its greedy policy's exact success
probability must be within 0.02 of the finite-horizon value-iteration optimum, and the success
rate over 3000 seeded episodes within 0.045 (0.02 plus about three standard errors).
"""

from __future__ import annotations

import pytest

pytest.importorskip("gymnasium")

from ice_maze.gym import IceMazeGymEnv

from rlvr.classic import (
    QLearningConfig,
    evaluate,
    evaluate_policy,
    plan_horizon,
    q_learning,
    value_iteration,
)

DETERMINISTIC_MAPS = [(4, 0), (6, 1), (8, 2)]
SLIPPERY_MAPS = [(4, 1), (5, 0), (6, 0)]
EXACT_TOLERANCE = 0.02
SAMPLED_TOLERANCE = 0.045


@pytest.mark.parametrize(("size", "map_seed"), DETERMINISTIC_MAPS)
def test_q_learning_solves_deterministic_mazes_by_a_shortest_path(size: int, map_seed: int) -> None:
    env = IceMazeGymEnv(size=size, map_seed=map_seed)
    result = q_learning(env, QLearningConfig(episodes=1500, initial_q=1.0, eval_every=0))
    policy = result.greedy_policy()
    assert evaluate(env, policy, 5) == 1.0
    position, steps = env.maze.start, 0
    while position != env.maze.goal and steps < env.max_steps:
        position, steps = env.maze.move(position, policy[position]), steps + 1
    assert steps == env.maze.shortest_path()


@pytest.mark.parametrize(("size", "map_seed"), SLIPPERY_MAPS)
def test_q_learning_reaches_the_optimal_success_rate_on_slippery_mazes(size: int, map_seed: int) -> None:
    env = IceMazeGymEnv(size=size, map_seed=map_seed, slippery=True, slip_prob=0.2)
    model, horizon, start = env.maze.transitions(), env.max_steps, env.maze.start
    optimum = plan_horizon(model, horizon).value(start)
    config = QLearningConfig(
        episodes=6000,
        horizon=horizon,
        discount=1.0,
        learning_rate=0.3,
        learning_rate_end=0.01,
        initial_q=1.0,
        epsilon_end=0.2,
        explore_fraction=0.3,
        eval_every=0,
    )
    result = q_learning(env, config)
    exact = evaluate_policy(model, result.act, horizon)[start]
    sampled = evaluate(env, result.act, 3000, seed=123, horizon=horizon)
    assert exact == pytest.approx(optimum, abs=EXACT_TOLERANCE)
    assert sampled == pytest.approx(optimum, abs=SAMPLED_TOLERANCE)


def test_on_slippery_ice_the_clock_matters() -> None:
    """Why the horizon: the best stationary (discounted) policy falls far short of the optimum."""
    env = IceMazeGymEnv(size=4, map_seed=1, slippery=True, slip_prob=0.2)
    model, horizon, start = env.maze.transitions(), env.max_steps, env.maze.start
    stationary = value_iteration(model, discount=0.99).policy
    optimum = plan_horizon(model, horizon).value(start)
    assert evaluate_policy(model, stationary, horizon)[start] < optimum - 0.2
