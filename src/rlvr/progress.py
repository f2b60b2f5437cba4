"""Progress of a long loop for the person watching: a rich bar on a terminal, plain lines elsewhere.

A rich bar redraws one line in place, which a log file or a pipe cannot show: with stdout
redirected, rich draws nothing until the loop ends, and a run looks hung for as long as it
takes. There `Progress` prints a plain line every `every` items (default: each tenth of the
total) or, at the next item, once `interval_s` seconds (default 30) have passed since the last
line; the last item always gets its line. With no total (`None`: a walk whose size is found as
it goes) only the interval applies. `quiet` prints nothing at all.

`silence_third_party_bars()` turns off the progress bars of Hugging Face libraries
("Loading weights", "Writing model shards", downloads): the CLI calls it for `-q` and whenever
stderr is not a terminal, where a bar's redraws are one long line of carriage returns.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from types import TracebackType
from typing import Any, TextIO

INTERVAL_S = 30.0
"""Longest wait between two plain progress lines while items keep finishing."""


class Progress:
    """`with Progress("rollouts", total) as p: ... p.advance(status="reward 0.512")`."""

    def __init__(
        self,
        label: str,
        total: int | None,
        *,
        completed: int = 0,
        quiet: bool = False,
        every: int | None = None,
        interval_s: float = INTERVAL_S,
        stream: TextIO | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.label, self.total, self.done = label, total, completed
        self.quiet = quiet
        if every is None:  # each tenth of the total; with no total, the interval alone
            every = 0 if total is None else max(1, total // 10)
        self.every = every
        self.interval_s = interval_s
        self.stream = stream if stream is not None else sys.stdout
        self.clock = clock
        self.plain = not quiet and not self.stream.isatty()
        self._bar: Any = None
        self._task: Any = None
        self._start = self._last = clock()

    def __enter__(self) -> Progress:
        if not self.quiet and not self.plain:
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn
            from rich.progress import Progress as Bar

            self._bar = Bar(
                TextColumn("{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                console=Console(file=self.stream),
            )
            self._bar.__enter__()
            self._task = self._bar.add_task(self.label, total=self.total, completed=self.done)
        self._start = self._last = self.clock()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        if self._bar is not None:
            self._bar.__exit__(kind, exc, tb)

    def advance(self, n: int = 1, *, status: str = "") -> None:
        """Count `n` more finished items; `status` is shown beside the count."""
        self.done += n
        if self._bar is not None:
            self._bar.update(self._task, advance=n, description=f"{self.label}  {status}".rstrip())
        if not self.plain:
            return
        now = self.clock()
        counted = self.every > 0 and self.done % self.every == 0
        last = self.total is not None and self.done >= self.total
        if counted or last or now - self._last >= self.interval_s:
            self._last = now
            shown = f"  {status}" if status else ""
            count = f"{self.done}" if self.total is None else f"{self.done}/{self.total} ({self._percent():.0f}%)"
            print(f"{self.label} {count}{shown}  {now - self._start:.0f} s", file=self.stream, flush=True)

    def _percent(self) -> float:
        return 100 * self.done / self.total if self.total else 100.0


def silence_third_party_bars() -> None:
    """Turn off Hugging Face progress bars (transformers' "Loading weights", hub downloads) in
    this process, whether or not transformers is imported yet."""
    try:
        from huggingface_hub.utils import disable_progress_bars
    except ImportError:  # no Hugging Face library, no bars
        return
    disable_progress_bars()  # transformers reads this when it is imported
    if "transformers" in sys.modules:
        from transformers.utils import logging as transformers_logging

        transformers_logging.disable_progress_bar()
