"""Renamed keyword arguments keep working for a while: the old name warns and names the new one.

    @renamed_arguments(num_examples="num_tasks")
    def load_environment(num_tasks: int = 1000, ...): ...

    load_environment(num_examples=50)   # DeprecationWarning: num_examples is deprecated; use num_tasks

The old names stay in the function's signature (as keyword-only parameters), so that callers
which check arguments against it, like `rlvr.registry.load_environment`, accept them.

Command-line flags the same way: `renamed_flag(parser, "--max-steps", "--steps", dest=...)`.
"""

from __future__ import annotations

import argparse
import functools
import inspect
import warnings
from collections.abc import Callable
from typing import Any, TypeVar

F = TypeVar("F", bound=Callable[..., Any])


class _Renamed:
    """The default of an old name in the signature; shows where it went."""

    def __init__(self, new: str) -> None:
        self.new = new

    def __repr__(self) -> str:
        return f"<deprecated: use {self.new}>"


def renamed_arguments(**renames: str) -> Callable[[F], F]:
    """Accept each `old="new"` keyword under its old name too, with a `DeprecationWarning`.

    Passing both names is a `TypeError`, as passing one argument twice is.

    >>> @renamed_arguments(num_examples="num_tasks")
    ... def load(num_tasks: int = 10) -> int:
    ...     return num_tasks
    >>> import warnings
    >>> with warnings.catch_warnings(record=True) as caught:
    ...     warnings.simplefilter("always")
    ...     load(num_examples=3), load(num_tasks=4), str(caught[0].message), len(caught)
    (3, 4, 'num_examples is deprecated; use num_tasks', 1)
    """

    def decorate(fn: F) -> F:
        signature = inspect.signature(fn)
        unknown = [new for new in renames.values() if new not in signature.parameters]
        if unknown:
            raise TypeError(f"{fn.__name__} has no parameter {unknown[0]!r} to rename to")

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            for old, new in renames.items():
                if old not in kwargs:
                    continue
                if new in kwargs:
                    raise TypeError(f"{fn.__name__}() got both {new} and its deprecated name {old}; pass {new} only")
                warnings.warn(f"{old} is deprecated; use {new}", DeprecationWarning, stacklevel=2)
                kwargs[new] = kwargs.pop(old)
            return fn(*args, **kwargs)

        params = list(signature.parameters.values())
        tail = [params.pop()] if params and params[-1].kind is inspect.Parameter.VAR_KEYWORD else []
        olds = [
            inspect.Parameter(old, inspect.Parameter.KEYWORD_ONLY, default=_Renamed(new))
            for old, new in renames.items()
        ]
        wrapper.__signature__ = signature.replace(parameters=[*params, *olds, *tail])  # type: ignore[attr-defined]
        return wrapper  # type: ignore[return-value]

    return decorate


def renamed_flag(parser: argparse.ArgumentParser, old: str, new: str, *, dest: str, **kwargs: Any) -> None:
    """Accept the command-line flag `old` as a hidden spelling of `new` (same `dest`), with a
    `DeprecationWarning` naming `new` when it is used; the CLI prints it as one note on stderr
    and the command runs on. `kwargs` are `add_argument`'s (type, metavar, nargs=0 for a switch).

    >>> parser = argparse.ArgumentParser()
    >>> _ = parser.add_argument("--steps", dest="steps", type=int)
    >>> renamed_flag(parser, "--max-steps", "--steps", dest="steps", type=int)
    >>> with warnings.catch_warnings(record=True) as caught:
    ...     warnings.simplefilter("always")
    ...     parser.parse_args(["--max-steps", "5"]).steps, str(caught[0].message)
    (5, '--max-steps is deprecated; use --steps')
    """
    parser.add_argument(old, dest=dest, action=_RenamedFlag, new=new, help=argparse.SUPPRESS, **kwargs)


class _RenamedFlag(argparse.Action):
    """Store the value as `new` would, after a `DeprecationWarning`."""

    def __init__(self, option_strings: list[str], dest: str, *, new: str, **kwargs: Any) -> None:
        self.new = new
        super().__init__(option_strings, dest, **kwargs)

    def __call__(self, parser: Any, namespace: Any, values: Any, option_string: str | None = None) -> None:
        warnings.warn(f"{option_string} is deprecated; use {self.new}", DeprecationWarning, stacklevel=2)
        setattr(namespace, self.dest, values)
