"""The sandbox's syscall filter as a program: run on a small interpreter of classic BPF for both
architectures (only one of them can run it for real here: tests/test_sandbox_security.py), and its
table of syscall numbers checked against the kernel headers where they are installed."""

from __future__ import annotations

import errno
import re
import struct
from pathlib import Path

import pytest

from rlvr.sandbox.seccomp import DENIED, SYSCALLS, program

ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}
ALLOW, KILL = 0x7FFF0000, 0x80000000


def errno_of(number: int) -> int:
    return 0x00050000 | number


def run(code: bytes, arch: int, nr: int, *args: int) -> int:
    """What the kernel would do: interpret the instructions this filter uses on one seccomp_data."""
    data = struct.pack("<iIQ6Q", nr, arch, 0, *(list(args) + [0] * (6 - len(args))))
    insns = [struct.unpack("<HBBI", code[i : i + 8]) for i in range(0, len(code), 8)]
    pc, a = 0, 0
    while True:
        op, jt, jf, k = insns[pc]
        if op == 0x20:  # ld [k]
            a = struct.unpack_from("<I", data, k)[0]
        elif op == 0x06:  # ret k
            return k
        elif op in (0x15, 0x35, 0x45):  # jeq, jge, jset
            hit = a == k if op == 0x15 else a >= k if op == 0x35 else bool(a & k)
            pc += jt if hit else jf
        else:
            raise AssertionError(f"unexpected instruction {op:#x}")
        pc += 1


@pytest.mark.parametrize("machine", ["x86_64", "aarch64"])
def test_the_filter_denies_what_its_table_says_and_allows_the_rest(machine: str) -> None:
    code, n, arch = program(machine), SYSCALLS[machine], ARCH[machine]
    assert code is not None and len(code) // 8 < 256  # jumps are 8-bit; sock_fprog.len is 16-bit
    for name in DENIED:
        if name in n:
            assert run(code, arch, n[name]) == errno_of(errno.EPERM), name
    read, write = {"x86_64": (0, 1), "aarch64": (63, 64)}[machine]
    assert run(code, arch, read, 0, 0, 0) == ALLOW and run(code, arch, write, 1, 0, 0) == ALLOW
    assert run(code, ARCH["aarch64" if machine == "x86_64" else "x86_64"], read) == KILL  # another ABI
    assert run(code, 0x40000003, read) == KILL  # i386's AUDIT_ARCH
    assert run(code, arch, n["socket"], 1, 1, 0) == ALLOW  # AF_UNIX
    for family in (2, 10, 16, 17, 38, 40):  # inet, inet6, netlink, packet, alg, vsock
        assert run(code, arch, n["socket"], family, 1, 0) == errno_of(errno.EAFNOSUPPORT), family
    assert run(code, arch, n["socketpair"], 1, 1, 0) == ALLOW
    assert run(code, arch, n["clone"], 0x3D0F00) == ALLOW  # pthread_create's flags
    assert run(code, arch, n["clone"], 0x01200011) == ALLOW  # fork's
    for flag in (0x80, 0x20000, 0x02000000, 0x04000000, 0x08000000, 0x10000000, 0x20000000, 0x40000000):
        assert run(code, arch, n["clone"], 0x11 | flag) == errno_of(errno.EPERM), hex(flag)
        assert run(code, arch, n["unshare"], flag) == errno_of(errno.EPERM), hex(flag)
    assert run(code, arch, n["unshare"], 0x400) == ALLOW  # CLONE_FILES: no namespace
    assert run(code, arch, n["clone3"], 0, 88) == errno_of(errno.ENOSYS)
    assert run(code, arch, n["flock"], 3, 2) == errno_of(errno.ENOLCK)
    for command in (5, 6, 7, 36, 37, 38, 1024, 1026):
        assert run(code, arch, n["fcntl"], 3, command) == errno_of(errno.ENOLCK), command
    for command in (0, 1, 2, 3, 4, 1030):  # F_DUPFD, F_GETFD, F_SETFD, F_GETFL, F_SETFL, F_DUPFD_CLOEXEC
        assert run(code, arch, n["fcntl"], 3, command) == ALLOW, command


def test_x32_calls_are_killed() -> None:
    code = program("x86_64")
    assert code is not None and run(code, ARCH["x86_64"], 0x40000000 | 250) == KILL  # keyctl through x32


def test_an_architecture_without_a_table_gets_no_filter() -> None:
    assert program("riscv64") is None and program("ppc64le") is None


@pytest.mark.parametrize(
    ("machine", "header"),
    [
        ("x86_64", "/usr/include/x86_64-linux-gnu/asm/unistd_64.h"),
        ("x86_64", "/usr/include/asm/unistd_64.h"),
        ("aarch64", "/usr/include/asm-generic/unistd.h"),
    ],
)
def test_the_numbers_are_the_kernel_headers(machine: str, header: str) -> None:
    if not Path(header).exists():
        pytest.skip(f"{header} is not installed here")
    text = Path(header).read_text()
    found = {m[1]: int(m[2]) for m in re.finditer(r"#define __NR(?:3264)?_(\w+)\s+(\d+)", text)}
    checked = {name: number for name, number in SYSCALLS[machine].items() if name in found}
    assert len(checked) >= len(SYSCALLS[machine]) - 2  # (open_tree_attr is newer than most headers)
    assert {name: found[name] for name in checked} == checked
