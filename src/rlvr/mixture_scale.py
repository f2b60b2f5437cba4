"""A mixture's members on one reward scale: the warning when their scales differ, and the
option that maps a member's total reward onto [0, 1] (`EnvGroup(..., normalize=...)`).

A mixture's reward (the summary's mean, the trainer's batch) averages its members' totals as
they come: Taxi's return (-200 to 20) beside reverse_text's [0, 1] is Taxi's alone. The
mixture warns once it has seen rewards of two members whose largest magnitudes differ by more
than `SCALE_RATIO`; `normalize={"taxi": [-20, 20]}` maps that member's totals linearly onto
[0, 1] (a value outside the given range maps outside [0, 1]).
"""

from __future__ import annotations

import copy
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

from rlvr.envs.multiturn import MultiTurnEnv
from rlvr.errors import UsageError
from rlvr.rubric import Rubric


class ScaledRubric(Rubric):
    """A member's rubric whose total is mapped linearly from [low, high] onto [0, 1]; each reward
    function's own score is kept as it was.

    >>> def steps() -> float:
    ...     return 8.0
    >>> ScaledRubric(Rubric([steps]), -20.0, 20.0).total({"steps": 8.0})
    0.7
    """

    def __init__(self, rubric: Rubric, low: float, high: float) -> None:
        super().__init__(rubric.funcs, rubric.weights, parser=rubric.parser)
        self.low, self.high = low, high

    def total(self, rewards: dict[str, float]) -> float:
        return (super().total(rewards) - self.low) / (self.high - self.low)


def normalized(
    members: dict[str, MultiTurnEnv[Any]], normalize: Mapping[str, Sequence[float]]
) -> dict[str, MultiTurnEnv[Any]]:
    """`members`, each named in `normalize` replaced by a copy that scores with a `ScaledRubric`."""
    out = dict(members)
    for name, bounds in normalize.items():
        if name not in members:
            raise UsageError(f"normalize names {name!r}, which is not a member; members: {list(members)}")
        if len(bounds) != 2 or not float(bounds[0]) < float(bounds[1]):
            raise UsageError(f"normalize[{name!r}] must be [low, high] with low < high, got {list(bounds)}")
        out[name] = copy.copy(members[name])
        out[name].rubric = ScaledRubric(members[name].rubric, float(bounds[0]), float(bounds[1]))
    return out


SCALE_RATIO = 4.0
"""Members' reward scales (the largest magnitude each reached) that differ by more than this
factor draw a warning: the mixture's reward, and the trainer's batches, average them."""


def warn_on_scales(members: Mapping[str, MultiTurnEnv[Any]], rollouts: Sequence[Any], sep: str) -> bool:
    """Warn when members' rewards (rollout task ids `MEMBER{sep}ID`) lie on different scales;
    True once there was enough to judge (rewards of at least two members)."""
    spans: dict[str, tuple[float, float]] = {}
    for r in rollouts:
        if r.error is None:
            name = r.task_id.partition(sep)[0]
            low, high = spans.get(name, (r.reward, r.reward))
            spans[name] = (min(low, r.reward), max(high, r.reward))
    sizes = {n: max(abs(lo), abs(hi)) for n, (lo, hi) in spans.items() if max(abs(lo), abs(hi)) > 0}
    if len(sizes) < 2:
        return False
    if max(sizes.values()) > SCALE_RATIO * min(sizes.values()):
        ranges = ", ".join(f"{n}: {lo:g} to {hi:g}" for n, (lo, hi) in spans.items())
        widest = max(sizes, key=sizes.__getitem__)
        warnings.warn(
            f"the mixture's members reward on different scales ({ranges}): its reward and a batch's "
            f'advantages average them; map one onto [0, 1] with normalize, e.g. {{"{widest}": [LOW, HIGH]}}',
            stacklevel=3,
        )
    return True
