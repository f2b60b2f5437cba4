"""Find environments: installed packages register `load_environment` under the entry-point
group `rlvr.environments` (name = environment name)."""

from __future__ import annotations

import difflib
import inspect
import json
import types
import typing
from importlib.metadata import EntryPoint, entry_points
from typing import Any

from rlvr.envs.multiturn import MultiTurnEnv
from rlvr.errors import EnvError, EnvNotFoundError, RlvrError, UsageError

GROUP = "rlvr.environments"


def _entry_points() -> dict[str, EntryPoint]:
    return {ep.name: ep for ep in entry_points(group=GROUP)}


def list_environments() -> dict[str, str]:
    """Installed environments: name -> `module:function`."""
    return {name: ep.value for name, ep in sorted(_entry_points().items())}


def describe(name: str) -> str:
    """One line about an installed environment: its package's summary (the loader's docstring
    for one shipped inside rlvr itself), without a leading "rlvr environment:"."""
    ep = _entry_points()[name]
    text = ""
    if ep.dist is not None and ep.dist.name != "rlvr":
        metadata = ep.dist.metadata
        text = metadata["Summary"] if "Summary" in metadata else ""
    if not text:
        text = (inspect.getdoc(ep.load()) or "").split("\n")[0]
    prefix = "rlvr environment:"
    return text[len(prefix) :].strip() if text.lower().startswith(prefix) else text


def entry_point(name: str) -> EntryPoint | None:
    """The entry point of an installed environment (`my-env` and `my_env` name the same one
    when only one of them is installed); None when none is."""
    eps = _entry_points()
    return next((eps[n] for n in (name, name.replace("-", "_"), name.replace("_", "-")) if n in eps), None)


def install_hint(name: str) -> str:
    """How to install environment `name`: from `environments/NAME` where this folder has one (a
    checkout of rlvr), else from wherever its package is (`rlvr init` writes one anywhere)."""
    from pathlib import Path

    for folder in (Path("environments") / name, Path("environments") / name.replace("-", "_"), Path(name)):
        if (folder / "pyproject.toml").is_file():
            return f"install its package with `pip install -e {folder}`"
    return (
        "install its package with `pip install -e PATH`, PATH being the folder of its pyproject.toml "
        f"(`rlvr init {name}` makes one)"
    )


def load_environment(name: str, **env_args: Any) -> MultiTurnEnv[Any]:
    """Load an installed environment by name with its arguments (`my-env` and `my_env` name the
    same one when only one of them is installed)."""
    eps = _entry_points()
    found = entry_point(name)
    name = found.name if found is not None else name
    if name not in eps:
        installed = ", ".join(sorted(eps)) or "none"
        close = difflib.get_close_matches(name, list(eps), n=1)
        fix = f"did you mean {close[0]!r}?" if close else install_hint(name)
        raise EnvNotFoundError(f"no environment named {name!r} is installed (installed: {installed}); {fix}")
    loader = eps[name].load()
    params = inspect.signature(loader).parameters
    takes_any = any(p.kind is p.VAR_KEYWORD for p in params.values())
    unknown = [k for k in env_args if k not in params] if not takes_any else []
    if unknown:
        names = [p for p in params if params[p].kind is not params[p].VAR_KEYWORD]
        close = difflib.get_close_matches(unknown[0], names, n=1)
        hint = f"did you mean {close[0]!r}? " if close else ""
        raise UsageError(f"environment {name!r} takes no argument {unknown[0]!r}; {hint}it accepts: {', '.join(names)}")
    wrong = wrong_type(loader, env_args)
    if wrong:
        raise UsageError(f"environment {name!r}: {wrong}")
    try:
        env = loader(**env_args)
    except RlvrError:
        raise
    except (TypeError, ValueError) as exc:
        raise UsageError(f"environment {name!r} rejected its arguments: {exc}") from None
    except Exception as exc:
        raise EnvError(f"environment {name!r} failed to load: {type(exc).__name__}: {exc}") from None
    if not isinstance(env, MultiTurnEnv):
        raise EnvError(f"load_environment of {name!r} returned {type(env).__name__}, not an rlvr environment")
    env.name = name
    env.env_args = dict(env_args)
    return env


_PLAIN = {int: "an integer", float: "a number", bool: "true or false", str: "a string", type(None): "null"}


def wrong_type(loader: Any, env_args: dict[str, Any]) -> str | None:
    """What argument of `env_args` has the wrong JSON type for `loader`'s annotation, or None.
    Only plain annotations are checked (int, float, bool, str, and unions of them with None);
    the loader checks ranges and anything else.

    >>> def load_environment(memory_mb: int = 512, seed: int | None = None, name: str = "x"): ...
    >>> wrong_type(load_environment, {"memory_mb": 1e12}), wrong_type(load_environment, {"seed": None})
    ('argument memory_mb must be an integer, got 1000000000000.0', None)
    >>> wrong_type(load_environment, {"name": True})
    'argument name must be a string, got true'
    """
    try:
        hints = typing.get_type_hints(loader)
    except Exception:  # an annotation that does not resolve here: the loader checks its own
        return None
    for name, value in env_args.items():
        hint = hints.get(name)
        union = typing.get_origin(hint) in (typing.Union, types.UnionType)
        allowed = typing.get_args(hint) if union else (hint,)
        if not allowed or not all(a in _PLAIN for a in allowed) or any(_fits(value, a) for a in allowed):
            continue
        return f"argument {name} must be {' or '.join(_PLAIN[a] for a in allowed)}, got {json.dumps(value)}"
    return None


def _fits(value: Any, kind: type) -> bool:
    if kind is float:
        return isinstance(value, int | float) and not isinstance(value, bool)
    if kind is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, kind)
