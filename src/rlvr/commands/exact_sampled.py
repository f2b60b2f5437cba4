"""`rlvr eval ENV --exhaustive -T 1`: exact evaluation of the policy as it samples (see
`rlvr.exact_sampled`).

Saved like the greedy walk: every finished game to RUN_DIR/results.jsonl (its weights include
the policy's reply probabilities, its `path` the decisions it went through), the exact table to
metadata.json under `exact`, with the bounds, the decisions' count and the risky decisions
under `exact.sampled`; every decision's distribution to RUN_DIR/decisions.jsonl.
"""

from __future__ import annotations

import argparse
import contextlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

DECISIONS = "decisions.jsonl"
"""Every decision of the policy (`rlvr.exact_bounds.Decision`), one JSON object a line."""


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The flags of a sampled exact evaluation (on `rlvr eval`)."""
    p.add_argument(
        "--samples",
        type=int,
        default=64,
        metavar="K",
        help="--exhaustive with -T > 0: replies drawn at each decision of the policy (default 64)",
    )
    p.add_argument(
        "--samples-per-reach",
        type=int,
        default=0,
        metavar="N",
        help="--exhaustive with -T > 0: a decision reached with probability r gets max(K, N * r) draws: a tighter "
        "bound for the same draws (default 0: K everywhere)",
    )
    p.add_argument(
        "--min-reach",
        type=float,
        default=1e-6,
        help="--exhaustive with -T > 0: replies reached with a smaller probability are not played; their mass "
        "goes into the bound (default 1e-6)",
    )
    p.add_argument(
        "--enumerate",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="--exhaustive with -T > 0: where the client can list its replies with their probabilities (a local "
        "model: every reply token sequence, best first, down to --min-reach), use that exact distribution; "
        "--no-enumerate draws K replies instead (default: enumerate)",
    )
    p.add_argument(
        "--tail-games",
        type=int,
        default=0,
        metavar="N",
        help="--exhaustive with -T > 0 and exact distributions: N games per opponent drawn from the mass the walk "
        "did not play (replies unlisted or below --min-reach), to bound that mass's share of each number; "
        "0 counts the whole mass on the upper side (default 0)",
    )
    p.add_argument(
        "--delta",
        type=float,
        default=0.05,
        help="--exhaustive with -T > 0: the bounds hold together with probability >= 1 - delta (default 0.05)",
    )


TAIL = "tail.jsonl"
"""The tail games of an exact walk (`--tail-games`), one JSON line each as it ends: a resumed
run takes again those that left the played tree where its own draw leaves it."""


@contextlib.contextmanager
def tail_records(path: Path, *, resume: bool, games: int) -> Iterator[Any]:
    """`rlvr.exact_tail.TailRecords` over `path`: an earlier run's games (resume; else the file
    is started anew), each new game appended and flushed as it ends. None without tail games."""
    from rlvr.exact_tail import TailRecords

    if not resume:
        path.unlink(missing_ok=True)
    if not games:
        yield None
        return
    with open(path, "a+b") as f:
        f.seek(0, 2)
        if f.tell():
            f.seek(-1, 2)
            if f.read(1) != b"\n":  # a line cut by a kill: the next record starts on its own line
                f.write(b"\n")

        def write(record: dict[str, Any]) -> None:
            f.write((json.dumps(record, default=str) + "\n").encode())
            f.flush()

        yield TailRecords.read(path, write)


def run(args: argparse.Namespace, out: Path, env: Any, client: Any, sampling: Any, metadata: dict[str, Any]) -> int:
    from rlvr.commands.walks import start_walk, walked
    from rlvr.exact_sampled import Settings, enumerate_sampled
    from rlvr.progress import Progress
    from rlvr.results import RunDir, json_line

    settings = Settings(
        samples=args.samples,
        per_reach=args.samples_per_reach,
        min_reach=args.min_reach,
        delta=args.delta,
        concurrency=args.concurrency,
        enumerate=args.enumerate,
        tail_games=args.tail_games,
    )
    settings.check()
    metadata = {**metadata, "mode": "exact", "exact_settings": vars(settings)}
    title = f"{args.env} / {metadata.get('model')} at T = {sampling.temperature}"
    if args.resume and (out / "metadata.json").exists():
        done = RunDir.open(out).metadata
        if done.get("status") == "complete" and "sampled" in (done.get("exact") or {}):
            print_sampled(done["exact"], title=title)
            print(f"read {out / 'metadata.json'} (complete; nothing played)")
            return 0
    run_dir = start_walk(out, metadata, resume=args.resume)

    async def play() -> Any:
        with Progress("games played", None, quiet=args.quiet) as progress:

            def on_game(game: Any) -> None:
                run_dir.append(game)
                progress.advance()

            def on_tail(opponent: str, tail: Any) -> None:
                progress.advance(status=f"tail vs {opponent}: {tail.games} of {settings.tail_games}")

            try:
                with tail_records(out / TAIL, resume=args.resume, games=settings.tail_games) as kept:
                    return await enumerate_sampled(
                        env, client, sampling, settings, on_game=on_game, on_tail=on_tail, tail_records=kept
                    )
            finally:
                await client.aclose()
                await env.aclose()

    result = walked(run_dir, play)
    summary = {**result.summary(), "failures": list(result.failures), "sampled": result.sampled_summary()}
    part = out / (DECISIONS + ".part")  # the distributions behind the numbers (to bound them again),
    with open(part, "wb") as f:  # whole or not at all: a kill mid-write leaves no half file
        f.writelines(json_line(d.to_dict()) for d in result.decisions)
    part.replace(out / DECISIONS)
    run_dir.close(status="complete", rollouts=len(result.games), exact=summary)
    print_sampled(summary, title=title)
    print(f"saved {len(result.games)} games to {run_dir.results_path}")
    return 0 if result.games or any(t.games for t in result.tails.values()) else 1


def print_sampled(summary: dict[str, Any], *, title: str, show: int = 20) -> None:
    """The sampled exact table: per opponent, each number's estimate and its bound (%)."""
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    console = Console(emoji=False)
    s = summary["sampled"]
    how = f"K = {s['samples']} draws a decision" if s["sampled_decisions"] else "exact distributions"
    if s["sampled_decisions"] and s.get("per_reach"):
        how += f", {s['per_reach']} x its reach where more: {s['samples_drawn']} draws"
    console.print(
        escape(
            f"{title}: exact over the tree, {s['decisions']} decisions ({how}), {summary['games']} games, "
            f"{summary['seconds']:.1f} s; bounds hold together at {100 * (1 - s['delta']):g}%"
        ),
        highlight=False,
        soft_wrap=True,
    )
    missing = s.get("missing_pct") or {}
    if any(v for parts in missing.values() for v in parts.values()):
        console.print(
            "not played (%): "
            + "; ".join(f"vs {o}: {p['unlisted']:.4f} unlisted, {p['pruned']:.4f} pruned" for o, p in missing.items()),
            highlight=False,
        )
    for opponent, tail in (s.get("tail") or {}).items():
        console.print(
            f"tail vs {opponent}: {tail['games']} games drawn from the {100 * tail['mass']:.4f}% not played "
            f"({tail['tries']} draws for unlisted replies, {tail['unknown']} games not had)",
            highlight=False,
        )
    if s.get("tail_games") and not s.get("tail"):
        console.print("--tail-games: none drawn (the decisions were sampled, not exact)", highlight=False)
    table = Table()
    table.add_column("%")
    for opponent in s["bounds_pct"]:
        table.add_column(f"vs {opponent}", justify="right")
        table.add_column("bound", justify="right")
    for name in ("win", "draw", "loss", "timeout", "error", "rejected", "covered"):
        cells = [_cell(rows.get(name)) for rows in s["bounds_pct"].values()]
        if any(cells):
            table.add_row(name, *(part for cell in cells for part in (cell or ("-", ""))))
    console.print(table)
    from rlvr.report.exact_sampled import risky_rows, shares_text

    rows = risky_rows(s)
    console.print(
        f"risky decisions (>= {100 * s['risky_threshold']:g}% on a rejected or losing reply): {len(rows)}, "
        "the costliest first"
    )
    for row in rows[:show]:
        replies = ", ".join(repr(text[-24:]) for text, _ in row["replies"][:3])
        cost = f"; {cost}" if (cost := shares_text(row)) else ""
        console.print(escape(f"  {row['kind']} {100 * row['prob']:.2f}% (decision {row['decision']}{cost}): {replies}"))
        board = [line for line in row["board"].splitlines() if line.strip()][-6:]
        console.print(escape("\n".join("      " + line for line in board)), highlight=False)
    if len(rows) > show:
        console.print(f"  ... and {len(rows) - show} more (all in metadata.json and the report)")


def _cell(value: Any) -> tuple[str, str] | None:
    if not value:
        return None
    est, lo, hi = value
    return f"{est:.3f}", f"[{lo:.3f}, {hi:.3f}]"
