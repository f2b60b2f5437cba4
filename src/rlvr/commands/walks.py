"""What the greedy and the sampled tree walks (`rlvr.commands.exact`, `.exact_sampled`) share:
the run folder they start and how a walk cut short leaves it."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")


def start_walk(out: Path, metadata: dict[str, Any], *, resume: bool) -> Any:
    """The run folder of a tree walk: an unfinished earlier walk in `out` is played again from the
    start (its games were written as they ended, so part of the tree is missing)."""
    from rlvr.results import RunDir

    if resume and (out / "results.jsonl").exists():
        print(f"{out}: the earlier exact run did not finish; playing the tree again", file=sys.stderr)
        (out / "results.jsonl").unlink()
    return RunDir.create(out, metadata, resume=resume)[0]


def walked(run_dir: Any, play: Callable[[], Coroutine[Any, Any, T]]) -> T:
    """`play()` run to its end; a walk cut short (an error, Ctrl-C) leaves its folder interrupted."""
    try:
        return asyncio.run(play())
    except BaseException:
        run_dir.close(status="interrupted")
        raise
