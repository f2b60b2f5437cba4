"""Overhead of one sandboxed run (`rlvr.sandbox.run_python`), start to finish.

Run: python benchmarks/bench_sandbox.py [--calls 31]   (on an otherwise idle machine)

The claim (docs/benchmarks.md): a trivial program takes under 150 ms, median, from the call
to the result, with every namespace, mount and limit in place. Prints the
median and p90 of `pass`, of a program that prints, and of one that imports a module, next to
a bare `python -I -S -c pass` started the same way (what any process-per-call sandbox costs at
least), then whether the claim holds here. Exit status 1 when it does not.

The test suite checks the same overhead against the bare interpreter measured alongside
(tests/test_sandbox_security.py), which holds on a loaded machine too; this script holds the
absolute number.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time

from rlvr.sandbox import isolation, run_python

CLAIM_S = 0.150
PROGRAMS = {"pass": "pass", "print": "print(2 ** 100)", "import json": "import json\nprint(json.dumps([1]))"}


async def bare_interpreter() -> None:
    proc = await asyncio.create_subprocess_exec(sys.executable, "-I", "-S", "-c", "pass")
    await proc.wait()


async def timed(make, calls: int) -> list[float]:
    await make()  # warm-up (first call builds and caches the isolation check)
    times = []
    for _ in range(calls):
        t0 = time.perf_counter()
        await make()
        times.append(time.perf_counter() - t0)
    return sorted(times)


def line(name: str, times: list[float]) -> str:
    p90 = times[int(0.9 * (len(times) - 1))]
    return f"  {name:<14} median {statistics.median(times) * 1e3:6.1f} ms   p90 {p90 * 1e3:6.1f} ms"


async def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--calls", type=int, default=31)
    args = ap.parse_args()
    print(f"isolation: {isolation().detail}")
    results = {}
    for name, code in PROGRAMS.items():

        async def call(code: str = code) -> None:
            assert (await run_python(code)).ok

        results[name] = await timed(call, args.calls)
        print(line(name, results[name]))
    print(line("bare python", await timed(bare_interpreter, args.calls)))
    median = statistics.median(results["pass"])
    holds = median < CLAIM_S
    print(
        f"claim: `pass` under {CLAIM_S * 1e3:.0f} ms median: {'holds' if holds else 'DOES NOT HOLD'} ({median * 1e3:.1f} ms)"
    )
    return 0 if holds else 1


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main()))
