"""The sandbox's syscall filter: a seccomp BPF program, built here from the table below and
installed by the runner (rlvr/_sandbox_runner.py) as the last step before the code runs.

The filter closes what the namespaces leave open to a process that calls the kernel directly
(ctypes or cffi loaded past the audit hook): the caller's keyrings, SysV IPC (memory outside
RLIMIT_AS), sockets other than AF_UNIX (AF_VSOCK, AF_NETLINK, AF_ALG, which a network namespace
does not isolate or which reach kernel code), new namespaces (a nested user namespace has full
capabilities inside it), mounts, ptrace, bpf, perf events, userfaultfd, io_uring (its requests
do not pass through this filter), memfd (memory outside RLIMIT_AS), the host's kernel log (syslog,
where kernel.dmesg_restrict is 0), and the file locks, leases
and change notifications that concurrent runs could signal each other with through the files
they share read-only (the standard library, /dev/null).

A denied call fails with an errno (EPERM; EAFNOSUPPORT for a socket family; ENOSYS for clone3,
whose flags a filter cannot read, so that the C library falls back to clone; ENOLCK for locks);
a call from another ABI (x32, or 32-bit calls on x86_64) kills the process. The numbers are
those of x86_64 and aarch64 (asm/unistd_64.h, asm-generic/unistd.h); elsewhere `program()`
returns None and the sandbox refuses to run (it fails closed).

Python's standard library has no seccomp binding and libseccomp is not installed everywhere bwrap
is, so the program is assembled here: a few dozen instructions, checked by `tests/test_sandbox_security.py`.
"""

from __future__ import annotations

import errno
import functools
import platform
import struct

# seccomp_data: int nr; u32 arch; u64 instruction_pointer; u64 args[6] (little-endian on both)
_NR, _ARCH = 0, 4


def _arg(i: int) -> int:
    """Offset of the low 32 bits of argument `i` (the kernel reads these arguments as 32-bit values)."""
    return 16 + 8 * i


_LD_W_ABS, _JEQ, _JSET, _JGE, _RET = 0x20, 0x15, 0x45, 0x35, 0x06
_KILL_PROCESS, _ALLOW, _ERRNO = 0x80000000, 0x7FFF0000, 0x00050000
_AUDIT_ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}
_X32_BIT = 0x40000000

SYSCALLS: dict[str, dict[str, int]] = {
    # aarch64 has no inotify_init (inotify_init1 only)
    "x86_64": {
        "socket": 41, "socketpair": 53, "clone": 56, "clone3": 435, "unshare": 272, "setns": 308,
        "mount": 165, "umount2": 166, "pivot_root": 155, "open_tree": 428, "move_mount": 429,
        "fsopen": 430, "fsconfig": 431, "fsmount": 432, "fspick": 433, "mount_setattr": 442,
        "open_tree_attr": 467, "ptrace": 101, "process_vm_readv": 310, "process_vm_writev": 311,
        "bpf": 321, "perf_event_open": 298, "userfaultfd": 323, "keyctl": 250, "add_key": 248,
        "request_key": 249, "shmget": 29, "semget": 64, "msgget": 68, "memfd_create": 319,
        "memfd_secret": 447, "flock": 73, "fcntl": 72, "inotify_init": 253, "inotify_init1": 294,
        "inotify_add_watch": 254, "fanotify_init": 300, "io_uring_setup": 425, "io_uring_enter": 426,
        "io_uring_register": 427, "syslog": 103,
    },
    "aarch64": {
        "socket": 198, "socketpair": 199, "clone": 220, "clone3": 435, "unshare": 97, "setns": 268,
        "mount": 40, "umount2": 39, "pivot_root": 41, "open_tree": 428, "move_mount": 429,
        "fsopen": 430, "fsconfig": 431, "fsmount": 432, "fspick": 433, "mount_setattr": 442,
        "open_tree_attr": 467, "ptrace": 117, "process_vm_readv": 270, "process_vm_writev": 271,
        "bpf": 280, "perf_event_open": 241, "userfaultfd": 282, "keyctl": 219, "add_key": 217,
        "request_key": 218, "shmget": 194, "semget": 190, "msgget": 186, "memfd_create": 279,
        "memfd_secret": 447, "flock": 32, "fcntl": 25, "inotify_init1": 26, "inotify_add_watch": 27,
        "fanotify_init": 262, "io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427, "syslog": 116,
    },
}  # fmt: skip

DENIED = (
    "keyctl add_key request_key shmget semget msgget setns mount umount2 pivot_root open_tree move_mount "
    "fsopen fsconfig fsmount fspick mount_setattr open_tree_attr ptrace process_vm_readv process_vm_writev "
    "bpf perf_event_open userfaultfd memfd_create memfd_secret inotify_init inotify_init1 inotify_add_watch "
    "fanotify_init io_uring_setup io_uring_enter io_uring_register syslog"
).split()
"""Calls denied whatever their arguments (EPERM), where the architecture has them."""

NAMESPACES = 0x80 | 0x20000 | 0x02000000 | 0x04000000 | 0x08000000 | 0x10000000 | 0x20000000 | 0x40000000
"""CLONE_NEWTIME, NEWNS, NEWCGROUP, NEWUTS, NEWIPC, NEWUSER, NEWPID, NEWNET: refused in clone and unshare."""
AF_UNIX = 1
LOCKS = (5, 6, 7, 36, 37, 38, 1024, 1026)
"""fcntl commands refused: F_GETLK, F_SETLK, F_SETLKW, F_OFD_GETLK, F_OFD_SETLK, F_OFD_SETLKW,
F_SETLEASE, F_NOTIFY (what a lock, lease or notification on a shared file would tell another run)."""


def _insn(code: int, k: int, jt: int = 0, jf: int = 0) -> bytes:
    return struct.pack("<HBBI", code, jt, jf, k)


def _ret(value: int) -> bytes:
    return _insn(_RET, value)


def _errno(number: int) -> bytes:
    return _ret(_ERRNO | number)


def _when_arg(index: int, tests: list[tuple[int, int]], denied: int) -> list[bytes]:
    """A call's body: load argument `index`; any (jump code, value) test that holds denies with
    errno `denied`, otherwise allow. Ends in returns, so the syscall number need not be reloaded."""
    body = [_insn(_LD_W_ABS, _arg(index))]
    for i, (code, value) in enumerate(tests):
        body.append(_insn(code, value, jt=len(tests) - i, jf=0))  # to the deny at the end
    return [*body, _ret(_ALLOW), _errno(denied)]


def _bodies(numbers: dict[str, int]) -> list[tuple[int, list[bytes]]]:
    """(syscall number, what runs for it) for every call the filter looks at."""
    rules = [(numbers[name], [_errno(errno.EPERM)]) for name in DENIED if name in numbers]
    rules.append((numbers["clone3"], [_errno(errno.ENOSYS)]))
    for name in ("clone", "unshare"):
        rules.append((numbers[name], _when_arg(0, [(_JSET, NAMESPACES)], errno.EPERM)))
    for name in ("socket", "socketpair"):  # allow AF_UNIX only: deny any other value
        body = [
            _insn(_LD_W_ABS, _arg(0)),
            _insn(_JEQ, AF_UNIX, jt=0, jf=1),
            _ret(_ALLOW),
            _errno(errno.EAFNOSUPPORT),
        ]
        rules.append((numbers[name], body))
    rules.append((numbers["flock"], [_errno(errno.ENOLCK)]))
    rules.append((numbers["fcntl"], _when_arg(1, [(_JEQ, cmd) for cmd in LOCKS], errno.ENOLCK)))
    return rules


@functools.cache
def program(machine: str | None = None) -> bytes | None:
    """The filter for this machine's architecture (`platform.machine()`), as sock_filter
    instructions; None where the table has no numbers for it."""
    machine = machine or platform.machine()
    numbers = SYSCALLS.get(machine)
    if numbers is None:
        return None
    code = [
        _insn(_LD_W_ABS, _ARCH),
        _insn(_JEQ, _AUDIT_ARCH[machine], jt=1, jf=0),
        _ret(_KILL_PROCESS),
        _insn(_LD_W_ABS, _NR),
    ]
    if machine == "x86_64":  # x32 calls (numbers with bit 30 set) reach the same kernel code
        code += [_insn(_JGE, _X32_BIT, jt=0, jf=1), _ret(_KILL_PROCESS)]
    for number, body in _bodies(numbers):
        code.append(_insn(_JEQ, number, jt=0, jf=len(body)))
        code += body
    code.append(_ret(_ALLOW))
    return b"".join(code)
