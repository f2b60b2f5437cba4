"""Game code run where a deadline can stop it.

TextArena's `reset`, `step` and `close` are synchronous, and a game can loop inside them for
ever (PublicGoodsGame's turn rotation spins once every seat is eliminated). Run on the event
loop, such a call would stall every rollout and no `asyncio` deadline would fire. So each call
runs in a worker thread of its own, and the rollout waits for it at most `timeout_s` from the
moment it holds the game lock:

- A call that returns in time hands back its result (or raises its exception) in the rollout.
- A call that does not fails the rollout with `GameTimeout`. Python cannot kill a thread; the
  worker is asked to stop by raising `GameAbandoned` inside it (CPython's
  `PyThreadState_SetAsyncExc`), which ends a game looping in Python code at its next
  instruction. A call blocked inside C code (a sleep, a socket) cannot be stopped that way: its
  thread is a daemon, left running until it returns or the process exits.
- Game calls run one at a time (`_GAME_LOCK`): TextArena's games draw from the module-level
  `random`, which each rollout swaps for a state of its own around every call, and two calls
  at once would draw from each other's stream. A call's deadline starts when it holds the
  lock, and the calls behind it wait while it is within its deadline, so a stuck game fails
  its own rollout only; one that cannot be stopped makes the calls waiting behind it fail with
  `GameTimeout` once it is past its deadline and the grace to stop it, rather than hang.
"""

from __future__ import annotations

import asyncio
import ctypes
import math
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

from rlvr.errors import EnvError

T = TypeVar("T")

_GAME_LOCK = threading.Lock()
_holder_until = math.inf
"""When the call holding `_GAME_LOCK` is past its deadline and the grace to stop it (inf: no
holder, or one that has not set it yet)."""
STOP_GRACE_S = 1.0


class GameTimeout(EnvError):
    """A game call (TextArena's reset, step or close) did not return within its deadline."""


class GameAbandoned(BaseException):
    """Raised inside a worker thread whose game call ran past its deadline, to stop it."""


def _stop(thread: threading.Thread, grace_s: float = STOP_GRACE_S) -> bool:
    """Ask `thread` to stop by raising GameAbandoned in it; whether it ended within `grace_s`."""
    if thread.ident is not None and thread.is_alive():
        ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread.ident), ctypes.py_object(GameAbandoned))
        thread.join(grace_s)
    return not thread.is_alive()


def _acquire(timeout_s: float) -> bool:
    """Take the game lock, waiting while its holder is within its deadline and the grace to
    stop it; then hold it with this call's own deadline. False: the holder is overdue (it could
    not be stopped)."""
    global _holder_until
    while not _GAME_LOCK.acquire(timeout=0.05):
        if time.monotonic() > _holder_until:
            return False
    _holder_until = time.monotonic() + timeout_s + STOP_GRACE_S + 1.0
    return True


def _release() -> None:
    global _holder_until
    _holder_until = math.inf
    _GAME_LOCK.release()


async def call_game(fn: Callable[[], T], *, timeout_s: float, what: str) -> T:
    """`fn()` in a worker thread, one game call at a time; GameTimeout naming `what` when it
    has not returned within `timeout_s` of taking the game lock (its thread stopped where that
    is possible), or when the call holding the lock is past its deadline and was not stopped."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[T] = loop.create_future()
    started = asyncio.Event()

    def settle(result: Any, exc: BaseException | None) -> None:
        if future.done():
            return
        if exc is not None:
            future.set_exception(exc)
        else:
            future.set_result(result)

    def work() -> None:
        try:
            if not _acquire(timeout_s):
                stuck = GameTimeout(f"{what}: another game's call is past its deadline and could not be stopped")
                loop.call_soon_threadsafe(settle, None, stuck)
                return
            try:
                loop.call_soon_threadsafe(started.set)
                result, error = _run(fn)
            finally:
                _release()
            loop.call_soon_threadsafe(settle, result, error)
        except GameAbandoned:  # stopped past its deadline: nobody waits for it any more
            pass
        except RuntimeError:  # the loop closed in between: nobody waits any more
            pass

    thread = threading.Thread(target=work, name=f"rlvr-textarena {what}", daemon=True)
    thread.start()
    began: asyncio.Future[Any] = asyncio.ensure_future(started.wait())
    first: set[asyncio.Future[Any]] = {began, future}
    try:
        await asyncio.wait(first, return_when=asyncio.FIRST_COMPLETED)  # the lock, or the wait failed
        return await asyncio.wait_for(future, timeout_s)
    except TimeoutError:
        stopped = _stop(thread)
        left = "its thread was stopped" if stopped else "its thread could not be stopped and is left running"
        raise GameTimeout(f"{what} did not return within {timeout_s:g} s ({left}); the rollout is abandoned") from None
    except asyncio.CancelledError:  # the episode's own deadline, or the run was interrupted
        _stop(thread)
        raise
    finally:
        began.cancel()


def _run(fn: Callable[[], T]) -> tuple[T | None, BaseException | None]:
    """`fn()`'s result, or the exception it raised (GameAbandoned aside, which ends the thread)."""
    try:
        return fn(), None
    except GameAbandoned:
        raise
    except BaseException as exc:  # handed to the rollout, which records it
        return None, exc
