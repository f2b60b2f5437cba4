"""rlvr.classic: value iteration against hand-computed numbers, Q-learning against value
iteration, and the learning-curve plot."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from rlvr.classic import (
    QLearningConfig,
    evaluate,
    evaluate_policy,
    plan_horizon,
    plot_learning_curve,
    q_learning,
    value_iteration,
)

# A corridor 0 - 1 - 2 - 3(goal). Actions: 0 = left (stays at 0), 1 = right. Reward 1 on entering 3.
CORRIDOR = [
    [[(1.0, 0, 0.0, False)], [(1.0, 1, 0.0, False)]],
    [[(1.0, 0, 0.0, False)], [(1.0, 2, 0.0, False)]],
    [[(1.0, 1, 0.0, False)], [(1.0, 3, 1.0, True)]],
    [[(1.0, 3, 0.0, True)], [(1.0, 3, 0.0, True)]],
]
# A gamble: from 0, "safe" (0) reaches the goal in two steps via 1; "risky" (1) reaches it now
# with probability 0.6, else falls into the hole 2.
GAMBLE = [
    [[(1.0, 1, 0.0, False)], [(0.6, 3, 1.0, True), (0.4, 2, 0.0, True)]],
    [[(1.0, 3, 1.0, True)], [(1.0, 3, 1.0, True)]],
    [[(1.0, 2, 0.0, True)], [(1.0, 2, 0.0, True)]],
    [[(1.0, 3, 0.0, True)], [(1.0, 3, 0.0, True)]],
]


class TableEnv:
    """A Gymnasium-API env driven by a transition table (no gymnasium needed)."""

    def __init__(self, model, start: int = 0, max_steps: int = 50) -> None:
        import random

        self.model, self.start, self.max_steps = model, start, max_steps
        self.observation_space = SimpleNamespace(n=len(model))
        self.action_space = SimpleNamespace(n=len(model[0]))
        self.rng = random.Random(0)

    def reset(self, seed: int | None = None):
        import random

        if seed is not None:
            self.rng = random.Random(seed)
        self.state, self.steps = self.start, 0
        return self.state, {}

    def step(self, action: int):
        u, acc = self.rng.random(), 0.0
        for p, t, r, done in self.model[self.state][action]:
            acc += p
            if u < acc:
                break
        self.state, self.steps = t, self.steps + 1
        return t, r, done, not done and self.steps >= self.max_steps, {}


def test_value_iteration_matches_hand_computed_values() -> None:
    vi = value_iteration(CORRIDOR, discount=0.9)
    assert vi.values[:3] == pytest.approx([0.81, 0.9, 1.0])
    assert vi.q[0] == pytest.approx([0.9 * 0.81, 0.81])
    assert vi.policy[:3] == [1, 1, 1]


def test_discount_decides_the_gamble() -> None:
    # safe is worth discount * 1, risky 0.6: safe wins above a discount of 0.6
    assert value_iteration(GAMBLE, discount=0.9).policy[0] == 0
    assert value_iteration(GAMBLE, discount=0.5).policy[0] == 1


def test_finite_horizon_plan_depends_on_the_steps_left() -> None:
    plan = plan_horizon(GAMBLE, horizon=2)
    assert plan.value(0, steps_left=1) == pytest.approx(0.6) and plan.action(0, steps_left=1) == 1
    assert plan.value(0, steps_left=2) == pytest.approx(1.0) and plan.action(0, steps_left=2) == 0
    corridor = plan_horizon(CORRIDOR, horizon=5)
    assert [corridor.value(0, k) for k in range(5)] == [0.0, 0.0, 0.0, 1.0, 1.0]
    assert corridor.action(0, 5) == 1  # among equally sure actions, the one that gets there first


def test_evaluate_policy_is_exact() -> None:
    assert evaluate_policy(GAMBLE, [1, 0, 0, 0], horizon=3)[0] == pytest.approx(0.6)
    assert evaluate_policy(CORRIDOR, [1, 1, 1, 1], horizon=2) == pytest.approx([0.0, 1.0, 1.0, 0.0])
    assert evaluate_policy(GAMBLE, lambda s, k: 1 if k == 1 else 0, horizon=1)[0] == pytest.approx(0.6)


def test_q_learning_converges_to_the_optimal_q_on_the_corridor() -> None:
    env = TableEnv(CORRIDOR)
    result = q_learning(env, QLearningConfig(episodes=800, discount=0.9, learning_rate=0.5, eval_every=0))
    optimal = value_iteration(CORRIDOR, discount=0.9).q
    for state in range(3):
        assert result.q[0][state] == pytest.approx(optimal[state], abs=1e-3)
    assert result.greedy_policy()[:3] == [1, 1, 1]


def test_q_learning_learns_the_gamble_off_policy() -> None:
    env = TableEnv(GAMBLE)
    cfg = QLearningConfig(
        episodes=5000,
        discount=0.9,
        learning_rate=0.05,
        learning_rate_end=0.005,
        epsilon_start=0.5,
        epsilon_end=0.5,
        eval_every=0,
    )  # half the moves are random
    result = q_learning(env, cfg)
    assert result.q[0][0] == pytest.approx([0.9, 0.6], abs=0.03)
    assert result.act(0) == 0
    # behaviour was epsilon-greedy (it took the gamble sometimes), the learnt target is greedy
    assert min(result.episode_returns) == 0.0 and evaluate(env, result.greedy_policy(), 50) == 1.0


def test_horizon_agent_learns_the_time_dependent_optimum() -> None:
    env = TableEnv(GAMBLE, max_steps=2)
    cfg = QLearningConfig(
        episodes=5000,
        horizon=2,
        discount=1.0,
        learning_rate=0.05,
        learning_rate_end=0.005,
        epsilon_start=0.5,
        epsilon_end=0.5,
        eval_every=0,
    )
    result = q_learning(env, cfg)
    assert result.act(0, steps_left=1) == 1 and result.act(0, steps_left=2) == 0
    assert result.q[1][0] == pytest.approx([0.0, 0.6], abs=0.05)


def test_runs_are_reproducible() -> None:
    cfg = QLearningConfig(episodes=200, eval_every=50, eval_episodes=20, seed=3)
    a, b = q_learning(TableEnv(GAMBLE), cfg), q_learning(TableEnv(GAMBLE), cfg)
    assert a.q == b.q and a.episode_returns == b.episode_returns
    assert a.curve == b.curve and len(a.curve) == 4


def test_q_learning_on_gymnasium_frozen_lake_matches_value_iteration() -> None:
    gymnasium = pytest.importorskip("gymnasium")
    env = gymnasium.make("FrozenLake-v1", is_slippery=False)
    result = q_learning(env, QLearningConfig(episodes=1000, initial_q=1.0, eval_every=0))
    assert evaluate(env, result.greedy_policy(), 10) == 1.0
    slippery = gymnasium.make("FrozenLake-v1", is_slippery=True)
    model = slippery.unwrapped.P  # Gymnasium's toy-text envs expose the same (p, s', r, done) table
    optimal = value_iteration(model, discount=0.95)
    cfg = QLearningConfig(episodes=6000, discount=0.95, learning_rate=0.2, learning_rate_end=0.01, eval_every=0)
    learnt = evaluate_policy(model, q_learning(slippery, cfg).greedy_policy(), 1000, discount=0.95)
    assert learnt[0] == pytest.approx(optimal.values[0], abs=0.01)


def test_plot_learning_curve_writes_a_png(tmp_path) -> None:
    pytest.importorskip("matplotlib")
    result = q_learning(TableEnv(CORRIDOR), QLearningConfig(episodes=100, eval_every=20, eval_episodes=5))
    path = plot_learning_curve(result, tmp_path / "plots" / "curve.png", optimum=1.0, window=10)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and path.stat().st_size > 5000
