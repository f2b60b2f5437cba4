"""`rlvr list`: the installed environments, each with what it is about, its kind (single-turn,
multi-turn, tool), the reference players `-m policy:NAME` can pick, and the model `rlvr eval`
uses without `-m`."""

from __future__ import annotations

import argparse
import asyncio
import os
from typing import Any


def add_parser(sub: Any) -> None:
    p = sub.add_parser("list", help="list installed environments", description=__doc__)
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from rlvr.registry import list_environments

    envs = list_environments()
    if not envs:
        print("no environments installed; install one with `pip install -e environments/NAME`")
        return 0
    width = max(len(n) for n in envs)
    for name in envs:
        about, details = _about(name)
        print(f"{name:<{width}}  {about}")
        print(f"{'':<{width}}  {details}")
    return 0


def _about(name: str) -> tuple[str, str]:
    """(kind and description, players and default model) of an installed environment; an
    environment that fails to load says why instead."""
    from rlvr.envs.multiturn import SingleTurnEnv
    from rlvr.envs.tools import ToolEnv
    from rlvr.errors import RlvrError
    from rlvr.registry import describe, load_environment

    try:
        description = describe(name)
        env = load_environment(name)
    except (RlvrError, ImportError) as exc:
        return "(does not load with its default arguments)", str(exc).split("\n")[0]
    asyncio.run(env.aclose())
    kind = "tool" if isinstance(env, ToolEnv) else "single-turn" if isinstance(env, SingleTurnEnv) else "multi-turn"
    players = " ".join(f"policy:{p}" for p in env.policies()) or "none"
    model = env.default_model()
    shown = "none (pass -m)" if model is None else _short_path(model)
    return f"[{kind}] {description}", f"players: {players}; default model: {shown}"


def _short_path(model: str) -> str:
    """A model folder under the working directory, relative to it."""
    if os.path.isabs(model):
        rel = os.path.relpath(model)
        return model if rel.startswith("..") else rel
    return model
