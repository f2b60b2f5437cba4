"""The bwrap command of a run: what it mounts, which namespaces it makes, the environment it
sets, and the settings the runner (rlvr/_sandbox_runner.py) reads on its stdin."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import signal
import sys
import sysconfig
from pathlib import Path

from rlvr.errors import UsageError
from rlvr.sandbox.limits import SandboxLimits, rlimits

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
    return await asyncio.create_subprocess_exec(
        *args,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        cwd=workdir,
        env={**ENV, "HOME": workdir, "TMPDIR": workdir} if workdir else {},
        start_new_session=True,
        limit=line_limit,
    )


def kill_group(pid: int) -> None:
    """SIGKILL a run's process group (bwrap dies, and its PID namespace with it)."""
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def bwrap_args(bwrap: str, limits: SandboxLimits, as_root: bool) -> list[str]:
    exe, python = _interpreter()
    args = [bwrap, "--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try"]
    args += ["--die-with-parent", "--new-session", "--clearenv"]
    if as_root:  # mounts need root; the runner then switches to the run's uid, which ends every capability
        args += ["--cap-drop", "ALL", "--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]
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
    args += ["--ro-bind", str(RUNNER), _RUNNER_INSIDE, "--proc", "/proc", "--dev", "/dev"]
    args += ["--chdir", WORKDIR, "--remount-ro", "/", "--", exe, "-I", "-B", "-S", _RUNNER_INSIDE]
    return args


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
    }
    return json.dumps(settings).encode() + b"\n"
