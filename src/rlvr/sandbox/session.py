"""A sandboxed program that keeps running between requests: a REPL that keeps its variables.

    session = await SandboxSession.start(SERVER_CODE, SandboxLimits(cpu_s=60))
    await session.send({"op": "exec", "code": "x = 1"})
    reply = await session.receive()          # one JSON object per line, or None once it ended
    await session.close()                    # kills the whole process tree

The program runs in the same sandbox as `run_python` (see `rlvr.sandbox`: the same namespaces,
user, files, network and rlimits), but its stdin stays open: the caller and the program speak
JSON lines over its stdin and stdout. What differs from a one-shot run:

  - `timeout_s` is not applied to the session's life: the caller times each exchange (with
    `asyncio.timeout`) and calls `close()`; RLIMIT_CPU (`cpu_s`) bounds the CPU time of the
    whole session, so set it for the session, not for one request;
  - stderr is collected in the background, its first `output_limit` bytes kept (`stderr`);
  - `close()` kills the process group (bwrap and the PID namespace with it) and waits for it;
    the death of the caller kills it too (bwrap's parent-death signal).
"""

from __future__ import annotations

import asyncio
import json
import shutil
import sys
import tempfile
from typing import Any

from rlvr.sandbox.command import ROOT_UID_BASE, RUNNER, bwrap_args, kill_group, settings, spawn
from rlvr.sandbox.isolation import check, isolation
from rlvr.sandbox.limits import SandboxLimits

LINE_LIMIT = 32 * 1024 * 1024
"""The longest line the program may send (bytes) unless `start` is given another; a longer one ends the session."""


class SandboxSession:
    """A running sandboxed program and its line channel; build it with `start`."""

    def __init__(self, proc: asyncio.subprocess.Process, limits: SandboxLimits, workdir: str | None) -> None:
        self.proc, self.limits, self._workdir = proc, limits, workdir
        self._stderr = bytearray()
        self._reader = asyncio.create_task(self._drain_stderr())
        self.isolated = workdir is None

    @classmethod
    async def start(
        cls, code: str, limits: SandboxLimits | None = None, *, line_limit: int = LINE_LIMIT
    ) -> SandboxSession:
        """Start `code` in a sandbox; raises `SandboxUnavailableError` where the kernel cannot
        isolate it and `limits.unsafe` is off. A line from it longer than `line_limit` bytes ends it."""
        limits = limits or SandboxLimits()
        found = await asyncio.to_thread(isolation)
        check(limits, found)
        workdir: str | None = None
        if found.available and found.bwrap:
            args = bwrap_args(found.bwrap, limits, found.as_root)
        else:
            workdir = tempfile.mkdtemp(prefix="rlvr-session-")
            args = [sys.executable, "-I", "-B", "-S", str(RUNNER)]
        proc = await spawn(args, workdir, line_limit=line_limit)
        uid = ROOT_UID_BASE + proc.pid if found.available and found.as_root else None
        session = cls(proc, limits, workdir)
        assert proc.stdin is not None
        proc.stdin.write(settings(code, limits, uid, hooks=True, isolated=workdir is None, stdin=True))
        return session

    @property
    def pid(self) -> int:
        """The process id of the session's leader (bwrap, or the interpreter when unisolated)."""
        return self.proc.pid

    @property
    def alive(self) -> bool:
        return self.proc.returncode is None

    @property
    def stderr(self) -> str:
        """What the program wrote to stderr so far (its first `output_limit` bytes)."""
        return self._stderr.decode("utf-8", "replace")

    async def _drain_stderr(self) -> None:
        assert self.proc.stderr is not None
        while chunk := await self.proc.stderr.read(65536):
            self._stderr += chunk[: max(self.limits.output_limit - len(self._stderr), 0)]

    async def send(self, message: dict[str, Any]) -> bool:
        """Write one JSON line; False when the program is gone."""
        assert self.proc.stdin is not None
        if not self.alive or self.proc.stdin.is_closing():
            return False
        try:
            self.proc.stdin.write(json.dumps(message).encode() + b"\n")
            await self.proc.stdin.drain()
        except (BrokenPipeError, ConnectionResetError):
            return False
        return True

    async def receive(self) -> dict[str, Any] | None:
        """The program's next JSON object; None once its stdout ended (it exited or was killed).
        A line that is not a JSON object (not UTF-8, nested past the parser's depth, not an object),
        or longer than the session's line limit, ends the session: nothing it sends raises here."""
        assert self.proc.stdout is not None
        try:
            line = await self.proc.stdout.readline()
        except (ValueError, asyncio.LimitOverrunError):
            await self.close()
            return None
        if not line:
            return None
        try:
            message = json.loads(line)
        except (ValueError, RecursionError):  # JSONDecodeError, UnicodeDecodeError, `[[[[...`
            message = None
        if not isinstance(message, dict):
            await self.close()
            return None
        return message

    async def _discard_stdout(self) -> None:
        assert self.proc.stdout is not None
        while await self.proc.stdout.read(65536):
            pass

    async def close(self) -> int | None:
        """Kill the process tree and wait for it; returns its exit status. Safe to call twice."""
        kill_group(self.proc.pid)
        try:
            async with asyncio.timeout(5.0):
                # what it wrote and nobody read (a line past the limit leaves the pipe full and paused):
                # discarded, so that stdout reaches its end; until then Python 3.11's wait() waits
                await self._discard_stdout()
                await self.proc.wait()
                await self._reader
        except TimeoutError:
            self._reader.cancel()
        if self._workdir:
            shutil.rmtree(self._workdir, ignore_errors=True)
        return self.proc.returncode
