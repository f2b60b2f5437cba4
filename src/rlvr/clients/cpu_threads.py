"""How torch's CPU kernels use threads: so that a busy machine is not oversubscribed.

Torch starts one intra-op thread per core, and its OpenMP threads spin while they wait for each
other; with other processes on the cores they spin against them. Measured on a 2-core machine
that other work kept at load 12-19, beside two busy loops, 10 greedy tic-tac-toe games of
`models/tictactoe-tiny` (`rlvr eval tictactoe -n 10 -r 1 -T 0`) took 1,144 s with torch's
default, 119-250 s (7 runs) with one thread, and 80-102 s (4 runs) with two threads that sleep
while they wait (`OMP_WAIT_POLICY=PASSIVE`). So, unless the person has chosen:

- `RLVR_NUM_THREADS=N` sets the thread count (it wins over everything else);
- `OMP_NUM_THREADS` (or `MKL_NUM_THREADS`) set: their choice stands, untouched;
- otherwise one thread per core this process may run on (`os.sched_getaffinity`), at most
  `MAX_DEFAULT`; and `OMP_WAIT_POLICY=PASSIVE` unless it is set.

The CLI applies this before torch is imported (`choose_for_process`: through the environment,
which child processes inherit too); `LocalModel`'s loader applies it to an already imported
torch (`apply_to_torch`), for a program that uses rlvr as a library.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, MutableMapping

from rlvr.errors import UsageError

OVERRIDE = "RLVR_NUM_THREADS"
"""The environment variable that sets rlvr's CPU thread count."""
MAX_DEFAULT = 8
"""Most threads chosen by default (a bigger CPU model still takes more with `RLVR_NUM_THREADS`)."""


def available_cores() -> int:
    """The cores this process may run on (its affinity mask: a container's or taskset's share)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # (no affinity on this platform)
        return max(1, os.cpu_count() or 1)


def chosen_threads(environ: Mapping[str, str] | None = None, cores: int | None = None) -> int | None:
    """The thread count rlvr sets; None when the person set `OMP_NUM_THREADS` or
    `MKL_NUM_THREADS` themselves, which then stand.

    >>> chosen_threads({}, cores=2), chosen_threads({}, cores=16), chosen_threads({}, cores=1)
    (2, 8, 1)
    >>> chosen_threads({"OMP_NUM_THREADS": "4"}, cores=2) is None, chosen_threads({"RLVR_NUM_THREADS": "3"}, cores=2)
    (True, 3)
    """
    environ = os.environ if environ is None else environ
    if OVERRIDE in environ:
        text = environ[OVERRIDE]
        if not text.strip().isdigit() or int(text) < 1:
            raise UsageError(
                f"{OVERRIDE} must be a whole number of threads >= 1, got {text!r}; unset it for the default"
            )
        return int(text)
    if "OMP_NUM_THREADS" in environ or "MKL_NUM_THREADS" in environ:
        return None
    cores = available_cores() if cores is None else cores
    return max(1, min(MAX_DEFAULT, cores))


def choose_for_process(environ: MutableMapping[str, str] | None = None) -> int | None:
    """Set `OMP_NUM_THREADS` (and `OMP_WAIT_POLICY=PASSIVE` where unset) for this process and its
    children, before torch reads them; the count set, None when the person's stands. Torch
    already imported: applied to it directly."""
    environ = os.environ if environ is None else environ
    threads = chosen_threads(environ)
    if threads is None:
        return None
    environ["OMP_NUM_THREADS"] = str(threads)
    environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    apply_to_torch(threads)
    return threads


def apply_to_torch(threads: int | None = None) -> int | None:
    """`torch.set_num_threads` to the chosen count, where torch is imported and the person has
    not chosen; the count set, else None."""
    import sys

    threads = chosen_threads() if threads is None else threads
    torch = sys.modules.get("torch")
    if threads is None or torch is None:
        return None
    if torch.get_num_threads() != threads:
        torch.set_num_threads(threads)
    return threads
