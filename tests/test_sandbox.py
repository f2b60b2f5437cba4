"""The Python sandbox: limits and denials, each reported to the model as a tool error, and the
eval goes on; the refusal where the kernel cannot isolate code, and the `unsafe` opt-out. What is
isolated where is described in rlvr/sandbox/__init__.py; the escapes it stops are in test_sandbox_security.py."""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import json
import os
import resource
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from child_process import descendants, parents

from rlvr import Policy, Rubric, ToolEnv, sandbox
from rlvr.engine import run_rollouts
from rlvr.errors import UsageError
from rlvr.sandbox import (
    Isolation,
    SandboxError,
    SandboxLimits,
    SandboxUnavailableError,
    command,
    explain,
    isolation,
    python_tool,
    run_python,
)
from rlvr.types import Completion, ToolCall

LIMITS = SandboxLimits(timeout_s=2.0, memory_mb=256)


async def _error(code: str, limits: SandboxLimits = LIMITS) -> str:
    """The tool error the model would see for `code` (fails if the run succeeds)."""
    result = await run_python(code, limits)
    with pytest.raises(SandboxError) as info:
        explain(result, limits)
    return str(info.value)


async def test_runs_code_and_returns_what_it_prints() -> None:
    result = await run_python("import math\nprint(math.comb(50, 25))\nprint('note', file=__import__('sys').stderr)")
    assert result.ok and result.stdout == "126410606437752\n" and result.stderr == "note\n"
    assert explain(result, LIMITS) == "126410606437752\n\n[stderr]\nnote"
    assert explain(await run_python("x = 1"), LIMITS).startswith("(no output")


async def test_infinite_loop_is_killed_at_the_wall_clock_limit() -> None:
    t0 = time.monotonic()
    message = await _error("while True:\n    pass", SandboxLimits(timeout_s=1.0))
    assert time.monotonic() - t0 < 10  # not forever (margin: sandbox start-up on a loaded machine)
    assert message == "time limit exceeded: the code ran for more than 1 s and was killed"


async def test_cpu_limit() -> None:
    message = await _error("while True:\n    pass", SandboxLimits(timeout_s=10.0, cpu_s=1))
    assert message.startswith("CPU time limit exceeded")


@pytest.mark.parametrize("code", ["x = bytearray(2 * 1024 ** 3)", "x = []\nwhile True:\n    x.append(' ' * 10 ** 7)"])
async def test_memory_bomb_fails_with_memory_error(code: str) -> None:
    message = await _error(code)
    assert message.startswith("the code exited with status 1") and "MemoryError" in message


@pytest.mark.parametrize(
    "code",
    [
        "import os\nwhile True:\n    os.fork()",
        "import subprocess\nsubprocess.run(['sh', '-c', ':(){ :|:& };:'])",
        "import os\nos.system('echo hi')",
        "import os\nos.posix_spawn('/bin/sh', ['sh'], {})",
        "import multiprocessing\np = multiprocessing.Process(target=print)\np.start()",
    ],
)
async def test_fork_bomb_and_other_processes_are_denied(code: str) -> None:
    message = await _error(code)
    assert "PermissionError: sandbox: " in message and (
        "processes is disabled" in message or "importing _posixsubprocess" in message
    )


async def test_files_outside_the_working_directory_are_denied() -> None:
    """Reads are denied even for world-readable files like /etc/passwd (by the audit hook)."""
    assert "reading '/etc/passwd' is not allowed" in await _error("print(open('/etc/passwd').read())")
    here = Path(__file__).resolve()  # in a checkout under /tmp the work dir's tmpfs covers it
    denied = "No such file" if here.is_relative_to(command.WORKDIR) else "is not allowed"
    assert denied in await _error(f"open({str(here)!r}).read()")
    assert "writing '/var/rlvr-escape' is not allowed" in await _error("open('/var/rlvr-escape', 'w')")
    assert "listing '/' is not allowed" in await _error("import os\nprint(os.listdir('/'))")
    assert "changing '/usr' is not allowed" in await _error("import os\nos.rmdir('/usr')")
    assert "changing '/etc/passwd' is not allowed" in await _error("import os\nos.symlink('/etc/passwd', 'p')")
    escape = "import os\nos.mkdir('d')\nprint(open('d/../../../etc/passwd').read())"
    assert "reading 'd/../../../etc/passwd' is not allowed" in await _error(escape)  # paths are resolved first
    assert not Path("/var/rlvr-escape").exists()
    ok = await run_python(
        "open('a.txt', 'w').write('hi')\nimport os\nos.mkdir('d')\nprint(open('a.txt').read(), sorted(os.listdir('.')))"
    )
    assert ok.ok and ok.stdout == "hi ['a.txt', 'd', 'main.py']\n"


async def test_network_is_denied() -> None:
    for code in (
        "import socket\ns = socket.socket()\ns.connect(('1.1.1.1', 80))",
        "import socket\nsocket.getaddrinfo('example.com', 80)",
        "import urllib.request\nurllib.request.urlopen('http://example.com', timeout=1)",
    ):
        assert "network access is disabled" in await _error(code)


async def test_namespaces_and_the_working_directory() -> None:
    result = await run_python(
        # (socket.if_nameindex() would need a netlink socket, which the syscall filter refuses)
        "import os\nnet = open('/proc/net/dev').read().splitlines()[2:]\n"
        "print(os.getpid(), [line.split(':')[0].strip() for line in net], os.getcwd())",
        audit_hooks=False,
    )
    assert result.isolated and result.stdout == "2 ['lo'] /tmp\n", result  # own PID namespace, no network interfaces


async def test_other_denials_environment_and_cleanup(monkeypatch) -> None:
    elsewhere = _sandbox_pids()  # another test process's runs (pytest -n 2), not this test's
    assert "signals to other processes" in await _error(f"import os\nos.kill({os.getpid()}, 0)")
    assert "importing ctypes is disabled" in await _error("import ctypes")
    monkeypatch.setenv("RLVR_TEST_SECRET", "hunter2")
    result = await run_python("import os\nprint(os.environ.get('RLVR_TEST_SECRET'))")
    assert result.stdout == "None\n"
    # left behind: a run still under this process, or one orphaned (its parent gone) since the start
    mine, parent = descendants(os.getpid()), parents()
    left = {pid for pid in _sandbox_pids() if pid in mine or (parent.get(pid) == 1 and pid not in elsewhere)}
    assert not left


async def test_output_and_file_size_limits() -> None:
    result = await run_python("print('x' * 100000)", SandboxLimits(output_limit=1000))
    assert len(result.stdout) == 1000 and result.stdout_dropped == 100001 - 1000
    assert "more bytes of output dropped" in explain(result, LIMITS)
    message = await _error("open('big', 'wb').write(b'x' * (3 * 1024 * 1024))", SandboxLimits(file_size_mb=1))
    assert "File too large" in message


async def test_cancelling_a_run_kills_it() -> None:
    task = asyncio.create_task(run_python("import time\ntime.sleep(30)", SandboxLimits(timeout_s=60)))
    await asyncio.sleep(0.5)
    before = _sandbox_pids() & descendants(os.getpid())  # not another test process's runs
    assert before
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await asyncio.sleep(0.2)
    assert not (before & _sandbox_pids())


@contextlib.contextmanager
def _runner(cwd: Path, stdin: int) -> Iterator[subprocess.Popen[bytes]]:
    """The sandbox's runner started directly (unisolated, as `unsafe` runs it), in a session of its
    own; its group is killed at the end, whatever the test found."""
    args = [sys.executable, "-I", "-B", "-S", str(command.RUNNER)]
    with subprocess.Popen(args, stdin=stdin, stdout=subprocess.PIPE, cwd=cwd, start_new_session=True) as proc:
        try:
            yield proc
        finally:
            try:
                os.killpg(proc.pid, 9)
            except ProcessLookupError:
                pass


def test_a_runner_whose_caller_hung_up_before_it_started_runs_nothing(tmp_path: Path) -> None:
    """The race that bubblewrap's parent-death signal leaves open: the caller wrote the settings and
    died before the sandbox was up. The runner finds the pipe hung up and kills its group first."""
    read, write = os.pipe()
    os.write(write, command.settings("print('ran')", SandboxLimits(), None, hooks=False, isolated=False))
    os.close(write)
    with _runner(tmp_path, read) as proc:
        os.close(read)
        out, _ = proc.communicate(timeout=30)
    assert proc.returncode == -9 and out == b""
    assert not (tmp_path / "main.py").exists()


@pytest.mark.parametrize("session", [False, True])
def test_a_runner_dies_with_its_children_when_its_caller_hangs_up(tmp_path: Path, session: bool) -> None:
    """Mid-run, the caller's end closing kills the runner and what it started, in a one-shot run
    (stdin replaced by /dev/null) and in a session, whose lines (each raising SIGIO) do not."""
    code = """
import subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
print(child.pid, flush=True)
for line in sys.stdin:
    print(line.strip().upper(), flush=True)
time.sleep(60)
"""
    # unisolated, RLIMIT_NPROC counts every process of a non-root user: keep this one's limit
    soft, _ = resource.getrlimit(resource.RLIMIT_NPROC)
    limits = SandboxLimits(max_processes=4096 if soft == resource.RLIM_INFINITY else soft - 1)
    with _runner(tmp_path, subprocess.PIPE) as proc:
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write(command.settings(code, limits, None, hooks=False, isolated=False, stdin=session))
        proc.stdin.flush()
        child = int(proc.stdout.readline())
        if session:
            for word in ("one", "two", "three"):
                proc.stdin.write(word.encode() + b"\n")
                proc.stdin.flush()
                assert proc.stdout.readline() == word.upper().encode() + b"\n"
        time.sleep(0.2)
        assert proc.poll() is None, "it stopped while its caller was there"
        t0 = time.monotonic()
        proc.stdin.close()
        assert proc.wait(timeout=10) == -9 and time.monotonic() - t0 < 5  # not its 60 s (margin: a loaded machine)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and child in _running():
        time.sleep(0.05)
    assert child not in _running()


def _running() -> set[int]:
    """Processes that are not zombies."""
    found = set()
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0] not in ("Z", "X"):
                found.add(int(pid))
        except (OSError, IndexError):
            pass
    return found


def _sandbox_pids() -> set[int]:
    found = set()
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if b"runner.py" in f.read():
                    found.add(int(pid))
        except OSError:
            pass
    return found


def test_limits_are_checked() -> None:
    for bad in ({"timeout_s": 0}, {"memory_mb": -1}, {"cpu_s": 0}, {"disk_mb": 0}, {"packages": ("no_such_pkg",)}):
        with pytest.raises(UsageError):
            SandboxLimits(**bad)


EVIL = [
    "while True:\n    pass",
    "x = bytearray(2 * 1024 ** 3)",
    "import os\nwhile True:\n    os.fork()",
    "print(open('/etc/passwd').read())",
    "import socket\nsocket.create_connection(('1.1.1.1', 80), 1)",
    "1 / 0",
]


async def test_the_eval_goes_on_after_each_failure() -> None:
    """A policy runs every hostile program, then a good one, then answers: one clean rollout."""

    def fn(messages, rng):
        done = sum(m["role"] == "tool" for m in messages)
        programs = [*EVIL, "print(6 * 7)"]
        if done < len(programs):
            call = ToolCall(f"c{done}", "run_python", json.dumps({"code": programs[done]}))
            return Completion(text="", tool_calls=[call], finish_reason="tool_calls")
        return messages[-1]["content"].strip()

    def failed(state) -> float:
        return float(state.failed_tool_calls)

    env = ToolEnv(
        [{"id": "a", "question": "x"}, {"id": "b", "question": "y"}],
        tools=[python_tool(SandboxLimits(timeout_s=1.0, memory_mb=256))],
        rubric=Rubric([failed]),
    )
    rollouts = await run_rollouts(env, Policy(fn), env.tasks(), concurrency=2)
    for r in rollouts:
        replies = [m["content"] for m in r.completion if m["role"] == "tool"]
        assert r.error is None and r.stop_reason == "no_tool_call" and r.rewards["failed"] == len(EVIL)
        assert all(x.startswith("Error: ") for x in replies[:-1]) and replies[-1] == "42\n"
        assert r.completion[-1]["content"] == "42"


async def test_packages_are_importable_only_when_named() -> None:
    pytest.importorskip("numpy")
    assert "No module named 'numpy'" in await _error("import numpy")
    result = await run_python("import numpy\nprint(numpy.arange(4).sum())", SandboxLimits(packages=("numpy",)))
    assert result.stdout == "6\n", result.stderr


async def test_without_isolation_it_refuses_unless_unsafe(monkeypatch) -> None:
    """One clear line naming the opt-out; with `unsafe=True` the code runs unisolated (audit hooks, rlimits)."""
    missing = Isolation(False, "bwrap is not installed", None, as_root=os.geteuid() == 0)
    monkeypatch.setattr(sandbox, "isolation", lambda: missing)
    with pytest.raises(SandboxUnavailableError) as info:
        await run_python("print(1)")
    assert (
        "\n" not in str(info.value) and "bwrap is not installed" in str(info.value) and "unsafe=True" in str(info.value)
    )
    with pytest.raises(SandboxUnavailableError):
        python_tool(SandboxLimits())
    unsafe = SandboxLimits(unsafe=True)
    result = await run_python("import os\nprint(os.getcwd())", unsafe)
    assert result.ok and not result.isolated and "rlvr-sandbox-" in result.stdout
    assert not Path(result.stdout.strip()).exists()
    assert "reading '/etc/passwd' is not allowed" in await _error("open('/etc/passwd')", unsafe)
    assert await python_tool(unsafe)("print(6 * 7)") == "42\n"


def test_isolation_is_reported() -> None:
    found = isolation()
    assert found.available, found.refusal()  # this project's machines and CI: bwrap from the sandbox extra
    done = subprocess.run([sys.executable, "-m", "rlvr.sandbox"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and "isolation:  yes" in done.stdout, done.stdout + done.stderr


@pytest.mark.parametrize(
    ("filter_program", "expected"),
    [(None, "no syscall filter for"), (b"", "sandbox: the syscall filter failed: Invalid argument")],
    ids=["no-table", "filter-refused"],
)
def test_without_the_syscall_filter_it_refuses(monkeypatch, filter_program: bytes | None, expected: str) -> None:
    """An architecture the filter has no numbers for, or a kernel that will not load it (here an
    empty program, which the kernel rejects): the sandbox fails closed, naming why."""
    probe = importlib.import_module("rlvr.sandbox.isolation")  # (the package's `isolation` is the function)
    monkeypatch.setattr(command, "program", lambda: filter_program)
    monkeypatch.setattr(probe, "program", lambda: filter_program)
    isolation.cache_clear()
    try:
        found = isolation()
        assert not found.available and expected in found.detail, found.detail
        with pytest.raises(SandboxUnavailableError, match="cannot isolate code"):
            python_tool(SandboxLimits())
    finally:
        isolation.cache_clear()
