"""`rlvr play ENV [-m MODEL]`: play a game in the terminal against a model or a reference player.

An environment supports play by implementing the `PlayableEnv` protocol:

    async def play_human(self, client, terminal, *, human_mark, human_first, seed, sampling) -> str

which plays one game with the person in the opponent's seat and returns the person's result
(`win`, `loss`, `draw` or `unfinished`). `terminal` offers `show(title, body)` (redraw the
screen) and `ask(prompt, parse)` (read a line, re-prompt while `parse` raises ValueError).
Type q (or press Ctrl-C / Ctrl-D) to quit.
"""

from __future__ import annotations

import argparse
import asyncio
import random
from collections import Counter
from collections.abc import Callable
from typing import Any, Protocol, TypeVar, runtime_checkable

from rlvr.clients.base import ChatClient
from rlvr.errors import UsageError
from rlvr.types import SamplingArgs

T = TypeVar("T")


@runtime_checkable
class PlayableEnv(Protocol):
    """An environment `rlvr play` can run (an optional CLI hook; see the module docstring)."""

    async def play_human(
        self,
        client: ChatClient,
        terminal: Terminal,
        *,
        human_mark: str,
        human_first: bool,
        seed: int,
        sampling: SamplingArgs,
    ) -> str:
        """Play one game with the person in the opponent's seat; return the person's result."""
        ...


def add_parser(sub: Any) -> None:
    from rlvr.commands.eval import add_model_args

    p = sub.add_parser(
        "play",
        help="play against a model in the terminal",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("env", help="environment name (e.g. tictactoe)")
    add_model_args(p)
    p.add_argument(
        "--as",
        dest="mark",
        choices=["X", "O"],
        default="O",
        help="your mark on screen (default O; the model always plays X in its own view)",
    )
    p.add_argument(
        "--first", choices=["me", "model", "random"], default="random", help="who moves first (default random)"
    )
    p.add_argument("-a", "--env-args", default="{}", metavar="JSON", help="environment arguments as a JSON object")
    p.add_argument("-T", "--temperature", type=float, default=None, help="the model's sampling temperature")
    p.add_argument("-t", "--max-tokens", type=int, default=None, help="max tokens per model reply")
    p.add_argument("--seed", type=int, default=None, help="seed for who starts and the model's sampling")
    p.add_argument("--games", type=int, default=None, help="stop after this many games (default: ask)")
    p.set_defaults(run=run)


class Terminal:
    """Screen and keyboard through rich: a clean redraw per move, re-prompts on bad input.
    End of input (Ctrl-D, or a closed stdin) counts as quitting."""

    def __init__(self, console: Any = None) -> None:
        from rich.console import Console

        self.console = console or Console(highlight=False)

    def show(self, title: str, body: str) -> None:
        from rich.panel import Panel
        from rich.text import Text

        self.console.clear()
        self.console.print(Panel(Text(body), title=title, title_align="left", expand=False))

    def ask(self, prompt: str, parse: Callable[[str], T]) -> T:
        while True:
            try:
                line = self.console.input(f"{prompt}: ")
            except EOFError:
                raise KeyboardInterrupt from None
            try:
                return parse(line)
            except ValueError as exc:
                self.console.print(f"[red]{exc}[/red]")


def run(args: argparse.Namespace) -> int:
    from rlvr.commands.eval import check_positive, load_env_and_client, parse_env_args

    check_positive("-t", args.max_tokens)
    check_positive("--games", args.games)
    if args.temperature is not None and args.temperature < 0:
        raise UsageError(f"-T must be >= 0, got {args.temperature}")
    try:
        env, client, model = load_env_and_client(args, concurrency=1)
    except UsageError:  # e.g. no default model: say first when the env cannot be played at all
        from rlvr.registry import load_environment

        _playable(load_environment(args.env, **parse_env_args(args.env_args)), args.env)
        raise
    game = _playable(env, args.env)
    sampling = env.sampling
    if args.temperature is not None:
        sampling = sampling.replace(temperature=args.temperature)
    if args.max_tokens is not None:
        sampling = sampling.replace(max_tokens=args.max_tokens)
    rng = random.Random(args.seed)
    terminal = Terminal()
    tally: Counter[str] = Counter()
    # One event loop for the whole session, without asyncio.run's SIGINT handler: that handler
    # turns the first Ctrl-C into a task cancellation that a blocking input() never sees.
    loop = asyncio.new_event_loop()
    try:
        while True:
            human_first = {"me": True, "model": False}.get(args.first, rng.random() < 0.5)
            result = loop.run_until_complete(
                game.play_human(
                    client,
                    terminal,
                    human_mark=args.mark,
                    human_first=human_first,
                    seed=rng.randrange(2**31),
                    sampling=sampling,
                )
            )
            tally[result] += 1
            terminal.console.print(
                f"vs {model}: you won {tally['win']}, drew {tally['draw']}, lost {tally['loss']}"
                + (f", unfinished {tally['unfinished']}" if tally["unfinished"] else "")
            )
            if args.games is not None:
                if tally.total() >= args.games:
                    return 0
            elif not terminal.ask("Play again? [y/n]", _yes_no):
                return 0
    except KeyboardInterrupt:
        terminal.console.print("\nbye")
        return 0
    finally:
        _close(loop)


def _close(loop: asyncio.AbstractEventLoop) -> None:
    """Cancel what an interrupt left running (e.g. a model request), then close the loop."""
    pending = asyncio.all_tasks(loop)
    for task in pending:
        task.cancel()
    if pending:
        loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
    loop.close()


def _playable(env: Any, name: str) -> PlayableEnv:
    if not isinstance(env, PlayableEnv):
        raise UsageError(f"environment {name!r} does not support play (it has no play_human hook)")
    return env


def _yes_no(text: str) -> bool:
    answer = text.strip().lower()
    if answer in ("y", "yes", ""):
        return True
    if answer in ("n", "no", "q", "quit"):
        return False
    raise ValueError("answer y or n")
