"""Planning with a known model: value iteration, finite-horizon planning, exact policy evaluation.

A tabular model is ``P[state][action] = [(prob, next_state, reward, terminated), ...]``: the
probabilities of one (state, action) sum to 1, and ``terminated`` marks a transition into a
terminal state (no value flows back from it). With reward 1 for reaching a goal and 0
otherwise, the undiscounted value of a state is the probability of reaching the goal from it,
which is how the ice maze computes its optimal success rate. Gymnasium's toy-text envs expose
the same table as ``env.unwrapped.P`` (nested dicts); it is accepted as is.

Three tools:

- `value_iteration`: the optimal values of the infinite-horizon discounted problem, and a
  greedy stationary policy (use ``discount < 1``: with ``discount = 1`` ties between "make
  progress" and "bump into a wall" can leave a greedy policy walking in place forever);
- `plan_horizon`: the exact optimum when an episode is cut after ``horizon`` steps (the
  truncation of a Gym time limit or of an LLM environment's ``max_turns``); the best action
  then depends on the steps left;
- `evaluate_policy`: the exact expected return of a stationary policy within a horizon, so a
  learnt policy can be compared with the optimum without sampling noise.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

Transition = tuple[float, int, float, bool]
Table = Sequence[Sequence[Sequence[Transition]]]
Model = Table | Mapping[int, Mapping[int, Sequence[Transition]]]

_TIE = 1e-9


def as_table(model: Model) -> list[list[list[Transition]]]:
    """The model as nested lists (Gymnasium's dict form converted)."""
    table: Any = model
    rows = [table[s] for s in range(len(table))]
    return [[list(row[a]) for a in range(len(row))] for row in rows]


def greedy(row: Sequence[float]) -> int:
    """The best action of a row of action values (the lowest index among ties).

    >>> greedy([0.5, 1.0, 1.0 - 1e-12])
    1
    """
    best = max(row)
    return next(a for a, v in enumerate(row) if v > best - _TIE)


def _q_values(model: Table, values: Sequence[float], discount: float) -> list[list[float]]:
    return [[_backup(outcomes, values, discount) for outcomes in row] for row in model]


def _backup(outcomes: Sequence[Transition], values: Sequence[float], discount: float) -> float:
    """Expected reward plus discounted value of what follows (nothing after a terminal step)."""
    return sum(p * (r + (0.0 if done else discount * values[t])) for p, t, r, done in outcomes)


@dataclass
class ValueIterationResult:
    values: list[float]
    """Optimal value of each state."""
    q: list[list[float]]
    """Optimal action value of each (state, action)."""
    policy: list[int]
    """A greedy action for each state (lowest index among ties)."""
    iterations: int


def value_iteration(
    model: Model, *, discount: float = 0.99, tol: float = 1e-10, max_iterations: int = 100_000
) -> ValueIterationResult:
    """Bellman optimality backups until values move less than `tol`.

    >>> chain = [[[(1.0, 1, 0.0, False)]], [[(1.0, 2, 1.0, True)]], [[(1.0, 2, 0.0, True)]]]
    >>> value_iteration(chain, discount=0.5).values
    [0.5, 1.0, 0.0]
    """
    if not 0.0 <= discount <= 1.0:
        raise ValueError(f"discount must be in [0, 1], got {discount}")
    model = as_table(model)
    values = [0.0] * len(model)
    for iteration in range(1, max_iterations + 1):
        q = _q_values(model, values, discount)
        new = [max(row) for row in q]
        delta = max(abs(a - b) for a, b in zip(new, values))
        values = new
        if delta < tol:
            break
    q = _q_values(model, values, discount)
    policy = [greedy(row) for row in q]
    return ValueIterationResult(values, q, policy, iteration)


@dataclass
class HorizonPlan:
    """Optimal values and actions when `k` steps are left, for k = 0..horizon."""

    values: list[list[float]]
    """``values[k][state]``: best expected return with k steps left."""
    q: list[list[list[float]]]
    """``q[k][state][action]``: return of `action` now, then playing optimally (k >= 1)."""
    _fastest: dict[tuple[int, int], int] = field(default_factory=dict, repr=False)

    @property
    def horizon(self) -> int:
        return len(self.values) - 1

    def value(self, state: int, steps_left: int | None = None) -> float:
        return self.values[self._k(steps_left)][state]

    def action(self, state: int, steps_left: int | None = None) -> int:
        """An optimal action with `steps_left` steps left (default: the full horizon).

        Among equally good actions it picks the one that secures that value soonest, so on a
        deterministic map the plan walks a shortest path.
        """
        k = max(self._k(steps_left), 1)
        key = (k, state)
        if key not in self._fastest:
            best = self.values[k][state]
            tied = [a for a, v in enumerate(self.q[k][state]) if v >= best - _TIE]
            soonest = {a: next(j for j in range(1, k + 1) if self.q[j][state][a] >= best - _TIE) for a in tied}
            self._fastest[key] = min(tied, key=lambda a: (soonest[a], a))
        return self._fastest[key]

    def _k(self, steps_left: int | None) -> int:
        if steps_left is None:
            return self.horizon
        if steps_left < 0:
            raise ValueError(f"steps_left must be >= 0, got {steps_left}")
        return min(steps_left, self.horizon)


def plan_horizon(model: Model, horizon: int, *, discount: float = 1.0) -> HorizonPlan:
    """Backward induction over `horizon` steps: the exact finite-horizon optimum.

    >>> chain = [[[(1.0, 1, 0.0, False)]], [[(1.0, 2, 1.0, True)]], [[(1.0, 2, 0.0, True)]]]
    >>> [plan_horizon(chain, k).value(0) for k in (1, 2)]
    [0.0, 1.0]
    """
    if horizon < 1:
        raise ValueError(f"horizon must be >= 1, got {horizon}")
    model = as_table(model)
    values = [[0.0] * len(model)]
    qs: list[list[list[float]]] = [[[0.0] * len(row) for row in model]]
    for _ in range(horizon):
        q = _q_values(model, values[-1], discount)
        qs.append(q)
        values.append([max(row) for row in q])
    return HorizonPlan(values, qs)


def evaluate_policy(
    model: Model,
    policy: Sequence[int] | Callable[[int, int], int],
    horizon: int,
    *,
    discount: float = 1.0,
) -> list[float]:
    """Exact expected return of `policy` from each state within `horizon` steps.

    `policy` is stationary (a list: state -> action) or depends on the steps left (a function
    ``(state, steps_left) -> action``).

    >>> chain = [[[(1.0, 1, 0.0, False)]], [[(1.0, 2, 1.0, True)]], [[(1.0, 2, 0.0, True)]]]
    >>> evaluate_policy(chain, [0, 0, 0], horizon=2)
    [1.0, 1.0, 0.0]
    """
    act = policy if callable(policy) else (lambda s, _k: policy[s])
    model = as_table(model)
    values = [0.0] * len(model)
    for k in range(1, horizon + 1):
        values = [_backup(model[s][act(s, k)], values, discount) for s in range(len(model))]
    return values
