"""Run untrusted Python in a separate, limited process.

    result = await run_python("print(2 ** 100)", SandboxLimits(timeout_s=5))
    env = ToolEnv(dataset, tools=[python_tool(SandboxLimits())])    # a `run_python(code)` tool

Each run gets a fresh temporary working directory (removed afterwards) and a new process,
`python -I -B` (isolated mode: no user site-packages, no PYTHON* variables, no current
directory on sys.path) with a minimal environment, in a new session.

Enforced by the kernel:
  - wall clock: after `timeout_s` the whole process group is SIGKILLed;
  - rlimits: address space (`memory_mb`: MemoryError), CPU seconds (`cpu_s`: SIGXCPU, which the
    runner turns into exit status 152 and a message), file size
    (`file_size_mb`: writes fail with EFBIG), open files, no core dumps, and RLIMIT_NPROC
    (`max_processes`; it counts every process and thread of the user, and root is exempt);
  - when `unshare` can create namespaces (as root, or where unprivileged user namespaces are
    allowed) and `namespaces=True`: a new network namespace (no interface but a loopback that
    is down: nothing can be reached) and a new PID namespace (killing its first process kills
    every process the code started).
Enforced inside the interpreter by audit hooks (PEP 578; they stop ordinary code and mistakes,
not a determined attacker: code that reaches raw memory or a C extension can get around them):
  - no sockets and no name lookups; no new processes (fork, exec, spawn, subprocess,
    os.system); no signals to other processes; no ctypes, gc or _posixsubprocess;
  - files may be written (and created, renamed, removed) only inside the working directory, and
    read only there and in the Python installation (prefixes and sys.path entries); this
    includes world-readable files such as /etc/passwd.
Not isolated: without namespaces, network access by code that gets around the hooks; reads of
files the user can read, by code that gets around the hooks; CPU and memory bandwidth shared
with the host (no cgroups); the user id, which is the caller's (run as root, the code runs as
root, and only the audit hooks keep it out of other files).

stdout and stderr are captured and cut to `output_limit` bytes each. `python_tool` turns
every failure (time or CPU limit, memory, a denied operation, an exception, a non-zero exit)
into a `SandboxError`, which a `ToolEnv` shows the model as an `Error: ...` tool message.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

from rlvr.envs.tools import ToolCallError
from rlvr.errors import UsageError

# The program the sandboxed interpreter runs first: limits, hooks, then the user's code.
_RUNNER = r"""
import builtins, json, linecache, os, resource, signal, sys, traceback

def on_xcpu(signum, frame):
    os.write(2, b"sandbox: CPU time limit exceeded\n")
    os._exit(152)

def main():
    signal.signal(signal.SIGXCPU, on_xcpu)
    cfg = json.loads(sys.argv[1])
    for name, value in cfg["limits"].items():
        soft, hard = value if isinstance(value, list) else (value, value)
        resource.setrlimit(getattr(resource, name), (soft, hard))
    work = os.path.realpath(cfg["workdir"])
    os.chdir(work)
    with open("main.py", encoding="utf-8") as f:
        code = compile(f.read(), "main.py", "exec")
    roots = {os.path.realpath(p) for p in {sys.prefix, sys.base_prefix, sys.exec_prefix, *sys.path} if p}
    W, R = (work,), (work, *sorted(r for r in roots if r != "/" and os.path.isdir(r)), "/dev/null", "/dev/urandom")
    net = frozenset("socket.__new__ socket.connect socket.bind socket.getaddrinfo socket.gethostbyname "
                    "socket.gethostbyname_ex socket.gethostbyaddr socket.getnameinfo socket.sendto".split())
    proc = frozenset("os.fork os.forkpty os.system os.exec os.posix_spawn os.spawn subprocess.Popen "
                     "os.startfile pty.spawn".split())
    mutate = {"os.remove": 1, "os.rmdir": 1, "os.mkdir": 1, "os.chmod": 1, "os.chown": 1, "os.truncate": 1,
              "os.utime": 1, "shutil.rmtree": 1, "os.rename": 2, "os.link": 2, "os.symlink": 2}.get
    blocked = frozenset("ctypes _ctypes gc _posixsubprocess _testcapi _xxsubinterpreters".split())
    o_write = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
    real, fsdecode, sep, getpid = os.path.realpath, os.fsdecode, os.sep, os.getpid

    def inside(path, roots):
        p = real(fsdecode(path))
        return any(p == r or p.startswith(r + sep) for r in roots)

    def hook(event, args):
        if event == "open":
            path, mode, flags = args
            if path is None or isinstance(path, int):
                return
            write = any(c in (mode or "") for c in "wax+") or bool((flags or 0) & o_write)
            if not inside(path, W if write else R):
                what = "writing" if write else "reading"
                raise PermissionError(f"sandbox: {what} {fsdecode(path)!r} is not allowed "
                                      f"(only the working directory{'' if write else ' and the Python installation'})")
        elif event in net:
            raise PermissionError("sandbox: network access is disabled")
        elif event in proc:
            raise PermissionError("sandbox: starting processes is disabled")
        elif event in ("os.kill", "os.killpg") and args[0] not in (0, getpid()):
            raise PermissionError("sandbox: signals to other processes are disabled")
        elif event == "import" and args[0].partition(".")[0] in blocked:
            raise PermissionError(f"sandbox: importing {args[0]} is disabled")
        elif mutate(event):
            for path in args[:mutate(event)]:
                if not isinstance(path, int) and not inside(path, W):
                    raise PermissionError(f"sandbox: changing {fsdecode(path)!r} is not allowed "
                                          "(only the working directory)")
        elif event in ("os.listdir", "os.scandir") and args[0] is not None and not isinstance(args[0], int):
            if not inside(args[0], R):
                raise PermissionError(f"sandbox: listing {fsdecode(args[0])!r} is not allowed")

    sys.addaudithook(hook)
    del hook, cfg, f
    try:
        exec(code, {"__name__": "__main__", "__builtins__": builtins})
    except SystemExit:
        raise
    except BaseException as exc:
        tb = exc.__traceback__.tb_next if exc.__traceback__ else None
        lines = traceback.format_exception(type(exc), exc, tb)
        sys.stderr.write("".join(x for x in lines if not x.startswith('  File "<string>"')))
        sys.stderr.flush()
        os._exit(1)

main()
"""

CPU_EXIT = 152
"""Exit status of a run stopped by its CPU limit (the runner catches SIGXCPU; 128 + 24)."""
_NAMESPACE_CANDIDATES = (
    ("unshare", "--net", "--pid", "--fork", "--kill-child"),
    ("unshare", "--user", "--map-root-user", "--net", "--pid", "--fork", "--kill-child"),
)
_namespace_probe: tuple[str, ...] | None = None


@dataclass(frozen=True)
class SandboxLimits:
    """What one run may use."""

    timeout_s: float = 10.0
    """Wall-clock seconds before the process group is killed."""
    cpu_s: int | None = None
    """CPU seconds (RLIMIT_CPU); None = the wall-clock limit rounded up, plus one."""
    memory_mb: int = 512
    """Address space in MiB (RLIMIT_AS)."""
    file_size_mb: int = 16
    """Largest file the code may write, in MiB (RLIMIT_FSIZE)."""
    max_open_files: int = 64
    """RLIMIT_NOFILE."""
    max_processes: int = 0
    """RLIMIT_NPROC: counts all of the user's processes and threads (0: no new ones); root is exempt."""
    output_limit: int = 8000
    """Bytes of stdout and of stderr kept; the rest is counted and dropped."""
    namespaces: bool = True
    """Use network and PID namespaces when `unshare` can make them."""

    def __post_init__(self) -> None:
        for name in ("timeout_s", "memory_mb", "file_size_mb", "max_open_files", "output_limit"):
            if getattr(self, name) <= 0:
                raise UsageError(f"SandboxLimits.{name} must be > 0, got {getattr(self, name)}")
        if self.cpu_s is not None and self.cpu_s <= 0:
            raise UsageError(f"SandboxLimits.cpu_s must be > 0 or None, got {self.cpu_s}")


@dataclass
class SandboxResult:
    """What one run did."""

    stdout: str
    stderr: str
    returncode: int | None
    """Exit status; negative = killed by that signal (under a PID namespace, as reported by unshare)."""
    timed_out: bool
    seconds: float
    stdout_dropped: int = 0
    """Bytes of stdout beyond `output_limit`."""
    stderr_dropped: int = 0
    namespaces: bool = False
    """Whether the run had its own network and PID namespaces."""

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.timed_out


class SandboxError(ToolCallError):
    """The sandboxed code failed or broke a limit (shown to the model as a tool error)."""


async def _namespace_prefix() -> tuple[str, ...]:
    """The `unshare` command that works here (probed once per process), or ()."""
    global _namespace_probe
    if _namespace_probe is None:
        found: tuple[str, ...] = ()
        if shutil.which("unshare") and sys.platform.startswith("linux"):
            for candidate in _NAMESPACE_CANDIDATES:
                try:
                    proc = await asyncio.create_subprocess_exec(
                        *candidate,
                        sys.executable,
                        "-I",
                        "-S",
                        "-c",
                        "pass",
                        stdout=asyncio.subprocess.DEVNULL,
                        stderr=asyncio.subprocess.DEVNULL,
                    )
                    async with asyncio.timeout(10):
                        ok = await proc.wait() == 0
                except (OSError, TimeoutError):
                    ok = False
                if ok:
                    found = candidate
                    break
        _namespace_probe = found
    return _namespace_probe


async def namespaces_available() -> bool:
    """Whether runs here get their own network and PID namespaces."""
    return bool(await _namespace_prefix())


async def _drain(stream: asyncio.StreamReader, limit: int) -> tuple[bytes, int]:
    kept, dropped = bytearray(), 0
    while chunk := await stream.read(65536):
        room = max(limit - len(kept), 0)
        kept += chunk[:room]
        dropped += len(chunk) - min(room, len(chunk))
    return bytes(kept), dropped


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _rlimits(limits: SandboxLimits) -> dict[str, int | list[int]]:
    cpu = limits.cpu_s or int(-(-limits.timeout_s // 1)) + 1
    mib = 1024 * 1024
    return {
        "RLIMIT_AS": limits.memory_mb * mib,
        "RLIMIT_CPU": [cpu, cpu + 1],
        "RLIMIT_FSIZE": limits.file_size_mb * mib,
        "RLIMIT_NOFILE": limits.max_open_files,
        "RLIMIT_CORE": 0,
        "RLIMIT_NPROC": limits.max_processes,
    }


async def run_python(code: str, limits: SandboxLimits | None = None) -> SandboxResult:
    """Run `code` in a sandbox (see the module docstring); never raises for what the code does."""
    limits = limits or SandboxLimits()
    if not sys.executable:
        raise UsageError("the sandbox needs sys.executable to start a Python process; it is empty here")
    prefix = await _namespace_prefix() if limits.namespaces else ()
    workdir = tempfile.mkdtemp(prefix="rlvr-sandbox-")
    try:
        Path(workdir, "main.py").write_text(code, encoding="utf-8")
        config = json.dumps({"workdir": workdir, "limits": _rlimits(limits)})
        env = {
            "PATH": os.defpath,
            "LANG": "C.UTF-8",
            "HOME": workdir,
            "TMPDIR": workdir,
            "OMP_NUM_THREADS": "1",
            "OPENBLAS_NUM_THREADS": "1",
            "MKL_NUM_THREADS": "1",
        }
        t0 = time.monotonic()
        proc = await asyncio.create_subprocess_exec(
            *prefix,
            sys.executable,
            "-I",
            "-B",
            "-c",
            _RUNNER,
            config,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            cwd=workdir,
            env=env,
            start_new_session=True,
        )
        readers = asyncio.gather(
            _drain(proc.stdout, limits.output_limit),  # type: ignore[arg-type]
            _drain(proc.stderr, limits.output_limit),
        )  # type: ignore[arg-type]
        timed_out, lost = False, False
        try:
            try:
                async with asyncio.timeout(limits.timeout_s):
                    await proc.wait()
            except TimeoutError:
                timed_out = True
            finally:  # also on cancellation: nothing the code started outlives the run
                _kill_group(proc.pid)
            try:
                async with asyncio.timeout(5.0):  # a straggler holding the pipes cannot hang us
                    await proc.wait()
                    (out, out_dropped), (err, err_dropped) = await readers
            except TimeoutError:
                lost = True
        finally:
            readers.cancel()
        seconds = time.monotonic() - t0
        if lost:
            (out, out_dropped), (err, err_dropped) = (b"", 0), (b"[output lost: a process kept the pipes open]", 0)
        return SandboxResult(
            out.decode("utf-8", "replace"),
            err.decode("utf-8", "replace"),
            proc.returncode,
            timed_out,
            round(seconds, 3),
            out_dropped,
            err_dropped,
            bool(prefix),
        )
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


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
    """An async tool `run_python(code) -> output` for a `ToolEnv`, running each call sandboxed."""
    limits = limits or SandboxLimits()

    async def run_python_tool(code: str) -> str:
        """Run a Python program in a sandbox and return what it prints (stdout).

        Args:
            code: a complete Python program; print() the values you need. No network, no files outside its
                working directory, limited time and memory.
        """
        return explain(await run_python(code, limits), limits)

    run_python_tool.__name__ = "run_python"
    return run_python_tool
