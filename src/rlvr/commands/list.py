"""`rlvr list`: the installed environments."""

from __future__ import annotations

import argparse
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
    for name, target in envs.items():
        print(f"{name:<{width}}  {target}")
    return 0
