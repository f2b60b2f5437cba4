"""`rlvr eval ENV --exhaustive`: exact evaluation over the env's whole game tree (see `rlvr.exact`).

Every finished game is appended to RUN_DIR/results.jsonl as it ends (with its outcome and its
probability under each opponent in `info["exact"]`); the exact table goes to metadata.json
under `exact` and to the terminal. `--resume` on a complete exact run prints its table again
without asking the model anything; an unfinished one is played again from the start (a tree
walk is not resumable line by line, and it takes about a minute).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path
from typing import Any

from rlvr.errors import UsageError
from rlvr.progress import Progress


def run(args: argparse.Namespace, out: Path, env: Any, client: Any, model: str, sampling: Any) -> int:
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
    if args.resume and (out / "results.jsonl").exists():
        print(f"{out}: the earlier exact run did not finish; playing the tree again", file=sys.stderr)
        (out / "results.jsonl").unlink()
    run_dir, _ = RunDir.create(out, metadata, resume=args.resume)

    async def play() -> ExactResult:
        # the number of games is found by the walk: a count, no total (a line every 30 s in a log)
        with Progress("games played", None, quiet=args.quiet) as progress:

            def on_game(game: Any) -> None:
                run_dir.append(game)
                progress.advance()

            try:
                return await enumerate_games(env, client, sampling, concurrency=args.concurrency, on_game=on_game)
            finally:
                await client.aclose()
                await env.aclose()

    try:
        result = asyncio.run(play())
    except BaseException:
        run_dir.close(status="interrupted")
        raise
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
