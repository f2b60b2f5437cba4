"""The first program of every sandboxed run: `rlvr.sandbox` starts it as `python -I -B -S <this file>`.

It reads one JSON line from stdin (the code and the run's settings), then, in this order: ties
its life to the caller's (below); when isolated, joins a new session keyring and caps the working
directory's inodes (`Kernel`: bubblewrap leaves it CAP_SYS_ADMIN for this); switches to the run's
own user id when it was started as root (and CAP_SETUID/SETGID for that); sets the resource
limits; drops every capability and installs the syscall filter (rlvr.sandbox.seccomp), which
nothing after it can lift; writes the code to `main.py` in the working directory, installs the
audit hook, and runs the code as `__main__`.
A traceback leaves out the runner's frames. The code's stdin is empty, unless the settings ask
to keep it (`stdin`: a `SandboxSession`, whose program talks to the caller in lines over stdin
and stdout).

The caller keeps its end of stdin open for the whole run, so the pipe hanging up means the caller
is gone: the runner then kills its process group at once, checked on start and on every SIGIO
after it. bubblewrap's `--die-with-parent` cannot cover that case alone: its sandboxed process asks
for the parent-death signal only after setting up its mounts, so a caller killed during that setup
(tens of milliseconds, longer on a loaded machine) left the code to run to its end.

The audit hook is an extra layer, not the isolation: it turns common mistakes (a socket, a
subprocess, a write outside the working directory) into a clear `PermissionError`, and code that
gets around it still meets the kernel's limits (namespaces, user id, rlimits) set up before.

Standard library only: nothing else is importable where it runs.
"""

from __future__ import annotations

import builtins
import errno
import fcntl
import json
import os
import resource
import select
import signal
import sys
import traceback
from collections.abc import Callable
from typing import Any

CPU_EXIT = 152
"""Exit status after SIGXCPU (128 + 24), so that the caller can tell the CPU limit from a crash."""

NET = frozenset(
    "socket.__new__ socket.connect socket.bind socket.getaddrinfo socket.gethostbyname socket.gethostbyname_ex "
    "socket.gethostbyaddr socket.getnameinfo socket.sendto".split()
)
PROCESSES = frozenset("os.fork os.forkpty os.system os.exec os.posix_spawn os.spawn subprocess.Popen pty.spawn".split())
BLOCKED_IMPORTS = frozenset("ctypes _ctypes _cffi_backend gc _posixsubprocess _testcapi _xxsubinterpreters".split())
MUTATE = {
    "os.remove": 1,
    "os.rmdir": 1,
    "os.mkdir": 1,
    "os.chmod": 1,
    "os.chown": 1,
    "os.truncate": 1,
    "os.utime": 1,
    "shutil.rmtree": 1,
    "os.rename": 2,
    "os.link": 2,
    "os.symlink": 2,
}
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_REMOUNT, MS_BIND, MS_REC, CLONE_NEWNS = 1, 2, 4, 32, 4096, 16384, 0x20000
PR_SET_SECCOMP, PR_SET_NO_NEW_PRIVS = 22, 38
O_WRITE = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND


def on_xcpu(signum: int, frame: object) -> None:
    os.write(2, b"sandbox: CPU time limit exceeded\n")
    os._exit(CPU_EXIT)


def hung_up(fd: int) -> bool:
    """Whether nobody holds the write end of the pipe `fd` any longer (data may still be waiting)."""
    poll = select.poll()
    poll.register(fd, select.POLLIN)
    return any(events & (select.POLLHUP | select.POLLERR) for _, events in poll.poll(0))


def die_with_caller(fd: int) -> None:
    """Kill this process group once the caller's end of the pipe `fd` hangs up, now or later."""

    def on_io(signum: int, frame: object) -> None:  # also raised by each line a session's caller sends
        if hung_up(fd):
            os.killpg(0, signal.SIGKILL)

    signal.signal(signal.SIGIO, on_io)
    fcntl.fcntl(fd, fcntl.F_SETOWN, os.getpid())
    fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) | os.O_ASYNC)
    on_io(signal.SIGIO, None)  # it may have hung up before the signal was armed


def become(uid: int) -> None:
    """Drop root for `uid` (group too, no supplementary groups); every capability goes with it."""
    os.setgroups([])
    os.setresgid(uid, uid, uid)
    os.setresuid(uid, uid, uid)
    if os.getresuid() != (uid, uid, uid) or os.getresgid() != (uid, uid, uid):
        raise SystemExit(f"sandbox: could not switch to uid {uid}")


class Kernel:
    """The kernel calls the standard library lacks, through ctypes (forgotten before the code runs,
    so that importing it stays the audit hook's to refuse): run in `main` in the order below."""

    def __init__(self) -> None:
        import ctypes

        self.ctypes = ctypes
        self.libc = ctypes.CDLL(None, use_errno=True)
        self.libc.syscall.restype = ctypes.c_long

    def _check(self, result: int, what: str, tolerated: tuple[int, ...] = ()) -> None:
        number = self.ctypes.get_errno()
        if result < 0 and number not in tolerated:
            raise SystemExit(f"sandbox: {what} failed: {os.strerror(number)}")

    def join_session_keyring(self, keyctl: int) -> None:
        """A new, empty session keyring: the caller's keys go out of reach (KEYCTL_JOIN_SESSION_KEYRING).
        Tolerated: no keyrings in this kernel (ENOSYS), or keyctl already denied to us (EPERM)."""
        c = self.ctypes
        result = self.libc.syscall(c.c_long(keyctl), c.c_long(1), c.c_void_p(None))
        self._check(result, "joining a new session keyring", (errno.ENOSYS, errno.EPERM))

    def cap_files(self, workdir: str, size: int, files: int, inside: list[str]) -> None:
        """Cap the inodes of the working directory's tmpfs (bwrap sets only its size): a remount run
        by root; in a user namespace (bwrap's second one, which does not own the mounts) a new tmpfs
        in a mount namespace of its own, with the paths bound `inside` it bound again on top."""
        options = f"size={size},nr_inodes={files}"
        where, flags = workdir.encode(), MS_NOSUID | MS_NODEV
        if self.libc.mount(b"tmpfs", where, b"tmpfs", MS_REMOUNT | flags, options.encode()) == 0:
            return
        self._check(self.libc.unshare(CLONE_NEWNS), "a mount namespace for the working directory")
        kept = [os.open(path, os.O_PATH) for path in inside]
        result = self.libc.mount(b"tmpfs", where, b"tmpfs", flags, f"{options},mode=1777".encode())
        self._check(result, "capping the working directory's files")
        for path, fd in zip(inside, kept):
            if os.path.isdir(f"/proc/self/fd/{fd}"):
                os.makedirs(path, exist_ok=True)
            else:
                os.makedirs(os.path.dirname(path), exist_ok=True)
                open(path, "a").close()
            source = f"/proc/self/fd/{fd}".encode()
            self._check(self.libc.mount(source, path.encode(), None, MS_BIND | MS_REC, None), f"binding {path}")
            readonly = MS_REMOUNT | MS_BIND | MS_RDONLY | flags
            self._check(self.libc.mount(None, path.encode(), None, readonly, None), f"binding {path} read-only")
            os.close(fd)
        os.chdir(workdir)

    def drop_capabilities(self) -> None:
        """Empty the effective, permitted, inheritable and ambient sets (in a user namespace bwrap
        leaves CAP_SYS_ADMIN for the remount; run by root, `become` has emptied them already)."""
        c = self.ctypes
        header = (c.c_uint32 * 2)(0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3, this process
        self._check(self.libc.capset(header, (c.c_uint32 * 6)()), "dropping capabilities")

    def install_filter(self, program: bytes) -> None:
        """The syscall filter (rlvr.sandbox.seccomp) for this process and all it starts; irreversible."""
        import ctypes as c  # (imported in __init__)

        class Program(c.Structure):
            _fields_ = [("len", c.c_ushort), ("filter", c.c_char_p)]

        prog = Program(len(program) // 8, program)
        self._check(self.libc.prctl(PR_SET_NO_NEW_PRIVS, c.c_ulong(1), 0, 0, 0), "no_new_privs")
        self._check(self.libc.prctl(PR_SET_SECCOMP, c.c_ulong(2), c.byref(prog), 0, 0), "the syscall filter")

    def forget(self) -> None:
        for name in [m for m in sys.modules if m.partition(".")[0] in ("ctypes", "_ctypes")]:
            del sys.modules[name]
        del self.libc, self.ctypes


def set_limits(limits: dict[str, int | list[int]]) -> None:
    for name, value in limits.items():
        soft, hard = value if isinstance(value, list) else (value, value)
        resource.setrlimit(getattr(resource, name), (soft, hard))


def audit_hook(workdir: str, processes: bool, raw_memory: bool) -> Callable[[str, tuple[Any, ...]], None]:
    """The in-interpreter layer: files only in `workdir` (reads also in Python's own directories),
    no network, no processes unless `processes`, no signals to others, no ctypes or cffi unless
    `raw_memory` (packages such as numpy import ctypes)."""
    blocked = frozenset() if raw_memory else BLOCKED_IMPORTS
    roots = {os.path.realpath(p) for p in {sys.prefix, sys.base_prefix, sys.exec_prefix, *sys.path} if p}
    readable = sorted(r for r in roots if r != "/" and os.path.isdir(r))
    write_roots, read_roots = (workdir,), (workdir, *readable, "/dev/null", "/dev/urandom")
    real, fsdecode, sep, getpid, runner = os.path.realpath, os.fsdecode, os.sep, os.getpid, __file__

    def inside(path: Any, roots: tuple[str, ...]) -> bool:
        p = real(fsdecode(path))
        return any(p == r or p.startswith(r + sep) for r in roots)

    def hook(event: str, args: tuple[Any, ...]) -> None:
        if event == "open":
            path, mode, flags = args
            if path is None or isinstance(path, int):
                return
            write = any(c in (mode or "") for c in "wax+") or bool((flags or 0) & O_WRITE)
            if not inside(path, write_roots if write else read_roots):
                what, where = ("writing", "") if write else ("reading", " and the Python installation")
                raise PermissionError(
                    f"sandbox: {what} {fsdecode(path)!r} is not allowed (only the working directory{where})"
                )
        elif event in NET:
            raise PermissionError("sandbox: network access is disabled")
        elif event in PROCESSES and not processes:
            raise PermissionError("sandbox: starting processes is disabled")
        elif event in ("os.kill", "os.killpg") and args[0] not in (0, getpid()):
            raise PermissionError("sandbox: signals to other processes are disabled")
        elif event == "import" and args[0].partition(".")[0] in blocked:
            raise PermissionError(f"sandbox: importing {args[0]} is disabled")
        elif event == "sys._getframe" and args[0].f_code.co_filename == runner:
            raise PermissionError("sandbox: the runner's frames are out of reach")
        elif event == "object.__setattr__" and args[1] == "__code__":
            raise PermissionError("sandbox: replacing a function's code is disabled")
        elif event in MUTATE:
            for path in args[: MUTATE[event]]:
                if not isinstance(path, int) and not inside(path, write_roots):
                    raise PermissionError(
                        f"sandbox: changing {fsdecode(path)!r} is not allowed (only the working directory)"
                    )
        elif event in ("os.listdir", "os.scandir") and args[0] is not None and not isinstance(args[0], int):
            if not inside(args[0], read_roots):
                raise PermissionError(f"sandbox: listing {fsdecode(args[0])!r} is not allowed")

    return hook


def main() -> None:
    signal.signal(signal.SIGXCPU, on_xcpu)
    config = json.loads(sys.stdin.buffer.readline())
    die_with_caller(os.dup(0))  # a descriptor of its own (not inherited), kept when stdin is replaced
    if not config.get("stdin"):
        os.dup2(os.open(os.devnull, os.O_RDONLY), 0)  # the code's stdin is empty
    kernel = config["kernel"]
    workdir = os.getcwd()
    if kernel:  # isolated: in bwrap's namespaces, with the capabilities it left for this
        calls = Kernel()
        calls.join_session_keyring(kernel["keyctl"])
        calls.cap_files(workdir, kernel["disk"], kernel["files"], kernel["inside"])
    if config["uid"] is not None:
        become(config["uid"])
    set_limits(config["limits"])
    if kernel:
        calls.drop_capabilities()
        calls.install_filter(bytes.fromhex(kernel["filter"]))
        calls.forget()
    sys.path.extend(config["path"])
    builtins.exit = builtins.quit = sys.exit  # type: ignore[assignment]  # `site` (-S) is not loaded
    with open("main.py", "w", encoding="utf-8") as f:
        f.write(config["code"])
    code = compile(config["code"], "main.py", "exec")
    if config["hooks"]:
        sys.addaudithook(audit_hook(workdir, config["processes"], raw_memory=bool(config["path"])))
    del config
    try:
        exec(code, {"__name__": "__main__", "__builtins__": builtins})
    except SystemExit:
        raise
    except BaseException as exc:
        report = traceback.TracebackException.from_exception(exc)
        report.stack = traceback.StackSummary.from_list([f for f in report.stack if f.filename != __file__])
        sys.stdout.flush()
        sys.stderr.write("".join(report.format()))
        sys.stderr.flush()
        os._exit(1)


if __name__ == "__main__":
    main()
