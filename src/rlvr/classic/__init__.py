"""Classic tabular RL beside LLM RL: Q-learning and value iteration for small discrete worlds.

Used with the ice maze (``environments/ice_maze``) to show the same task learnt by a table and
played by a language model; see ``docs/classic_rl.md``. Needs nothing beyond the core install
(matplotlib, for `plot_learning_curve` only, comes with the ``plot`` extra).
"""

from rlvr.classic.qlearning import (
    QLearningConfig,
    QLearningResult,
    epsilon_at,
    evaluate,
    plot_learning_curve,
    q_learning,
)
from rlvr.classic.value_iteration import (
    HorizonPlan,
    ValueIterationResult,
    evaluate_policy,
    plan_horizon,
    value_iteration,
)

__all__ = [
    "HorizonPlan",
    "QLearningConfig",
    "QLearningResult",
    "ValueIterationResult",
    "epsilon_at",
    "evaluate",
    "evaluate_policy",
    "plan_horizon",
    "plot_learning_curve",
    "q_learning",
    "value_iteration",
]
