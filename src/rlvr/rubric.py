"""Rubrics: weighted reward functions that score rollouts.

A reward function is a plain function, sync or async, returning a float. It asks for what it
needs by parameter name, from this closed set:

    prompt      the opening messages (system prompt included)
    completion  every message after the prompt
    answer      the task's reference answer (or None)
    info        the task's info dict
    task        the Task
    state       the environment's State (typed, env-specific fields included)
    parser      the environment's parser

An unknown name fails when the rubric is built, naming the available ones. Weight 0 makes a
function a logged metric that does not enter the total. A *group* reward function (declared
with `@group_reward`) sees the whole group at once and asks for the plural names (`prompts`,
`completions`, `answers`, `infos`, `tasks`, `states`, plus `parser`); it returns one float per
rollout.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from rlvr.errors import RubricError
from rlvr.types import State

RewardFn = Callable[..., float | Awaitable[float]]

ARGUMENTS = ("prompt", "completion", "answer", "info", "task", "state", "parser")
GROUP_ARGUMENTS = ("prompts", "completions", "answers", "infos", "tasks", "states", "parser")


def group_reward(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Declare `fn` a group reward function: it scores a whole group, returning a list."""
    fn.__rlvr_group__ = True  # type: ignore[attr-defined]
    return fn


def is_group_reward(fn: Callable[..., Any]) -> bool:
    return bool(getattr(fn, "__rlvr_group__", False))


def _wanted(fn: Callable[..., Any], allowed: Sequence[str]) -> tuple[list[str], bool]:
    """Parameter names `fn` asks for, and whether it takes **kwargs."""
    names, var_kw = [], False
    for p in inspect.signature(fn).parameters.values():
        if p.kind is p.VAR_KEYWORD:
            var_kw = True
        elif p.kind is p.VAR_POSITIONAL:
            continue
        elif p.name in allowed:
            names.append(p.name)
        elif p.default is p.empty:
            kind = "group reward function" if allowed is GROUP_ARGUMENTS else "reward function"
            raise RubricError(
                f"{kind} {fn.__name__!r} asks for unknown argument {p.name!r}; available: {', '.join(allowed)}"
            )
    return (list(allowed) if var_kw else names), var_kw


class Rubric:
    """A weighted list of reward functions.

    >>> def right(answer, completion) -> float:
    ...     return float(completion[-1]["content"] == answer)
    >>> Rubric([right], weights=[1.0]).names
    ['right']
    """

    def __init__(
        self,
        funcs: Sequence[RewardFn] = (),
        weights: Sequence[float] | None = None,
        parser: Any = None,
    ) -> None:
        if weights is not None and len(weights) != len(funcs):
            raise RubricError(f"got {len(funcs)} reward functions but {len(weights)} weights")
        self.parser = parser
        self.funcs: list[RewardFn] = []
        self.weights: list[float] = []
        self._args: list[list[str]] = []
        for fn, w in zip(funcs, weights if weights is not None else [1.0] * len(funcs)):
            self.add(fn, w)

    @property
    def names(self) -> list[str]:
        return [fn.__name__ for fn in self.funcs]

    @property
    def has_group_functions(self) -> bool:
        return any(is_group_reward(fn) for fn in self.funcs)

    def add(self, fn: RewardFn, weight: float = 1.0) -> None:
        """Add one reward function (weight 0: a metric only)."""
        name = getattr(fn, "__name__", None)
        if not name or name == "<lambda>":
            raise RubricError("reward functions need a name: use a def, not a lambda")
        if name in self.names:
            raise RubricError(f"two reward functions are named {name!r}; names must be unique")
        allowed = GROUP_ARGUMENTS if is_group_reward(fn) else ARGUMENTS
        args, _ = _wanted(fn, allowed)
        self.funcs.append(fn)
        self.weights.append(float(weight))
        self._args.append(args)

    def total(self, rewards: dict[str, float]) -> float:
        """Weighted sum of the named rewards. A metric (weight 0) is left out, so that one
        returning NaN or an infinity cannot spoil the total (0 * nan is nan).

        >>> def metric() -> float:
        ...     return float("nan")
        >>> def right() -> float:
        ...     return 1.0
        >>> Rubric([right, metric], weights=[2.0, 0.0]).total({"right": 1.0, "metric": float("nan")})
        2.0
        """
        return sum(w * rewards[fn.__name__] for fn, w in zip(self.funcs, self.weights) if w != 0.0)

    async def score_group(self, states: Sequence[State]) -> list[dict[str, float]]:
        """Score every state of one group; returns each rollout's reward by function name."""
        scores: list[dict[str, float]] = [{} for _ in states]
        for fn, args in zip(self.funcs, self._args):
            if is_group_reward(fn):
                values = await _call(fn, {a: _group_value(a, states, self.parser) for a in args})
                values = list(values)
                if len(values) != len(states):
                    raise RubricError(
                        f"group reward function {fn.__name__!r} returned {len(values)} values "
                        f"for a group of {len(states)}"
                    )
            else:
                values = [await _call(fn, {a: _value(a, s, self.parser) for a in args}) for s in states]
            for score, v in zip(scores, values):
                score[fn.__name__] = _as_float(fn, v)
        return scores


async def _call(fn: Callable[..., Any], kwargs: dict[str, Any]) -> Any:
    out = fn(**kwargs)
    if inspect.isawaitable(out):
        out = await out
    return out


def _as_float(fn: Callable[..., Any], value: Any) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        raise RubricError(f"reward function {fn.__name__!r} returned {value!r}; expected a number") from None


def _value(name: str, state: State, parser: Any) -> Any:
    if name == "prompt":
        return state.prompt
    if name == "completion":
        return state.completion
    if name == "answer":
        return state.task.answer
    if name == "info":
        return state.task.info
    if name == "task":
        return state.task
    if name == "state":
        return state
    return parser


def _group_value(name: str, states: Sequence[State], parser: Any) -> Any:
    if name == "parser":
        return parser
    return [_value(name[:-1], s, parser) for s in states]
