"""Progress of a long loop for the person watching: a rich bar on a terminal, plain lines elsewhere.

A rich bar redraws one line in place, which a log file or a pipe cannot show: with stdout
redirected, rich draws nothing until the loop ends, and a run looks hung for as long as it
takes. There `Progress` prints a plain line every `every` items (default: each tenth of the
total) or, at the next item, once `interval_s` seconds (default 30) have passed since the last
line; the last item always gets its line. With no total (`None`: a walk whose size is found as
it goes) only the interval applies. `quiet` prints nothing at all.

Items can take longer than the interval (32 rollouts in flight that finish together, one
training step on a CPU), so a heartbeat thread also prints the line when `interval_s` passes
with no item finished: no gap between two lines is much over `interval_s`. `activity`, when
given, says what moved meanwhile (e.g. "turns 96 done, 32 in flight, 12,288 tokens") and is
shown on every line and beside a bar. (`heartbeat=False` for a test that drives `clock` by hand.)

`silence_third_party_bars()` turns off the progress bars of Hugging Face libraries
("Loading weights", "Writing model shards", downloads): the CLI calls it for `-q` and whenever
stderr is not a terminal, where a bar's redraws are one long line of carriage returns.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from types import TracebackType
from typing import Any, TextIO

INTERVAL_S = 30.0
"""Longest wait between two plain progress lines."""


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
        interval_s: float | None = None,
        activity: Callable[[], str] | None = None,
        heartbeat: bool = True,
        stream: TextIO | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.label, self.total, self.done = label, total, completed
        self.quiet = quiet
        if every is None:  # each tenth of the total; with no total, the interval alone
            every = 0 if total is None else max(1, total // 10)
        self.every = every
        self.interval_s = INTERVAL_S if interval_s is None else interval_s
        self.activity = activity
        self.heartbeat = heartbeat
        self.stream = stream if stream is not None else sys.stdout
        self.clock = clock
        self.plain = not quiet and not self.stream.isatty()
        self._bar: Any = None
        self._task: Any = None
        self._status = ""
        self._lock = threading.Lock()  # the heartbeat thread prints too
        self._stop = threading.Event()
        self._heart: threading.Thread | None = None
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
        if self.heartbeat and not self.quiet:
            self._heart = threading.Thread(target=self._beat, name="progress-heartbeat", daemon=True)
            self._heart.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self._stop.set()
        if self._heart is not None:
            self._heart.join()
        if self._bar is not None:
            self._bar.__exit__(kind, exc, tb)

    def advance(self, n: int = 1, *, status: str = "") -> None:
        """Count `n` more finished items; `status` is shown beside the count."""
        with self._lock:
            self.done += n
            self._status = status
            if self._bar is not None:
                self._bar.update(self._task, advance=n, description=self._described())
            if not self.plain:
                return
            now = self.clock()
            counted = self.every > 0 and self.done % self.every == 0
            last = self.total is not None and self.done >= self.total
            if counted or last or now - self._last >= self.interval_s:
                self._print(now)

    def _beat(self) -> None:
        """The heartbeat: a line whenever `interval_s` passes without one (a bar: its activity)."""
        wait = min(1.0, self.interval_s / 4)  # a bar: how often its activity is refreshed
        while not self._stop.wait(wait):
            with self._lock:
                if self._bar is not None:
                    self._bar.update(self._task, description=self._described())
                    continue
                left = self._last + self.interval_s - self.clock()
                if self.plain and left <= 0:
                    self._print(self.clock())
                    left = self.interval_s
                wait = max(left, 0.01)  # wake at the next deadline: no gap over `interval_s`

    def _described(self) -> str:
        return "  ".join(part for part in (self.label, self._status, self._activity()) if part)

    def _activity(self) -> str:
        return self.activity() if self.activity is not None else ""

    def _print(self, now: float) -> None:
        self._last = now
        shown = "".join(f"  {part}" for part in (self._status, self._activity()) if part)
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
