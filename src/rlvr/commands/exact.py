"""`rlvr eval ENV --exhaustive`: exact evaluation over the env's whole game tree (see `rlvr.exact`).

Every finished game is appended to RUN_DIR/results.jsonl as it ends (with its outcome and its
probability under each opponent in `info["exact"]`); the exact table goes to metadata.json
under `exact` and to the terminal. `--resume` on a complete exact run prints its table again
without asking the model anything; an unfinished one is played again from the start (a tree
walk is not resumable line by line, and it takes about a minute).

A local model on the CPU answers at most `CPU_POSITIONS` positions at once, through a client of
its own over the same weights whose reuse cache holds `CPU_CACHE_BYTES` (`walk_client`): the
memory of a walk is then that batch's (KV slots, prefill, reuse cache), whatever `-c` (the
lines in flight). A progress line counts the positions answered and the games finished.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from rlvr.errors import UsageError
from rlvr.progress import Progress

CPU_POSITIONS = 16
"""Positions a local model on the CPU answers at once in a walk (its batch)."""
CPU_CACHE_BYTES = 192 << 20
"""Its reuse cache (kept keys and values of answered positions, which the next position of the
same line extends)."""
CPU_KEPT_BYTES = 64 << 20
"""Freed memory the process keeps for reuse during the walk (`keep_freed_blocks`)."""


def run(args: argparse.Namespace, out: Path, env: Any, client: Any, model: str, sampling: Any) -> int:
    from rlvr.commands.walks import start_walk, walked
    from rlvr.envs.multiturn import MultiTurnEnv
    from rlvr.exact import ExactResult, GameTree, enumerate_games, print_exact
    from rlvr.results import RunDir

    if not isinstance(env, MultiTurnEnv) or not isinstance(env, GameTree):
        raise UsageError(f"environment {args.env!r} offers no exact evaluation; run without --exhaustive")
    metadata = {
        "command": "eval",
        "mode": "exact",
        "env": args.env,
        "env_args": env.env_args,
        "model": model,
        "base_url": args.base_url,
        "num_tasks": "tree",
        "rollouts_per_task": 1,
        "sampling": {k: v for k, v in vars(sampling).items() if k != "seed"},
        "reward_weights": dict(zip(env.rubric.names, env.rubric.weights)),
    }
    # -- a sampling policy (T > 0): its reply distributions through the tree (rlvr.exact_sampled) --
    if sampling.temperature != 0:
        from rlvr.commands import exact_sampled

        return exact_sampled.run(args, out, env, client, sampling, metadata)
    # -- end sampling policy --
    title = f"{args.env} / {model}"
    if args.resume and _complete(out):
        old = RunDir.open(out)
        exact = old.metadata["exact"]
        result = ExactResult(old.read(), tuple(exact["rates_pct"]), tuple(exact["failures"]))
        result.model_calls, result.lines, result.seconds = exact["model_calls"], exact["lines"], exact["seconds"]
        print_exact(result, title=title)
        print(f"read {len(result.games)} games from {old.results_path} (complete; nothing played)")
        return 0 if result.games else 1
    run_dir = start_walk(out, metadata, resume=args.resume)

    walker, positions = walk_client(client, args.concurrency)
    if not args.quiet:
        bound = "" if positions is None else f", {positions} positions at a time"
        print(f"{title}: walking every line of play{bound}", flush=True)

    async def play() -> ExactResult:
        # the number of positions is found by the walk: a count, no total (a line every 30 s in a log)
        games = 0
        # a line once 15 s have passed, at the next answer: a gap stays under 30 s while answers come
        with Progress("positions answered", None, quiet=args.quiet, interval_s=15) as progress:

            def on_game(game: Any) -> None:
                nonlocal games
                run_dir.append(game)
                games += 1

            try:
                return await enumerate_games(
                    env,
                    walker,
                    sampling,
                    concurrency=args.concurrency,
                    positions=positions,
                    on_game=on_game,
                    on_answer=lambda _: progress.advance(status=f"games finished {games}"),
                )
            finally:
                for each in {id(walker): walker, id(client): client}.values():
                    await each.aclose()
                await env.aclose()

    result = walked(run_dir, play)
    summary = {**result.summary(), "failures": list(result.failures)}
    run_dir.close(status="complete", rollouts=len(result.games), exact=summary)
    print_exact(result, title=title)
    print(f"saved {len(result.games)} games to {run_dir.results_path}")
    return 0 if result.games else 1


def _complete(out: Path) -> bool:
    from rlvr.results import RunDir

    if not (out / "metadata.json").exists():
        return False
    meta = RunDir.open(out).metadata
    return meta.get("mode") == "exact" and meta.get("status") == "complete" and "exact" in meta


def walk_client(client: Any, concurrency: int) -> tuple[Any, int | None]:
    """The client a walk asks, and the positions it asks at once (None: as many as the lines in
    flight). A local model on the CPU gets a client of its own over the same weights, with a
    batch of `CPU_POSITIONS` and a reuse cache of `CPU_CACHE_BYTES`; any other client is
    `client` itself, unbounded."""
    local = sys.modules.get("rlvr.clients.local")  # imported where a local model was made (it needs torch)
    LocalModel = getattr(local, "LocalModel", None)
    if LocalModel is None or not isinstance(client, LocalModel) or client.device.type != "cpu":
        return client, None
    from rlvr.clients.local_load import keep_freed_blocks

    positions = min(concurrency, CPU_POSITIONS)
    walker = LocalModel(
        client.name,
        model=client.model,
        tokenizer=client.tokenizer,
        max_batch_size=2 * positions,  # room for the siblings that enter together past the bound
        cache_bytes=CPU_CACHE_BYTES,
        static_cache=client.static_cache,
    )
    if walker.prefix is not None:  # siblings may come in several admissions: each finds the parent
        walker.prefix.drop_extended = False
    # the walk's blocks are small (a prefill of CPU_POSITIONS rows): the freed memory this process
    # keeps for reuse can be too (a LocalModel on the CPU keeps up to 1 GiB, for a trainer's)
    keep_freed_blocks(CPU_KEPT_BYTES)
    return walker, positions
