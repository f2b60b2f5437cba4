"""Throughput of `rlvr eval` with the environment in process against 1, 2 and 4 `rlvr serve`
environment servers on this host (`--env-server`), for a CPU-heavy environment.

    python benchmarks/bench_env_servers.py [--env python_math] [--player policy:oracle]
        [-n 200] [-r 2] [-c 32] [--servers 0,1,2,4] [--repeats 2]

Every configuration plays the same tasks and seeds (the records are the same, as the scale-out
tests check); the configurations alternate within each repeat, and the table gives rollouts a
second (median and range over the repeats) with the ratio to in process. Servers are started
before the timing and stopped after; their start is not timed. Needs the `openenv` extra.
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_servers(env: str, count: int) -> tuple[list[subprocess.Popen[bytes]], list[str]]:
    procs, urls = [], []
    for _ in range(count):
        port = free_port()
        cmd = [sys.executable, "-m", "rlvr.cli", "serve", env, "--port", str(port)]
        procs.append(subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        urls.append(f"http://127.0.0.1:{port}")
    deadline = time.monotonic() + 120
    for url in urls:
        while True:
            try:
                urllib.request.urlopen(url + "/health", timeout=2).read()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise SystemExit(f"server {url} did not answer /health in 120 s") from None
                time.sleep(0.5)
    return procs, urls


def play(args: argparse.Namespace, urls: list[str], out: Path) -> float:
    cmd = [sys.executable, "-m", "rlvr.cli", "eval", args.env, "-m", args.player, "-n", str(args.n)]
    cmd += ["-r", str(args.r), "-c", str(args.c), "-q", "-o", str(out)]
    for url in urls:
        cmd += ["--env-server", url]
    start = time.monotonic()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    return time.monotonic() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--env", default="python_math")
    parser.add_argument("--player", default="policy:oracle")
    parser.add_argument("-n", type=int, default=200)
    parser.add_argument("-r", type=int, default=2)
    parser.add_argument("-c", type=int, default=32)
    parser.add_argument("--servers", default="0,1,2,4", help="server counts; 0 = in process")
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    counts = [int(x) for x in args.servers.split(",")]
    rollouts = args.n * args.r
    times: dict[int, list[float]] = {k: [] for k in counts}
    pools = {k: start_servers(args.env, k) for k in counts if k}
    work = Path(tempfile.mkdtemp(prefix="bench_env_servers."))
    try:
        for rep in range(args.repeats):
            for k in counts:
                seconds = play(args, pools[k][1] if k else [], work / f"{k}-{rep}")
                times[k].append(seconds)
                print(f"repeat {rep + 1}: {k or 'in process'} servers: {seconds:.1f} s", flush=True)
    finally:
        for procs, _ in pools.values():
            for p in procs:
                p.terminate()
        shutil.rmtree(work, ignore_errors=True)
    base = statistics.median(rollouts / t for t in times[counts[0]])
    print(f"\n{args.env}, {args.player}, {rollouts} rollouts, -c {args.c}; {os.cpu_count()} CPUs")
    print("| servers | rollouts/s (median [range]) | vs first row |")
    print("|---|---|---|")
    for k in counts:
        rates = [rollouts / t for t in times[k]]
        mid = statistics.median(rates)
        print(f"| {k or 'in process'} | {mid:.1f} [{min(rates):.1f}-{max(rates):.1f}] | {mid / base:.2f}x |")


if __name__ == "__main__":
    main()
