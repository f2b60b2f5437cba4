"""Game code run where a deadline can stop it.

TextArena's `reset`, `step` and `close` are synchronous, and a game can loop inside them for
ever (PublicGoodsGame with one player spins in its turn rotation). Run on the event loop, such
a call would stall every rollout and no `asyncio` deadline would fire. So each call runs in a
worker thread of its own, and the rollout waits for it at most `timeout_s`:

- A call that returns in time hands back its result (or raises its exception) in the rollout.
- A call that does not fails the rollout with `GameTimeout`. Python cannot kill a thread; the
  worker is asked to stop by raising `GameAbandoned` inside it (CPython's
  `PyThreadState_SetAsyncExc`), which ends a game looping in Python code at its next
  instruction. A call blocked inside C code (a sleep, a socket) cannot be stopped that way: its
  thread is a daemon, left running until it returns or the process exits.
- Game calls run one at a time (`_GAME_LOCK`): TextArena's games draw from the module-level
  `random`, which each rollout swaps for a state of its own around every call, and two calls
  at once would draw from each other's stream. A worker that holds the lock past the deadline
  and cannot be stopped makes later calls fail with `GameTimeout` too (they wait at most
  `timeout_s` for it), rather than hang.
"""

from __future__ import annotations

import asyncio
import ctypes
import threading
from collections.abc import Callable
from typing import Any, TypeVar

from rlvr.errors import EnvError

T = TypeVar("T")

_GAME_LOCK = threading.Lock()


class GameTimeout(EnvError):
    """A game call (TextArena's reset, step or close) did not return within its deadline."""


class GameAbandoned(BaseException):
    """Raised inside a worker thread whose game call ran past its deadline, to stop it."""


def _stop(thread: threading.Thread, grace_s: float = 1.0) -> bool:
    """Ask `thread` to stop by raising GameAbandoned in it; whether it ended within `grace_s`."""
    if thread.ident is not None and thread.is_alive():
        ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread.ident), ctypes.py_object(GameAbandoned))
        thread.join(grace_s)
    return not thread.is_alive()


def _locked(fn: Callable[[], T], timeout_s: float, what: str) -> tuple[T | None, BaseException | None]:
    """`fn()` under the game lock: its result, or the exception it raised (GameAbandoned aside)."""
    if not _GAME_LOCK.acquire(timeout=timeout_s):
        return None, GameTimeout(f"{what}: another game's call held the game lock for over {timeout_s:g} s")
    try:
        return fn(), None
    except GameAbandoned:
        raise
    except BaseException as exc:  # handed to the rollout, which records it
        return None, exc
    finally:
        _GAME_LOCK.release()


async def call_game(fn: Callable[[], T], *, timeout_s: float, what: str) -> T:
    """`fn()` in a worker thread, one game call at a time; GameTimeout naming `what` when it
    has not returned within `timeout_s` (its thread stopped where that is possible)."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[T] = loop.create_future()

    def settle(result: Any, exc: BaseException | None) -> None:
        if future.done():
            return
        if exc is not None:
            future.set_exception(exc)
        else:
            future.set_result(result)

    def work() -> None:
        try:
            result, error = _locked(fn, timeout_s, what)
            loop.call_soon_threadsafe(settle, result, error)
        except GameAbandoned:  # stopped past its deadline: nobody waits for it any more
            pass
        except RuntimeError:  # the loop closed in between: nobody waits any more
            pass

    thread = threading.Thread(target=work, name=f"rlvr-textarena {what}", daemon=True)
    thread.start()
    try:
        return await asyncio.wait_for(future, timeout_s)
    except TimeoutError:
        stopped = _stop(thread)
        left = "its thread was stopped" if stopped else "its thread could not be stopped and is left running"
        raise GameTimeout(f"{what} did not return within {timeout_s:g} s ({left}); the rollout is abandoned") from None
    except asyncio.CancelledError:  # the episode's own deadline, or the run was interrupted
        _stop(thread)
        raise
