"""SandboxSession: a sandboxed program that keeps running and speaks JSON lines; variables last
between requests, a broken channel or `close()` ends the whole process tree, and the refusal
and `unsafe` opt-out are those of `run_python`."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from rlvr.sandbox import Isolation, SandboxLimits, SandboxSession, SandboxUnavailableError, session

ECHO = """
import json, os, sys
env = {}
for line in sys.stdin:
    request = json.loads(line)
    if request.get("raw"):
        print(request["raw"], flush=True)
        continue
    try:
        exec(request["code"], env)
        print(json.dumps({"value": env.get("x")}), flush=True)
    except Exception as exc:
        print(json.dumps({"error": f"{type(exc).__name__}: {exc}"}), flush=True)
"""


async def _ask(s: SandboxSession, request: dict[str, str]) -> dict[str, object] | None:
    assert await s.send(request)
    return await s.receive()


async def test_variables_last_the_sandbox_holds_and_close_ends_the_tree() -> None:
    s = await SandboxSession.start(ECHO, SandboxLimits(cpu_s=10))
    try:
        assert s.isolated and await _ask(s, {"code": "x = 20"}) == {"value": 20}
        assert await _ask(s, {"code": "x += 22"}) == {"value": 42}
        denied = await _ask(s, {"code": "x = open('/etc/passwd').read()"})
        uid = await _ask(s, {"code": "import os; x = os.getuid()"})
        assert "PermissionError" in str(denied) and uid is not None and uid["value"] not in (0, None)  # not root
    finally:
        assert await s.close() is not None
    with pytest.raises(ProcessLookupError):
        os.killpg(s.pid, 0)
    assert not s.alive and not await s.send({"code": "x = 1"}) and await s.close() is not None


async def test_a_line_that_is_not_a_json_object_ends_the_session() -> None:
    s = await SandboxSession.start(ECHO, SandboxLimits(cpu_s=10))
    assert await _ask(s, {"raw": "[1, 2]"}) is None and not s.alive


async def test_without_isolation_it_refuses_unless_unsafe(monkeypatch: pytest.MonkeyPatch) -> None:
    missing = Isolation(False, "bwrap is not installed", None, as_root=os.geteuid() == 0)
    monkeypatch.setattr(session, "isolation", lambda: missing)
    with pytest.raises(SandboxUnavailableError, match="bwrap is not installed"):
        await SandboxSession.start(ECHO)
    s = await SandboxSession.start(ECHO, SandboxLimits(unsafe=True, cpu_s=10))
    reply = await _ask(s, {"code": "import os; x = os.getcwd()"})
    assert not s.isolated and reply is not None and "rlvr-session-" in str(reply["value"])
    await s.close()
    assert not Path(str(reply["value"])).exists()
