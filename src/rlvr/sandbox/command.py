"""The bwrap command of a run: what it mounts, which namespaces it makes, the environment it
sets, and the settings the runner (rlvr/_sandbox_runner.py) reads on its stdin."""

from __future__ import annotations

import asyncio
import functools
import importlib.util
import json
import os
import platform
import signal
import sys
import sysconfig
from pathlib import Path

from rlvr.errors import UsageError
from rlvr.sandbox.limits import SandboxLimits, rlimits
from rlvr.sandbox.seccomp import SYSCALLS, program

RUNNER = Path(__file__).parent.parent / "_sandbox_runner.py"
WORKDIR = "/tmp"
"""The working directory inside the sandbox (a tmpfs of `disk_mb`)."""
ROOT_UID_BASE = 0x70000000
"""Run by root, a run's uid is this plus bwrap's pid: a uid of its own, so RLIMIT_NPROC counts only it."""
_INSIDE_UID = 1000
_RUNNER_INSIDE = "/run/rlvr/runner.py"
ENV = {
    "PATH": "/usr/bin:/bin",
    "LANG": "C.UTF-8",
    "OMP_NUM_THREADS": "1",
    "OPENBLAS_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
}
"""The environment variables of a run (plus HOME and TMPDIR, its working directory)."""


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


async def spawn(args: list[str], workdir: str | None, *, line_limit: int = 2**16) -> asyncio.subprocess.Process:
    """Start a run's process (bwrap, or the runner itself when `workdir` is given: unisolated, in
    that directory of the host) in a new session, with pipes for stdin, stdout and stderr."""
    args, kept = hide_host_paths(args) if workdir is None else (args, [])
    try:
        return await asyncio.create_subprocess_exec(
            "bwrap" if kept else args[0],  # argv[0] (bwrap's path names a host directory)
            *args[1:],
            executable=args[0],
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            cwd=workdir,
            env={**ENV, "HOME": workdir, "TMPDIR": workdir} if workdir else {},
            start_new_session=True,
            limit=line_limit,
            pass_fds=kept,
        )
    finally:
        for fd in kept:
            os.close(fd)


@functools.cache
def _runner_text() -> bytes:
    return RUNNER.read_bytes()


def _memfd(name: str, data: bytes) -> int:
    fd = os.memfd_create(name, 0)  # the host's (the sandbox has none)
    os.write(fd, data)
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


def hide_host_paths(args: list[str]) -> tuple[list[str], list[int]]:
    """bwrap's command line with its options in a memfd it reads (`--args FD`) and the runner copied
    in (`--ro-bind-data`) instead of bound, and the descriptors to pass: bwrap's command line is the
    sandbox's /proc/1/cmdline, and a bind names its host path in /proc/self/mountinfo."""
    end = args.index("--")
    options = args[1:end]
    at = options.index(str(RUNNER))  # "--ro-bind", RUNNER, _RUNNER_INSIDE
    runner = _memfd("rlvr-runner", _runner_text())
    options[at - 1 : at + 2] = ["--perms", "0444", "--ro-bind-data", str(runner), _RUNNER_INSIDE]
    packed = _memfd("bwrap-args", b"".join(option.encode() + b"\0" for option in options))
    return [args[0], "--args", str(packed), *args[end:]], [packed, runner]


def kill_group(pid: int) -> None:
    """SIGKILL a run's process group (bwrap dies, and its PID namespace with it)."""
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _mounted(limits: SandboxLimits) -> list[str]:
    """The host paths bound into a run at the same paths: the interpreter's and the packages'."""
    return [*_interpreter()[1], *_packages(limits.packages)[0]]


def bwrap_args(bwrap: str, limits: SandboxLimits, as_root: bool) -> list[str]:
    exe, python = _interpreter()
    args = [bwrap, "--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try"]
    args += ["--die-with-parent", "--new-session", "--clearenv"]
    # the runner remounts the working directory (its inode cap: CAP_SYS_ADMIN), then drops every
    # capability: run by root by switching to the run's uid, in a user namespace with capset
    args += ["--cap-drop", "ALL", "--cap-add", "CAP_SYS_ADMIN"]
    if as_root:
        args += ["--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]
    else:
        args += ["--unshare-user", "--disable-userns", "--uid", str(_INSIDE_UID), "--gid", str(_INSIDE_UID)]
    for name, value in {**ENV, "HOME": WORKDIR, "TMPDIR": WORKDIR}.items():
        args += ["--setenv", name, value]
    system = [top for top in ("/lib", "/lib64", "/usr/lib", "/usr/lib64") if os.path.isdir(top)]
    binds, _ = _packages(limits.packages)
    mounted = [*system, "/etc/ld.so.cache", *python, *binds, _RUNNER_INSIDE]
    # the work dir first: a package or interpreter that lives under it (a checkout in /tmp) is
    # bound on top of it below instead of being covered by it
    args += ["--perms", "1777", "--size", str(limits.disk_mb * 1024 * 1024), "--tmpfs", WORKDIR]
    parents = {str(parent) for path in mounted for parent in Path(path).parents} - {"/", WORKDIR}
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
    # /dev read-only: in a user namespace its tmpfs (no size) would be the code's to fill
    args += ["--ro-bind", str(RUNNER), _RUNNER_INSIDE, "--proc", "/proc", "--dev", "/dev", "--remount-ro", "/dev"]
    args += ["--chdir", WORKDIR, "--remount-ro", "/", "--", exe, "-I", "-B", "-S", _RUNNER_INSIDE]
    return args


def _kernel(limits: SandboxLimits) -> dict[str, object]:
    """What the runner sets up in the kernel before the code runs (see its `Kernel`)."""
    code = program()
    if code is None:
        raise UsageError(f"the sandbox has no syscall filter for {platform.machine()}")
    return {
        "filter": code.hex(),
        "keyctl": SYSCALLS[platform.machine()]["keyctl"],
        "disk": limits.disk_mb * 1024 * 1024,
        "files": limits.max_files,
        "inside": [path for path in _mounted(limits) if path.startswith(WORKDIR + "/")],
    }


def settings(
    code: str, limits: SandboxLimits, uid: int | None, *, hooks: bool, isolated: bool = True, stdin: bool = False
) -> bytes:
    """The runner's settings: one JSON line (`stdin`: the code keeps reading the caller's lines after it)."""
    # RLIMIT_NPROC counts per user (per user namespace): as root the run's uid has only the runner;
    # in a user namespace bwrap's init process counts too; unisolated, root is exempt anyway.
    own = 1 if uid is not None or not isolated else 2
    _, path = _packages(limits.packages)
    settings = {
        "code": code,
        "uid": uid,
        "limits": rlimits(limits, own),
        "hooks": hooks,
        "processes": limits.max_processes > 0,
        "path": path,
        "stdin": stdin,
        "kernel": _kernel(limits) if isolated else None,
    }
    return json.dumps(settings).encode() + b"\n"
