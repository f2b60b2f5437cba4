"""What the config dataclasses of `rlvr train` and `rlvr sft` share (torch-free): field
docstrings for `--help`, the resume check, the parser of optional numeric flags, the
learning-rate schedules and the LoRA settings."""

from __future__ import annotations

import ast
import functools
import inspect
import itertools
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Any

from rlvr.errors import UsageError

LR_SCHEDULES = ("constant", "linear", "cosine")
"""Learning rate after warm-up: constant, or a linear or cosine decay to 0 at the last step
(`rlvr.train.model.lr_factor`). `rlvr train` and `rlvr sft` default to constant: a resumed run
given more steps then keeps the learning rate it had (a decay would be stretched)."""


@dataclass(frozen=True)
class LoraSpec:
    """LoRA adapters to train instead of the full model (`rlvr.train.model.load_trainable`)."""

    rank: int
    alpha: float | None = None
    """scale numerator; None = 2 * rank"""
    dropout: float = 0.0


@functools.cache
def field_docs(cls: type) -> dict[str, str]:
    """Each field's docstring: the string literal under it in the class body."""
    body = ast.parse(inspect.getsource(cls)).body[0].body  # type: ignore[attr-defined]
    return {
        node.target.id: str(after.value.value)
        for node, after in itertools.pairwise(body)
        if isinstance(node, ast.AnnAssign)
        and isinstance(node.target, ast.Name)
        and isinstance(after, ast.Expr)
        and isinstance(after.value, ast.Constant)
    }


def check_resume(saved: dict[str, Any], current: dict[str, Any], may_change: Collection[str]) -> None:
    """A resumed run keeps the config it started with, except the fields in `may_change`."""
    for key, old in saved.items():
        if key not in may_change and key in current and current[key] != old:
            raise UsageError(
                f"cannot resume: {key} was {old!r} when the run started, now {current[key]!r}; "
                "use the original value or start a new run in another output directory"
            )


def none_or(kind: Callable[[str], Any]) -> Callable[[str], Any]:
    """A flag parser that also takes `none` / `null` (unset an optional field)."""

    def parse(text: str) -> Any:
        return None if text.lower() in ("none", "null") else kind(text)

    parse.__name__ = getattr(kind, "__name__", "value")
    return parse
