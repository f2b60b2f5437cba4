"""Run untrusted Python in a sandbox that the kernel enforces.

    result = await run_python("print(2 ** 100)", SandboxLimits(timeout_s=5))
    env = ToolEnv(dataset, tools=[python_tool(SandboxLimits())])    # a `run_python(code)` tool

Each run is a new process tree started through bubblewrap (`bwrap`, from the `sandbox` extra:
`pip install 'rlvr[sandbox]'`, or a `bwrap` on PATH). What the kernel enforces:

  - user: an unprivileged uid with no capabilities. Run by a normal user, the code gets a new user
    namespace (uid 1000 inside, the caller's uid outside) that may not create further ones; run
    by root, bwrap keeps root only long enough to mount, and the runner switches to a uid of the
    run's own (0x70000000 + bwrap's pid) before it reads the code;
  - files: a new mount namespace whose root is an empty read-only tmpfs holding only the system
    libraries (/usr/lib), the Python interpreter and its standard library (its site-packages
    hidden), the packages named in `packages`, a new /proc, a minimal /dev and the working
    directory /tmp: a tmpfs of `disk_mb` MiB that disappears with the run. Nothing else of the host
    exists inside: not /etc, $HOME, the repository, the virtual environment or /tmp;
  - processes: a new PID namespace (the code sees only its own processes in its own /proc), a
    new session, RLIMIT_NPROC counted for this run alone (`max_processes`, threads included);
  - network: a new network namespace with only a loopback interface that is down; also new IPC
    and UTS namespaces;
  - system calls: a seccomp filter (`seccomp`) over a new session keyring: no keyrings, SysV
    IPC, sockets but AF_UNIX, new namespaces, mounts, ptrace, bpf, perf events, userfaultfd,
    io_uring, memfd, file locks or notifications;
  - environment: only PATH, HOME, TMPDIR, LANG and the *_NUM_THREADS variables;
  - resources: address space per process (`memory_mb`), so the tree holds at most
    (1 + max_processes) x memory_mb plus `disk_mb`; CPU seconds, file size, open files, the
    work dir's inodes (`max_files`), no message queues;
  - lifetime: after `timeout_s`, on cancellation, and when the calling process dies (even by
    SIGKILL), the PID namespace is killed as a whole. The caller's death is seen twice: bwrap's
    parent-death signal, and the runner's stdin hanging up (the caller holds it open until the
    run ends), which also covers a caller killed while bwrap was still setting up.
Inside the interpreter, an audit hook (rlvr/_sandbox_runner.py) adds clear errors for sockets,
processes, ctypes and paths outside the working directory: a second layer, not the isolation.

Where bwrap cannot build this (not Linux, no bwrap, user namespaces disabled, an architecture
the filter has no table for, a kernel that refuses a step of the runner's setup), `run_python` and
`python_tool` refuse with one line naming the cause. `SandboxLimits(unsafe=True)` opts out: the
code then runs as the caller, on the host's file system, with only rlimits and the audit hook.
`python -m rlvr.sandbox` reports what this machine allows. The threat model and what each layer
stops: docs/environments.md, "Sandbox security".

stdout and stderr are captured and cut to `output_limit` bytes each. `python_tool` turns every
failure (time or CPU limit, memory, a denied operation, an exception, a non-zero exit) into a
`SandboxError`, which a `ToolEnv` shows the model as an `Error: ...` tool message.

`SandboxSession` keeps one sandboxed program running and talks to it in JSON lines over its
stdin and stdout (a REPL whose variables last across requests: environments/rlm).

The package: `limits` (what a run may use), `command` (the bwrap command and the runner's
settings), `seccomp` (the syscall filter), `isolation` (what this machine allows), `session` (a
program that keeps running);
this module starts a run and reads its end.
"""

from __future__ import annotations

import asyncio
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from rlvr._sandbox_runner import CPU_EXIT
from rlvr.envs.tools import ToolCallError
from rlvr.sandbox.command import ROOT_UID_BASE, RUNNER, bwrap_args, kill_group, settings, spawn
from rlvr.sandbox.isolation import Isolation, SandboxUnavailableError, check, isolation
from rlvr.sandbox.limits import SandboxLimits
from rlvr.sandbox.seccomp import program
from rlvr.sandbox.session import SandboxSession

__all__ = [
    "CPU_EXIT",
    "Isolation",
    "SandboxError",
    "SandboxLimits",
    "SandboxResult",
    "SandboxSession",
    "SandboxUnavailableError",
    "explain",
    "isolation",
    "python_tool",
    "run_python",
]


@dataclass
class SandboxResult:
    """What one run did."""

    stdout: str
    stderr: str
    returncode: int | None
    """Exit status; negative = killed by that signal."""
    timed_out: bool
    seconds: float
    stdout_dropped: int = 0
    """Bytes of stdout beyond `output_limit`."""
    stderr_dropped: int = 0
    isolated: bool = False
    """Whether the kernel isolated the run (False only with `unsafe=True` where bwrap cannot)."""

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.timed_out


class SandboxError(ToolCallError):
    """The sandboxed code failed or broke a limit (shown to the model as a tool error)."""


async def _drain(stream: asyncio.StreamReader, limit: int) -> tuple[bytes, int]:
    kept, dropped = bytearray(), 0
    while chunk := await stream.read(65536):
        room = max(limit - len(kept), 0)
        kept += chunk[:room]
        dropped += len(chunk) - min(room, len(chunk))
    return bytes(kept), dropped


async def run_python(code: str, limits: SandboxLimits | None = None, *, audit_hooks: bool = True) -> SandboxResult:
    """Run `code` in a sandbox (see the module docstring); never raises for what the code does.

    Raises `SandboxUnavailableError` where the kernel cannot isolate it and `limits.unsafe` is off.
    `audit_hooks=False` leaves out the in-interpreter layer (tests use it to show the kernel's alone).
    """
    limits = limits or SandboxLimits()
    found = await asyncio.to_thread(isolation)
    check(limits, found)
    if found.available and found.bwrap:
        return await _run(code, limits, bwrap_args(found.bwrap, limits, found.as_root), found.as_root, audit_hooks)
    workdir = tempfile.mkdtemp(prefix="rlvr-sandbox-")
    try:
        args = [sys.executable, "-I", "-B", "-S", str(RUNNER)]
        return await _run(code, limits, args, None, audit_hooks, workdir)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


async def _run(
    code: str,
    limits: SandboxLimits,
    args: list[str],
    as_root: bool | None,
    hooks: bool,
    workdir: str | None = None,
) -> SandboxResult:
    """One run: `as_root` None = unisolated, in `workdir` on the host."""
    t0 = time.monotonic()
    proc = await spawn(args, workdir)
    readers = asyncio.gather(
        _drain(proc.stdout, limits.output_limit),  # type: ignore[arg-type]
        _drain(proc.stderr, limits.output_limit),  # type: ignore[arg-type]
    )
    timed_out, lost = False, False
    try:
        try:
            async with asyncio.timeout(limits.timeout_s):
                uid = ROOT_UID_BASE + proc.pid if as_root else None
                assert proc.stdin is not None
                proc.stdin.write(settings(code, limits, uid, hooks=hooks, isolated=as_root is not None))
                try:
                    await proc.stdin.drain()
                except (BrokenPipeError, ConnectionResetError):
                    pass  # it died before reading: its status and stderr say why
                await proc.wait()  # stdin stays open until then: its hanging up tells the runner we died
        except TimeoutError:
            timed_out = True
        finally:  # also on cancellation: bwrap dies, and its PID namespace with it
            kill_group(proc.pid)
            if proc.stdin is not None:
                proc.stdin.close()
        try:
            async with asyncio.timeout(5.0):  # a straggler holding the pipes cannot hang us
                await proc.wait()
                (out, out_dropped), (err, err_dropped) = await readers
        except TimeoutError:
            lost = True
    finally:
        readers.cancel()
    if lost:
        (out, out_dropped), (err, err_dropped) = (b"", 0), (b"[output lost: a process kept the pipes open]", 0)
    return SandboxResult(
        out.decode("utf-8", "replace"),
        err.decode("utf-8", "replace"),
        proc.returncode,
        timed_out,
        round(time.monotonic() - t0, 3),
        out_dropped,
        err_dropped,
        as_root is not None,
    )


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def explain(result: SandboxResult, limits: SandboxLimits) -> str:
    """The tool's answer for a successful run; raise `SandboxError` describing a failed one."""
    out = result.stdout + (
        f"\n[... {result.stdout_dropped} more bytes of output dropped]" if result.stdout_dropped else ""
    )
    err = result.stderr.strip() + (
        f"\n[... {result.stderr_dropped} more bytes dropped]" if result.stderr_dropped else ""
    )
    if result.ok:
        text = out if out.strip() else "(no output: print() the values you need)"
        return text + (f"\n[stderr]\n{err}" if err else "")
    if result.timed_out:
        problem = f"time limit exceeded: the code ran for more than {limits.timeout_s:g} s and was killed"
    elif result.returncode == CPU_EXIT or result.returncode == -signal.SIGXCPU:
        problem = "CPU time limit exceeded; the process was stopped"
    elif result.returncode is not None and result.returncode < 0:
        name = _signal_name(-result.returncode)
        problem = f"the process was killed by {name}" + (" (a CPU or memory limit)" if name == "SIGKILL" else "")
    else:
        problem = f"the code exited with status {result.returncode}"
    details = "\n".join(
        part for part in (f"[stdout]\n{out.strip()}" if out.strip() else "", f"[stderr]\n{err}" if err else "") if part
    )
    raise SandboxError(problem + (f"\n{details}" if details else ""))


def python_tool(limits: SandboxLimits | None = None) -> Callable[[str], Awaitable[str]]:
    """An async tool `run_python(code) -> output` for a `ToolEnv`, running each call sandboxed.

    Checks at once that the sandbox works here: an environment that cannot isolate code fails
    when it is built (`SandboxUnavailableError`), not on the model's first call.
    """
    limits = limits or SandboxLimits()
    check(limits, isolation())

    async def run_python_tool(code: str) -> str:
        """Run a Python program in a sandbox and return what it prints (stdout).

        Args:
            code: a complete Python program; print() the values you need. No network, no files outside its
                working directory, limited time and memory.
        """
        return explain(await run_python(code, limits), limits)

    run_python_tool.__name__ = "run_python"
    return run_python_tool


def main() -> int:
    """`python -m rlvr.sandbox`: what the sandbox can use here; exit status 1 where it cannot isolate."""
    found = isolation()
    bwrap_version = ""
    if found.bwrap:
        done = subprocess.run([found.bwrap, "--version"], capture_output=True, text=True, env={})
        bwrap_version = done.stdout.strip()
    print(f"user:       {'root' if found.as_root else f'uid {os.geteuid()}'}")
    print(f"bwrap:      {found.bwrap or 'not found'} {bwrap_version}".rstrip())
    code = program()
    machine = platform.machine()
    print(
        f"syscalls:   {f'seccomp filter for {machine}, {len(code) // 8} instructions' if code else f'no filter for {machine}'}"
    )
    print(f"isolation:  {'yes' if found.available else 'NO'}: {found.detail}")
    if not found.available:
        print(found.refusal())
    return 0 if found.available else 1
