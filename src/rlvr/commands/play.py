"""`rlvr play ENV [-m MODEL]`: play an environment in the terminal.

An environment with its own game screen implements the `PlayableEnv` protocol:

    async def play_human(self, client, terminal, *, human_mark, human_first, seed, sampling) -> str

which plays one game with the person in the opponent's seat and returns the person's result
(`win`, `loss`, `draw` or `unfinished`). `terminal` offers `show(title, body)` (redraw the
screen) and `ask(prompt, parse)` (read a line, re-prompt while `parse` raises ValueError).
Type q (or press Ctrl-C / Ctrl-D) to quit. Tic-tac-toe has one.

Any other environment (or any with --text) is played as a text conversation
(`rlvr.commands.play_text`): without -m you type the model's turns; with -m you watch the
model play, step by step. Either way the rubric's rewards are printed at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import random
from collections import Counter
from typing import Any, Protocol, cast, runtime_checkable

from rlvr.clients.base import ChatClient
from rlvr.commands.terminal import Terminal, close_loop, play_again
from rlvr.errors import UsageError
from rlvr.types import SamplingArgs


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
    p.add_argument("env", help="environment name (e.g. tictactoe, reverse_text)")
    add_model_args(p)
    p.add_argument(
        "--as",
        dest="mark",
        choices=["X", "O"],
        default="O",
        help="your mark on screen (default O; the model always plays X in its own view); game screens only",
    )
    p.add_argument(
        "--first",
        choices=["me", "model", "random"],
        default="random",
        help="who moves first (default random); game screens only",
    )
    p.add_argument(
        "--text",
        action="store_true",
        help="play the text conversation even where the env has a game screen: without -m you type the "
        "model's turns, with -m you watch the model",
    )
    p.add_argument(
        "--task", default=None, metavar="ID", help="the eval task to play (text play; default: a random one)"
    )
    p.add_argument("-a", "--env-args", default="{}", metavar="JSON", help="environment arguments as a JSON object")
    p.add_argument("-T", "--temperature", type=float, default=None, help="the model's sampling temperature")
    p.add_argument("-t", "--max-tokens", type=int, default=None, help="max tokens per model reply")
    p.add_argument("--seed", type=int, default=None, help="seed for who starts (or the task) and the model's sampling")
    p.add_argument("--games", type=int, default=None, help="stop after this many games (default: ask)")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from rlvr.commands import play_text
    from rlvr.commands.eval import check_positive, client_for, parse_env_args
    from rlvr.commands.sampling import temperature_line
    from rlvr.registry import load_environment

    check_positive("-t", args.max_tokens)
    check_positive("--games", args.games)
    if args.temperature is not None and args.temperature < 0:
        raise UsageError(f"-T must be >= 0, got {args.temperature}")
    env = load_environment(args.env, **parse_env_args(args.env_args))
    text = args.text or not isinstance(env, PlayableEnv)
    sampling = env.sampling
    if args.temperature is not None:
        sampling = sampling.replace(temperature=args.temperature)
    if args.max_tokens is not None:
        sampling = sampling.replace(max_tokens=args.max_tokens)
    if text and args.model is None:  # the person plays the model's side
        return play_text.run(args, env, None, sampling)
    client, model = client_for(args, env, concurrency=1)
    if text:
        return play_text.run(args, env, client, sampling)
    game = cast(PlayableEnv, env)  # `text` is False: it has play_human
    print(f"{model}: {temperature_line(args, sampling)}", flush=True)  # (the game screen may clear it)
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
                f"vs {model} at T={sampling.temperature:g}: you won {tally['win']}, drew {tally['draw']}, lost {tally['loss']}"
                + (f", unfinished {tally['unfinished']}" if tally["unfinished"] else "")
            )
            if not play_again(terminal, args.games, tally.total()):
                return 0
    except KeyboardInterrupt:
        terminal.console.print("\nbye")
        return 0
    finally:
        close_loop(loop)
