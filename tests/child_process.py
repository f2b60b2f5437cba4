"""Helpers for tests that start a child process, signal it, or look for what it left."""

from __future__ import annotations

import os
import signal


def default_sigint() -> None:
    """`preexec_fn` for a child that a test interrupts: a suite started in the background
    (`make test &`) runs with SIGINT ignored, and a child inherits that and would not stop
    (it ran to the end, rc 0); give it the default, as in a terminal."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def parents() -> dict[int, int]:
    """Every process's parent, read from /proc (a process that ends meanwhile is left out).
    The command name in /proc/PID/stat may hold spaces and ')', so fields follow its last ')'."""
    found = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/stat", "rb") as f:
                found[int(pid)] = int(f.read().rpartition(b")")[2].split()[1])
        except (OSError, IndexError, ValueError):
            continue
    return found


def descendants(root: int) -> set[int]:
    """The processes under `root`: its children, theirs, and so on."""
    children: dict[int, list[int]] = {}
    for pid, ppid in parents().items():
        children.setdefault(ppid, []).append(pid)
    found, todo = set(), [root]
    while todo:
        for child in children.get(todo.pop(), []):
            found.add(child)
            todo.append(child)
    return found
