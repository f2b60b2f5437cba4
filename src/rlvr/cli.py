"""The `rlvr` command line. Each subcommand is a module of `rlvr.commands` exposing
`add_parser(subparsers)` and `run(args) -> int`; heavy imports happen inside `run`."""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import sys

from rlvr.errors import RlvrError

COMMANDS = ("eval", "gen", "sft", "train", "play", "report", "list", "init", "model", "bench")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="rlvr",
        description="Reinforcement learning with verifiable rewards for language models.",
    )
    parser.add_argument("--version", action="version", version=f"rlvr {_version()}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMANDS:
        if importlib.util.find_spec(f"rlvr.commands.{name}") is None:
            continue
        module = importlib.import_module(f"rlvr.commands.{name}")
        module.add_parser(sub)
    return parser


def _version() -> str:
    from rlvr import __version__

    return __version__


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "command", None):
        parser.print_help()
        return 2
    try:
        return int(args.run(args) or 0)
    except RlvrError as exc:
        print(f"rlvr {args.command}: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"rlvr {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
