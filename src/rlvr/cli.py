"""The `rlvr` command line. Each subcommand is a module of `rlvr.commands` exposing
`add_parser(subparsers)` and `run(args) -> int`; heavy imports happen inside `run`.

Flags are never abbreviated (`--temp` is not `--temperature`: an unknown flag is refused with the
closest real one), and a renamed flag keeps working with a note on stderr
(`rlvr.deprecation.renamed_flag`). Before any command runs, torch's CPU threads are chosen so
that a busy machine is not oversubscribed (`rlvr.clients.cpu_threads`).
"""

from __future__ import annotations

import argparse
import asyncio
import difflib
import importlib
import importlib.util
import os
import signal
import sys
import threading
import warnings

from rlvr.errors import RlvrError, UsageError

COMMANDS = ("eval", "gen", "sft", "train", "play", "report", "list", "init", "model", "serve")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="rlvr",
        description="Reinforcement learning with verifiable rewards for language models.",
        allow_abbrev=False,
    )
    parser.add_argument("--version", action="version", version=f"rlvr {_version()}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMANDS:
        if importlib.util.find_spec(f"rlvr.commands.{name}") is None:
            continue
        module = importlib.import_module(f"rlvr.commands.{name}")
        module.add_parser(sub)
    for command in _parsers(parser):
        command.allow_abbrev = False  # (read when parsing: every command's parser, however it was made)
    return parser


def _parsers(parser: argparse.ArgumentParser) -> list[argparse.ArgumentParser]:
    """`parser` and every parser under it (commands, and actions like `rlvr model new`)."""
    found = [parser]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in dict.fromkeys(action.choices.values()):  # (aliases name one parser twice)
                found.extend(_parsers(child))
    return found


def _closest_flag(parser: argparse.ArgumentParser, command: str, unknown: list[str]) -> str:
    """ "; did you mean --temperature?" for the first unknown `--flag` close to one of `command`'s."""
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices[command]
    flags = [flag for action in sub._actions for flag in action.option_strings if flag.startswith("--")]
    for arg in unknown:
        name = arg.split("=", 1)[0]
        if not name.startswith("--"):
            continue
        close = [f for f in flags if f.startswith(name)] or difflib.get_close_matches(name, flags, n=1, cutoff=0.8)
        if close:
            return f"; did you mean {' or '.join(close[:3])}?"
    return ""


def _version() -> str:
    from rlvr import __version__

    return __version__


RESUMABLE = ("eval", "sft", "train")
"""Commands whose `--resume` continues an interrupted run."""


class Terminated(KeyboardInterrupt):
    """SIGTERM (a job scheduler, `kill`, a container stopping): handled as Ctrl-C is, so that a
    run records that it was interrupted and can be resumed."""


def _terminate(signum: int, frame: object) -> None:
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:  # no event loop here: raise it where the program is, as Ctrl-C does
        raise Terminated from None
    # In an event loop, raised inside a task it would stay stored in that task ("exception was
    # never retrieved") and skip the other tasks' cleanup. Raised by the loop between callbacks,
    # it leaves asyncio.run, which first cancels every task and lets their finally blocks run.
    loop.call_soon_threadsafe(_raise_terminated)


def _raise_terminated() -> None:
    raise Terminated


def main(argv: list[str] | None = None) -> int:
    """Run one command; its exit status. A reader that stops early (`rlvr list | head`) ends any
    command quietly with status 141, as a process killed by SIGPIPE would, not a traceback."""
    try:
        try:
            return _main(argv)
        finally:
            sys.stdout.flush()  # here rather than at exit, so that a closed pipe is caught below
    except BrokenPipeError:
        _discard_stdout()
        return 128 + signal.SIGPIPE


def _discard_stdout() -> None:
    """Point stdout at /dev/null: what is still buffered must not fail again at exit."""
    try:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    except (OSError, ValueError):  # (a stdout with no file descriptor: nothing is flushed at exit)
        pass


def _stderr_is_terminal() -> bool:
    return sys.stderr.isatty()


def _main(argv: list[str] | None) -> int:
    parser = build_parser()
    with warnings.catch_warnings(record=True) as notes:  # renamed flags (`deprecation.renamed_flag`)
        warnings.simplefilter("always", DeprecationWarning)
        args, unknown = parser.parse_known_args(argv)
    if not getattr(args, "command", None):
        if unknown:
            parser.error(f"unrecognized arguments: {' '.join(unknown)}")
        parser.print_help()
        return 2
    if unknown:
        print(
            f"rlvr {args.command}: error: unrecognized arguments: {' '.join(unknown)}"
            f"{_closest_flag(parser, args.command, unknown)}; see `rlvr {args.command} --help`",
            file=sys.stderr,
        )
        return 2
    for note in notes:
        if issubclass(note.category, DeprecationWarning):
            print(f"rlvr {args.command}: note: {note.message}", file=sys.stderr)
    if getattr(args, "quiet", False) or not _stderr_is_terminal():
        from rlvr.progress import silence_third_party_bars

        silence_third_party_bars()  # (in a log file their in-place redraws are one line of \r)
    main_thread = threading.current_thread() is threading.main_thread()  # (signals go to the main thread)
    on_term = signal.signal(signal.SIGTERM, _terminate) if main_thread else None
    try:
        from rlvr.clients.cpu_threads import choose_for_process

        try:
            choose_for_process()  # (before a command imports torch)
        except UsageError as exc:  # a bad RLVR_NUM_THREADS stops only what loads a CPU model
            print(f"rlvr {args.command}: note: {exc}", file=sys.stderr)
        return int(args.run(args) or 0)
    except RlvrError as exc:
        print(f"rlvr {args.command}: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt as exc:
        how = "terminated (SIGTERM)" if isinstance(exc, Terminated) else "interrupted"
        if args.command in RESUMABLE:
            again = "again" if getattr(args, "resume", False) else "with --resume"
            how += f"; to continue, run the same command {again}"
        print(f"rlvr {args.command}: {how}", file=sys.stderr)
        return 128 + (signal.SIGTERM if isinstance(exc, Terminated) else signal.SIGINT)
    finally:
        if main_thread:
            signal.signal(signal.SIGTERM, on_term if on_term is not None else signal.SIG_DFL)


if __name__ == "__main__":
    sys.exit(main())
