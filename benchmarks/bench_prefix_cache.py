"""The KV prefix cache's host time over one RL step's worth of multi-turn requests, against the
cache of an earlier revision, alternated in one run:

    python benchmarks/bench_prefix_cache.py                      # against d69eaec
    python benchmarks/bench_prefix_cache.py --baseline REV --rounds 7

Why: a py-spy profile of tic-tac-toe RL steps on an H200 (17.6M model, 256 games + 64 greedy
probes a step; docs/benchmarks.md) put the generation thread's prefix lookups (hashing each
prompt, then scanning every kept entry per request) at about a fifth of its busy time.

The trace is synthetic but shaped like that step: `--games` conversations of `--turns` turns,
each prompt a shared system text, the game's own opening (or its group's, `--group`: the
rollouts of one task; `--same`: how often a game plays its turn as its group's first one did, as
a sharp policy's do), then per turn the reply before (the
last reply token never enters the cache) and the environment's answer; requests are admitted in
groups of `--admit` in arrival order, finished ones stored (the cache holds 512 entries, as
`LocalModel` does). Timed: hashing every prompt, every `lookup_many`, extending the hashes and
storing each finished request. Both caches see the same ids; the matched token counts are
printed so that a faster cache that matches less would show.
"""

from __future__ import annotations

import argparse
import importlib.util
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import torch

from rlvr.clients import local_prefix

ROOT = Path(__file__).resolve().parent.parent


def module_at(rev: str) -> ModuleType:
    """rlvr.clients.local_prefix as it was at git revision `rev`."""
    source = subprocess.run(
        ["git", "show", f"{rev}:src/rlvr/clients/local_prefix.py"], cwd=ROOT, check=True, capture_output=True, text=True
    ).stdout
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "local_prefix_baseline.py"
        path.write_text(source)
        spec = importlib.util.spec_from_file_location("local_prefix_baseline", path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module  # dataclasses look their module up there
        spec.loader.exec_module(module)
    return module


def trace(args: argparse.Namespace) -> list[list[tuple[list[int], list[int]]]]:
    """Per turn, each game's (prompt ids, reply ids)."""
    rng = random.Random(0)
    system = [rng.randrange(4_000) for _ in range(args.system)]
    openings = [[rng.randrange(4_000) for _ in range(args.opening)] for _ in range(-(-args.games // args.group))]
    prompts = [system + openings[g // args.group] for g in range(args.games)]
    alike = [True] * args.games  # still playing as its group's first game did
    turns = []
    for _ in range(args.turns):
        turn, lead = [], None
        for g in range(args.games):
            if g % args.group == 0:
                lead = None
            own = (
                [rng.randrange(4_000) for _ in range(rng.randrange(args.reply // 2, args.reply * 3 // 2))],
                [rng.randrange(4_000) for _ in range(args.answer)],
            )
            if lead is not None and alike[g] and rng.random() < args.same:
                reply, answer = lead
            else:
                alike[g], (reply, answer) = False, own
            lead = lead or own
            turn.append((prompts[g], reply))
            prompts[g] = prompts[g] + reply + answer
        turns.append(turn)
    return turns


def play(module: Any, turns: list, admit: int) -> tuple[float, int]:
    """Seconds of prefix-cache work over the trace, and the tokens matched."""
    cache = module.PrefixCache()
    seconds, matched = 0.0, 0
    for turn in turns:
        for start in range(0, len(turn), admit):
            group = turn[start : start + admit]
            t0 = time.perf_counter()
            looked = [(prompt, module.prefix_hashes(prompt)) for prompt, _ in group]
            hits = cache.lookup_many(looked)
            seconds += time.perf_counter() - t0
            matched += sum(m for _, m in hits)
            for (prompt, reply), (_, hashes) in zip(group, looked):
                ids = prompt + reply[:-1]
                kv = (torch.zeros(1, 1, len(ids), 1), torch.zeros(1, 1, len(ids), 1))
                t0 = time.perf_counter()
                cache.store(ids, module.extend_hashes(hashes, reply[:-1]), len(prompt), kv, cache.version)
                seconds += time.perf_counter() - t0
    return seconds, matched


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--baseline", default="d69eaec", help="git revision whose local_prefix is the baseline")
    p.add_argument(
        "--rounds", type=int, default=5, help="alternated rounds (each plays the whole trace once per cache)"
    )
    p.add_argument("--games", type=int, default=320)
    p.add_argument("--turns", type=int, default=5)
    p.add_argument("--admit", type=int, default=37, help="requests admitted together")
    p.add_argument("--system", type=int, default=150, help="shared system-prompt tokens")
    p.add_argument("--opening", type=int, default=60, help="each game's own first-message tokens")
    p.add_argument(
        "--group", type=int, default=1, help="games sharing one opening (a GRPO group: 8 in the tic-tac-toe recipe)"
    )
    p.add_argument(
        "--same", type=float, default=0.0,
        help="chance that a game of a group plays its turn as the group's first game did, while it has so far",
    )  # fmt: skip
    p.add_argument("--reply", type=int, default=30, help="mean reply tokens")
    p.add_argument("--answer", type=int, default=45, help="environment answer tokens per turn")
    args = p.parse_args()
    if args.group < 1 or not 0.0 <= args.same <= 1.0:
        p.error(f"--group must be >= 1 and --same in [0, 1], got {args.group} and {args.same}")
    turns = trace(args)
    caches = {"baseline": module_at(args.baseline), "current": local_prefix}
    times: dict[str, list[float]] = {name: [] for name in caches}
    matched: dict[str, int] = {}
    for _ in range(args.rounds):
        for name, module in caches.items():
            seconds, matched[name] = play(module, turns, args.admit)
            times[name].append(seconds)
    requests = args.games * args.turns
    for name, ts in times.items():
        print(
            f"{name}: {statistics.median(ts) * 1e3:.1f} ms [{min(ts) * 1e3:.1f}-{max(ts) * 1e3:.1f}] for {requests} "
            f"requests ({statistics.median(ts) / requests * 1e6:.1f} us each), {matched[name]:,} tokens matched"
        )
    ratios = [a / b for a, b in zip(times["baseline"], times["current"])]
    print(
        f"baseline / current: {statistics.median(ratios):.2f}x [{min(ratios):.2f}-{max(ratios):.2f}] over "
        f"{args.rounds} alternated rounds; python {sys.version.split()[0]}, torch {torch.__version__}"
    )


if __name__ == "__main__":
    main()
