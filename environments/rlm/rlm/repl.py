"""The host side of the REPL: one sandboxed Python process per rollout, its variables kept
across turns, and the sub-model calls its `llm_query` makes.

`Repl.run(code)` sends a cell to the server (`rlm.repl_server`, run in a
`rlvr.sandbox.SandboxSession`) and answers each `llm_query` the cell makes with `ask(prompt)`
(the environment's budgeted sub-call) until the cell is done. A cell that outlives
`cell_timeout_s` (time spent in sub-calls not counted) or a server that dies (the CPU or memory
limit) ends the process: the next cell starts a new one, `context` loaded again, other
variables lost, and the cell's output says so.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

from rlm.repl_server import OUTPUT_LIMIT
from rlvr.sandbox import SandboxLimits, SandboxSession

SERVER = (Path(__file__).parent / "repl_server.py").read_text(encoding="utf-8")

Ask = Callable[[str], Awaitable[str]]
"""The sub-call: a prompt in, the reply text out; raises `SubCallRefused` with the reason."""


class SubCallRefused(Exception):
    """A sub-call the budget does not allow (its message goes to the cell as a RuntimeError)."""


@dataclass
class Cell:
    """What one cell did."""

    output: str
    """Its print() output (stdout and stderr), cut to the server's limit."""
    error: str | None = None
    """The exception's last traceback lines, or what ended the REPL."""
    restarted: bool = False
    """The REPL process ended during this cell: the next one starts afresh."""


CODE = re.compile(r"```(?:python|py|repl)?[ \t]*\n(.*?)```", re.DOTALL)
"""A ```python (or py, repl) block of a model turn: one REPL cell."""


def _text(value: object, limit: int | None = OUTPUT_LIMIT) -> str:
    """A string the REPL sent, checked on this side of the channel (a cell can write to it directly):
    a str (else its repr), valid UTF-8 (lone surrogates replaced), cut to `limit` characters as the
    server cuts output."""
    text = value if isinstance(value, str) else "" if value is None else repr(value)
    text = text.encode("utf-8", "replace").decode("utf-8")
    if limit is not None and len(text) > limit:
        text = text[:limit] + f"\n[... {len(text) - limit} more characters of output dropped]"
    return text


class Repl:
    """A REPL process that is started on the first cell and lasts until `close()`."""

    def __init__(self, context: str, limits: SandboxLimits, cell_timeout_s: float) -> None:
        self.context, self.limits, self.cell_timeout_s = context, limits, cell_timeout_s
        self.session: SandboxSession | None = None
        self.starts = 0
        """REPL processes started (more than one: a cell killed one)."""

    async def _start(self) -> SandboxSession:
        # the longest line it may send: a prompt quoting all of `context`, each character at most a
        # six-byte JSON escape (backslash, u, four hex digits), plus 1 MiB for the rest of the message
        line_limit = 6 * len(self.context) + 2**20
        session = await SandboxSession.start(SERVER, self.limits, line_limit=line_limit)
        self.starts += 1
        await session.send({"op": "init", "context": self.context})
        async with asyncio.timeout(self.cell_timeout_s):
            ready = await session.receive()
        if ready is None or ready.get("op") != "ready":
            await session.close()
            raise RuntimeError(f"the REPL did not start: {session.stderr.strip()[-500:] or 'no output'}")
        return session

    async def run(self, code: str, ask: Ask) -> Cell:
        """Run one cell; never raises for what the cell does."""
        if self.session is None or not self.session.alive:
            self.session = await self._start()
        session = self.session
        await session.send({"op": "exec", "code": code})
        deadline = time.monotonic() + self.cell_timeout_s
        try:
            while True:
                async with asyncio.timeout(max(deadline - time.monotonic(), 0.0)):
                    message = await session.receive()
                if message is None:
                    return await self._lost(f"the REPL process ended ({self._why()})")
                if message.get("op") == "done":
                    error = message.get("error")
                    return Cell(_text(message.get("stdout")), None if error is None else _text(error))
                if message.get("op") == "query":
                    t0 = time.monotonic()
                    try:
                        reply = {"op": "answer", "text": await ask(_text(message.get("prompt"), limit=None))}
                    except SubCallRefused as refused:
                        reply = {"op": "answer", "error": str(refused)}
                    deadline += time.monotonic() - t0  # the sub-model's time is not the cell's
                    await session.send(reply)
        except TimeoutError:
            return await self._lost(f"time limit exceeded: the cell ran for more than {self.cell_timeout_s:g} s")

    def _why(self) -> str:
        status = self.session.proc.returncode if self.session else None
        tail = self.session.stderr.strip().splitlines()[-1:] if self.session else []
        return f"exit status {status}" + (f": {tail[0]}" if tail else "")

    async def _lost(self, why: str) -> Cell:
        await self.close()
        return Cell(
            "",
            f"{why}; the REPL was restarted for the next cell (`context` is loaded again, other variables are lost)",
            restarted=True,
        )

    async def close(self) -> None:
        """Kill the REPL process (and everything it started)."""
        if self.session is not None:
            await self.session.close()
            self.session = None
