"""Tabular Q-learning: classic off-policy control for small discrete environments.

Algorithmic choices, all in `q_learning` below:

- **Behaviour policy** (what the agent does while learning): epsilon-greedy on the Q table.
  Epsilon decays linearly from `epsilon_start` to `epsilon_end` over the first
  `explore_fraction` of the episodes; ties between equal Q values are broken at random, so a
  fresh table explores instead of always trying action 0.
- **Target policy** (what is learnt): greedy on Q, through the ``max`` in the update. The two
  differ, which makes Q-learning *off-policy*: it learns the greedy policy's values from
  epsilon-greedy experience.
- **Update**: ``Q[s][a] += learning_rate * (r + discount * max(Q[s']) - Q[s][a])``. A step
  into a terminal state does not bootstrap (nothing follows it); a truncated step (a time
  limit) does, because the state it reached is not an end of the task.
- **Optimistic start** (`initial_q` > 0): untried actions look good, which drives systematic
  exploration of sparse-reward mazes.
- **Horizon** (optional): when an episode is cut after T steps and success within T is what
  counts, the best action depends on the steps left, so one stationary table cannot be
  optimal. With ``horizon=T`` the agent keeps a table per number of steps left,
  ``Q[k][s][a]`` for k = 1..T (``Q[0]`` = 0: no steps, no reward), acts with ``Q[T - t]`` at
  step t, and updates *every* k from each transition, ``Q[k][s][a] += lr * (r + discount *
  max(Q[k-1][s']) - Q[k][s][a])``: the dynamics are the same at every step, so one observed
  transition is a sample for all horizons (off-policy learning again). It converges to the
  finite-horizon optimum that `plan_horizon` computes.
- **Evaluation**: every `eval_every` episodes the greedy policy plays `eval_episodes` seeded
  episodes; the mean return is one point of the learning curve.

Works with any environment that has the Gymnasium API and discrete spaces
(``observation_space.n``, ``action_space.n``, ``reset(seed=...)``, ``step(action)``);
gymnasium itself is not imported. Every episode is reset with a seed derived from `seed` and
its index, so a run is reproducible and evaluations do not disturb training.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlvr.seeding import mix_seed

_EVAL_STREAM = 1
_TRAIN_STREAM = 0

PolicyFn = Callable[[int, int | None], int]
"""A policy as a function ``(state, steps_left) -> action`` (steps_left None: no horizon)."""


@dataclass
class QLearningConfig:
    episodes: int = 5_000
    """Training episodes."""
    learning_rate: float = 0.1
    """Step size alpha of the update at the first episode."""
    learning_rate_end: float | None = None
    """Step size at the last episode, reached linearly (None: constant `learning_rate`)."""
    discount: float = 0.99
    """Discount gamma of future rewards (1.0 is fine with a horizon)."""
    epsilon_start: float = 1.0
    """Exploration rate of the behaviour policy at the first episode."""
    epsilon_end: float = 0.05
    """Exploration rate once the decay is over."""
    explore_fraction: float = 0.5
    """Share of the episodes over which epsilon decays linearly."""
    initial_q: float = 0.0
    """Starting value of every Q entry (> 0: optimistic exploration)."""
    horizon: int | None = None
    """None: one stationary table. T: a table per number of steps left, episodes of T steps."""
    max_steps: int = 1_000
    """Cap on steps per episode, on top of the environment's own time limit (truncation)."""
    eval_every: int = 250
    """Episodes between evaluations of the greedy policy (0: never)."""
    eval_episodes: int = 200
    """Episodes per evaluation."""
    seed: int = 0
    """Seed of the exploration draws and of every episode's reset."""


@dataclass
class QLearningResult:
    q: list[list[list[float]]]
    """``q[k][state][action]``: k = steps left with a horizon, else a single table (k = 0)."""
    horizon: int | None = None
    episode_returns: list[float] = field(default_factory=list)
    """Return of each training episode (the behaviour policy's)."""
    curve: list[tuple[int, float]] = field(default_factory=list)
    """(episodes trained, mean return of the greedy policy) at each evaluation."""

    def table(self, steps_left: int | None = None) -> list[list[float]]:
        """The Q table used with `steps_left` steps left (the only one without a horizon)."""
        if self.horizon is None:
            return self.q[0]
        if steps_left is None or not 1 <= steps_left <= self.horizon:
            raise ValueError(f"steps_left must be in 1..{self.horizon}, got {steps_left}")
        return self.q[steps_left]

    def act(self, state: int, steps_left: int | None = None) -> int:
        """The target policy: the best action (lowest index among ties)."""
        row = self.table(steps_left)[state]
        return max(range(len(row)), key=row.__getitem__)

    def greedy_policy(self, steps_left: int | None = None) -> list[int]:
        """The greedy action of every state, with `steps_left` steps left."""
        return [self.act(s, steps_left) for s in range(len(self.q[0]))]


def epsilon_at(config: QLearningConfig, episode: int) -> float:
    """Exploration rate of `episode`.

    >>> cfg = QLearningConfig(episodes=100, epsilon_start=1.0, epsilon_end=0.0, explore_fraction=0.5)
    >>> [epsilon_at(cfg, e) for e in (0, 25, 50, 99)]
    [1.0, 0.5, 0.0, 0.0]
    """
    decay_episodes = max(1, round(config.episodes * config.explore_fraction))
    frac = min(1.0, episode / decay_episodes)
    return config.epsilon_start + frac * (config.epsilon_end - config.epsilon_start)


def _greedy(row: list[float], rng: random.Random) -> int:
    best = max(row)
    ties = [a for a, v in enumerate(row) if v == best]
    return ties[0] if len(ties) == 1 else rng.choice(ties)


def q_learning(env: Any, config: QLearningConfig | None = None) -> QLearningResult:
    """Learn a Q table for `env` (Gymnasium API, discrete spaces); see the module docstring."""
    cfg = config or QLearningConfig()
    horizon = cfg.horizon
    if horizon is not None and horizon < 1:
        raise ValueError(f"horizon must be >= 1 or None, got {horizon}")
    n_states, n_actions = int(env.observation_space.n), int(env.action_space.n)
    levels = 1 if horizon is None else horizon + 1
    q = [[[float(cfg.initial_q)] * n_actions for _ in range(n_states)] for _ in range(levels)]
    if horizon is not None:
        q[0] = [[0.0] * n_actions for _ in range(n_states)]
    result = QLearningResult(q, horizon)
    rng = random.Random(cfg.seed)
    alpha, gamma = cfg.learning_rate, cfg.discount
    steps_cap = cfg.max_steps if horizon is None else min(cfg.max_steps, horizon)
    for episode in range(cfg.episodes):
        eps = epsilon_at(cfg, episode)
        if cfg.learning_rate_end is not None:
            frac = episode / max(1, cfg.episodes - 1)
            alpha = cfg.learning_rate + frac * (cfg.learning_rate_end - cfg.learning_rate)
        obs, _ = env.reset(seed=mix_seed(cfg.seed, _TRAIN_STREAM, episode))
        s, total = int(obs), 0.0
        for t in range(steps_cap):
            row = q[0 if horizon is None else horizon - t][s]
            a = rng.randrange(n_actions) if rng.random() < eps else _greedy(row, rng)
            obs, reward, terminated, truncated, _ = env.step(a)
            s_next, r = int(obs), float(reward)
            total += r
            if horizon is None:
                target = r if terminated else r + gamma * max(q[0][s_next])
                row[a] += alpha * (target - row[a])
            else:  # one transition teaches every horizon
                for k in range(1, levels):
                    entry = q[k][s]
                    target = r if terminated else r + gamma * max(q[k - 1][s_next])
                    entry[a] += alpha * (target - entry[a])
            s = s_next
            if terminated or truncated:
                break
        result.episode_returns.append(total)
        if cfg.eval_every and (episode + 1) % cfg.eval_every == 0:
            mean = evaluate(env, result.act, cfg.eval_episodes, seed=cfg.seed, horizon=horizon, max_steps=steps_cap)
            result.curve.append((episode + 1, mean))
    return result


def evaluate(
    env: Any,
    policy: PolicyFn | Sequence[int],
    episodes: int,
    *,
    seed: int = 0,
    horizon: int | None = None,
    max_steps: int = 1_000,
) -> float:
    """Mean return of a deterministic policy over seeded episodes.

    `policy` is a list (state -> action) or a function ``(state, steps_left) -> action``;
    with a `horizon`, episodes last at most that many steps and steps_left counts down from it.
    """
    act = policy if callable(policy) else (lambda s, _k: policy[s])
    cap = max_steps if horizon is None else min(max_steps, horizon)
    total = 0.0
    for i in range(episodes):
        obs, _ = env.reset(seed=mix_seed(seed, _EVAL_STREAM, i))
        for t in range(cap):
            action = act(int(obs), None if horizon is None else horizon - t)
            obs, reward, terminated, truncated, _ = env.step(action)
            total += float(reward)
            if terminated or truncated:
                break
    return total / episodes


def moving_average(values: Sequence[float], window: int) -> list[float]:
    """Mean of the last `window` values at each point (fewer at the start).

    >>> moving_average([0, 1, 1, 0], 2)
    [0.0, 0.5, 1.0, 0.5]
    """
    out, acc = [], 0.0
    for i, v in enumerate(values):
        acc += v
        if i >= window:
            acc -= values[i - window]
        out.append(acc / min(i + 1, window))
    return out


def plot_learning_curve(
    result: QLearningResult,
    path: str | Path,
    *,
    optimum: float | None = None,
    window: int = 100,
    title: str = "Q-learning",
    ylabel: str = "return",
) -> Path:
    """Write a PNG: behaviour returns (moving mean), greedy evaluations, and the optimum line."""
    try:
        from matplotlib.figure import Figure
    except ImportError:
        from rlvr.errors import UsageError

        raise UsageError("plotting needs matplotlib: pip install 'rlvr[plot]'") from None
    fig = Figure(figsize=(7, 4), layout="constrained")
    ax = fig.subplots()
    episodes = range(1, len(result.episode_returns) + 1)
    ax.plot(
        episodes,
        moving_average(result.episode_returns, window),
        color="tab:blue",
        alpha=0.7,
        label=f"behaviour policy (epsilon-greedy), mean of last {window}",
    )
    if result.curve:
        xs, ys = zip(*result.curve)
        ax.plot(xs, ys, color="tab:orange", marker=".", label="target policy (greedy), evaluated")
    if optimum is not None:
        ax.axhline(optimum, color="black", linestyle="--", label=f"optimum (value iteration) {optimum:.3f}")
    ax.set(xlabel="training episode", ylabel=ylabel, title=title)
    ax.legend(loc="lower right", fontsize="small")
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    return out
