"""What one sandboxed run may use (`SandboxLimits`), and the rlimits that enforce it."""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass

from rlvr.errors import UsageError


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
    max_files: int = 8192
    """Files and directories the working directory may hold (its tmpfs's nr_inodes; each costs the kernel ~1 KiB)."""
    max_processes: int = 0
    """Processes and threads the code may start besides its own (RLIMIT_NPROC, counted for this run)."""
    output_limit: int = 8000
    """Bytes of stdout and of stderr kept; the rest is counted and dropped."""
    packages: tuple[str, ...] = ()
    """Installed packages the code may import besides the standard library, e.g. ("numpy",)."""
    unsafe: bool = False
    """Run without kernel isolation where there is none (the caller's uid and files; see the module doc)."""

    def __post_init__(self) -> None:
        for name in (
            "timeout_s",
            "memory_mb",
            "disk_mb",
            "file_size_mb",
            "max_open_files",
            "max_files",
            "output_limit",
        ):
            if getattr(self, name) <= 0:
                raise UsageError(f"SandboxLimits.{name} must be > 0, got {getattr(self, name)}")
        if self.cpu_s is not None and self.cpu_s <= 0:
            raise UsageError(f"SandboxLimits.cpu_s must be > 0 or None, got {self.cpu_s}")
        if self.max_processes < 0:
            raise UsageError(f"SandboxLimits.max_processes must be >= 0, got {self.max_processes}")
        for name in self.packages:
            if importlib.util.find_spec(name) is None:
                raise UsageError(f"SandboxLimits.packages: {name!r} is not installed here; install it or drop it")


def rlimits(limits: SandboxLimits, own_processes: int) -> dict[str, int | list[int]]:
    cpu = limits.cpu_s or int(-(-limits.timeout_s // 1)) + 1
    mib = 1024 * 1024
    return {
        "RLIMIT_AS": limits.memory_mb * mib,
        "RLIMIT_CPU": [cpu, cpu + 1],
        "RLIMIT_FSIZE": limits.file_size_mb * mib,
        "RLIMIT_NOFILE": limits.max_open_files,
        "RLIMIT_CORE": 0,
        "RLIMIT_MSGQUEUE": 0,  # POSIX message queues: kernel memory outside RLIMIT_AS
        "RLIMIT_NPROC": own_processes + limits.max_processes,
    }
