"""`rlvr gen ENV -m MODEL -o DIR`: play an environment, keep the good rollouts as a chat dataset.

The dataset is DIR/data.jsonl (-o names a folder, as in every command), or the file -d FILE
(the flag `rlvr sft` reads it with: `rlvr gen ... -d teacher.jsonl`, `rlvr sft -d teacher.jsonl`).
An -o ending in .jsonl is the earlier spelling of -d and still works, with a note.
Each kept rollout becomes one JSONL line, written as soon as it finishes:

    {"messages": [...], "tools": [...], "rewards": {...}, "reward": 1.2, "metrics": {...},
     "env": "tictactoe", "env_args": {...}, "model": "policy:teacher", "task_id": "17",
     "rollout_index": 0}

(`tools` only for environments that offer tools.) `--filter` keeps the rollouts for which an
expression over reward and metric names holds, e.g. `--filter 'win_reward > 0 and
format_reward == 1'` (see `rlvr.filters`); rollouts that errored are always dropped. The
summary says how many were kept and why the others were not. Sampling: the environment's own,
under `-S JSON` (keys max_tokens, temperature, top_p, stop), under -t and -T.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections import Counter
from collections.abc import Awaitable
from pathlib import Path
from typing import Any

from rlvr.errors import UsageError, cannot_write

METRICS = ("turns", "completion_tokens")
"""Metrics the engine records for every rollout (filters may name them)."""
DATA_FILE = "data.jsonl"
"""The dataset's name in the -o folder."""


def add_parser(sub: Any) -> None:
    from rlvr.commands.eval import add_model_args
    from rlvr.commands.sampling import add_sampling_args

    p = sub.add_parser(
        "gen",
        help="generate a filtered chat dataset (SFT data) from an environment",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("env", help="environment name (see `rlvr list`)")
    add_model_args(p)
    p.add_argument("-n", "--num-tasks", type=int, default=-1, help="tasks to play (default -1 = all)")
    p.add_argument("-r", "--rollouts", type=int, default=1, help="rollouts per task (default 1)")
    p.add_argument(
        "-f",
        "--filter",
        default=None,
        metavar="EXPR",
        help="keep rollouts where EXPR holds, e.g. 'win_reward > 0 and format_reward == 1'",
    )
    p.add_argument(
        "-o", "--output", default=None, metavar="DIR", help=f"folder to write the dataset in, as DIR/{DATA_FILE}"
    )
    p.add_argument(
        "-d", "--data", default=None, metavar="FILE", help="the dataset's file instead (what `rlvr sft -d` reads)"
    )
    p.add_argument("--overwrite", action="store_true", help="replace the dataset if it exists")
    p.add_argument("-c", "--concurrency", type=int, default=64, help="rollouts in flight at once (default 64)")
    add_sampling_args(p)
    p.add_argument(
        "-a",
        "--env-args",
        default="{}",
        metavar="JSON",
        help="environment arguments as a JSON object",
    )
    p.add_argument(
        "--split",
        choices=["train", "eval"],
        default="train",
        help="which task split (default train)",
    )
    p.add_argument("-q", "--quiet", action="store_true", help="no progress lines or bars")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from rlvr.commands.eval import check_run_args, load_env_and_client
    from rlvr.commands.sampling import tasks_and_sampling
    from rlvr.filters import Filter
    from rlvr.results import json_line

    check_run_args(args)
    out = dataset_path(args.output, args.data)
    if out.is_dir():
        raise UsageError(f"-d must be a file path, but {out} is a directory; -o {out} writes {out / DATA_FILE}")
    if out.exists() and not args.overwrite:
        raise UsageError(f"{out} already exists; choose another -o DIR or -d FILE, or pass --overwrite")
    keep = Filter(args.filter) if args.filter else None
    env, client, model = load_env_and_client(args, args.concurrency)
    if keep is not None:
        keep.check_names([*env.rubric.names, *METRICS, "reward", "truncated"])
    tasks, sampling = tasks_and_sampling(args, env, client)
    tools = {t.id: tools_of(env, t) for t in tasks}
    meta = {"env": args.env, "env_args": env.env_args, "model": model}
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        f = out.open("wb")
    except OSError as exc:
        raise UsageError(cannot_write(out, exc)) from None
    dropped: Counter[str] = Counter()
    kept = 0
    with f:

        def on_rollout(rollout: Any) -> bool:
            nonlocal kept
            reason = drop_reason(rollout, keep)
            if reason is not None:
                dropped[reason] += 1
                return False
            f.write(json_line(dataset_row(rollout, tools.get(rollout.task_id), meta)))  # any text, strict JSON
            f.flush()
            kept += 1
            return True

        _play(env, client, tasks, args, sampling, on_rollout)
    total = kept + sum(dropped.values())
    print(f"kept {kept} of {total} rollouts -> {out}")
    for reason, count in dropped.most_common():
        print(f"  dropped {count}: {reason}")
    return 0 if kept else 1


def dataset_path(output: str | None, data: str | None) -> Path:
    """The file the dataset goes to: -d FILE, else -o DIR's `DATA_FILE`; an -o ending in .jsonl
    (`-o teacher.jsonl`, `-o x.jsonl.part`) is the earlier spelling of -d: a note on stderr.

    >>> str(dataset_path("runs/gen", None)), str(dataset_path("runs/gen/", None)), str(dataset_path(None, "t.jsonl"))
    ('runs/gen/data.jsonl', 'runs/gen/data.jsonl', 't.jsonl')
    """
    if output is not None and data is not None:
        raise UsageError(f"give -o DIR (writes DIR/{DATA_FILE}) or -d FILE, not both; got -o {output} -d {data}")
    if data is not None:
        return Path(data)
    if output is None:
        raise UsageError(f"say where the dataset goes: -o DIR (writes DIR/{DATA_FILE}) or -d FILE")
    folder = Path(output)
    if ".jsonl" in folder.suffixes and not folder.is_dir() and not output.endswith("/"):
        print(
            f"rlvr gen: note: -o FILE is deprecated; use -d {output} (-o names a folder: DIR/{DATA_FILE})",
            file=sys.stderr,
        )
        return folder
    return folder / DATA_FILE


def tools_of(env: Any, task: Any) -> Any:
    """The tools offered on the first turn of `task`, by the env that plays it (in a mixture,
    its member)."""
    player, own = env.member(task)
    return player.tool_schemas(player.setup_state(own))


def drop_reason(rollout: Any, keep: Any) -> str | None:
    """Why a rollout is left out of the dataset (None: it is kept)."""
    from rlvr.filters import rollout_values

    if rollout.error is not None:
        return f"error ({rollout.error_kind})"
    if keep is None:
        return None
    clause = keep.failed_clause(rollout_values(rollout))
    return None if clause is None else f"failed `{clause}`"


def dataset_row(rollout: Any, tools: list[dict[str, Any]] | None, meta: dict[str, Any]) -> dict[str, Any]:
    """One line of the chat dataset."""
    row: dict[str, Any] = {"messages": rollout.messages}
    if tools:
        row["tools"] = tools
    row.update(
        rewards=rollout.rewards,
        reward=rollout.reward,
        metrics=rollout.metrics,
        **meta,
        task_id=rollout.task_id,
        rollout_index=rollout.rollout_index,
    )
    return row


def _play(
    env: Any,
    client: Any,
    tasks: list[Any],
    args: argparse.Namespace,
    sampling: Any,
    on_rollout: Any,
) -> None:
    from rlvr.commands.turns import CountingClient
    from rlvr.engine import run_rollouts
    from rlvr.progress import Progress

    kept = 0
    counted = CountingClient(client)
    with Progress("rollouts", len(tasks) * args.rollouts, quiet=args.quiet, activity=counted.activity) as progress:

        def record(rollout: Any) -> None:
            nonlocal kept
            kept += bool(on_rollout(rollout))
            progress.advance(status=f"kept {kept}")

        asyncio.run(
            _closing(
                client,
                run_rollouts(
                    env,
                    counted.player(),
                    tasks,
                    rollouts_per_task=args.rollouts,
                    concurrency=args.concurrency,
                    sampling=sampling,
                    on_rollout=record,
                ),
            )
        )


async def _closing(client: Any, work: Awaitable[object]) -> None:
    """Await `work`, then close the client, in the same event loop, whatever happened."""
    try:
        await work
    finally:
        await client.aclose()
