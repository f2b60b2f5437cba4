"""The terminal of `rlvr play`: panels on screen, lines and blocks of lines from the keyboard."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")

_CONTROL = re.compile(
    r"\x1b\[[0-?]*[ -/]*[@-~]"  # CSI: cursor moves, colours, screen clears
    r"|\x1b[\]PX^_][^\x07\x1b]*(?:\x07|\x1b\\)?"  # OSC, DCS, ...: titles, clipboard writes, links
    r"|\x1b[ -~]?"  # any other escape
    r"|[\x00-\x08\x0b-\x1f\x7f-\x9f]"  # the other C0 and C1 controls (8-bit CSI too); tabs and newlines stay
)


def printable(text: str) -> str:
    """`text` without terminal control sequences: a model's reply on screen must not move the
    cursor, clear the screen, retitle the window or write the clipboard (OSC 52).

    >>> printable("ok\\x1b]52;c;ZXZpbA==\\x07 \\x1b[2J\\x1b[31mred\\x1b[0m\\tand\\x9b1m\\rmore\\n")
    'ok red\\tand1mmore\\n'
    """
    return _CONTROL.sub("", text)


class Terminal:
    """Screen and keyboard through rich: a clean redraw per move, re-prompts on bad input.
    End of input (Ctrl-D, or a closed stdin) counts as quitting. Panels show text as it is
    (no markup) less its control sequences (`printable`)."""

    def __init__(self, console: Any = None) -> None:
        from rich.console import Console

        self.console = console or Console(highlight=False)

    def show(self, title: str, body: str) -> None:
        from rich.panel import Panel
        from rich.text import Text

        self.console.clear()
        self.console.print(Panel(Text(printable(body)), title=Text(printable(title)), title_align="left", expand=False))

    def say(self, title: str, body: str) -> None:
        """Print a panel below what is on screen (a conversation grows; a board is redrawn)."""
        from rich.panel import Panel
        from rich.text import Text

        # no markup (ids may hold [ ]), no control sequences (a model's text)
        self.console.print(Panel(Text(printable(body)), title=Text(printable(title)), title_align="left"))

    def read_block(self, prompt: str, commands: tuple[str, ...] = ()) -> str | None:
        """Lines up to one holding only `.` (or the end of input); None for end of input at
        once. A first line that is one of `commands` (e.g. `/quit`) comes back on its own."""
        self.console.print(prompt)
        lines: list[str] = []
        while True:
            try:
                line = self.console.input("")
            except EOFError:
                return "\n".join(lines) if lines else None
            if not lines and line.strip() in commands:
                return line.strip()
            if line.strip() == ".":
                return "\n".join(lines)
            lines.append(line)

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


def close_loop(loop: asyncio.AbstractEventLoop) -> None:
    """Cancel what an interrupt left running (e.g. a model request), then close the loop."""
    pending = asyncio.all_tasks(loop)
    for task in pending:
        task.cancel()
    if pending:
        loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
    loop.close()


def yes_no(text: str) -> bool:
    answer = text.strip().lower()
    if answer in ("y", "yes", ""):
        return True
    if answer in ("n", "no", "q", "quit"):
        return False
    raise ValueError("answer y or n")


def play_again(terminal: Terminal, games: int | None, played: int) -> bool:
    """After a game: with `--games N`, whether fewer than N were played; else ask the person."""
    if games is not None:
        return played < games
    return terminal.ask("Play again? [y/n]", yes_no)
