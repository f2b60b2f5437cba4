"""Evaluation during training: fixed, seeded sets of tasks played with the current policy.

    sets = eval_sets(cfg, envs.get, rank=dist.rank, world=dist.world)   # once
    played = await evaluate(sets, client, sampling)                     # {label: rollouts}
    metrics, table = eval_metrics(sets, played)                         # eval/LABEL/...

One set per entry of `eval_env_args` (merged over `env_args`), each the first `eval_tasks`
tasks of its environment's eval split, one rollout each. Every evaluation plays the same
tasks with the same seeds, so successive evaluations differ only by the model. The trainer
logs the metrics, prints the table and saves each set's rollouts with `save_eval` under
`RUN_DIR/eval/step_N/LABEL/` (an ordinary results directory, readable by `rlvr report`).
"""

from __future__ import annotations

import math
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlvr.clients.base import ChatClient
from rlvr.engine import run_rollouts
from rlvr.envs.multiturn import MultiTurnEnv
from rlvr.exact import ExactResult, enumerate_games
from rlvr.results import RunDir
from rlvr.summary import summarize
from rlvr.train.config import TrainConfig
from rlvr.train.logging import metric_name
from rlvr.train.metrics import reward_metrics
from rlvr.types import Rollout, SamplingArgs, Task


@dataclass
class EvalSet:
    """One evaluation set: the environment and the tasks this process plays."""

    label: str
    """the set's name in metric names (`eval/LABEL/...`), from its own arguments"""
    env: MultiTurnEnv[Any]
    tasks: list[Task]
    env_args: dict[str, Any]
    """the environment's arguments (saved with the rollouts)"""
    size: int
    """the set's tasks over all processes (fewer than `eval_tasks` where the eval split is short)"""


def eval_sets(
    cfg: TrainConfig, load_env: Callable[[dict[str, Any]], MultiTurnEnv[Any]], *, rank: int = 0, world: int = 1
) -> list[EvalSet]:
    """The evaluation sets of `cfg`; with several processes, each plays every `world`-th task."""
    out = []
    for extra, args in zip(cfg.eval.env_args or [{}], cfg.eval_sets):
        env = load_env(args)
        tasks = list(env.tasks("eval")[: cfg.eval.tasks])
        out.append(EvalSet(eval_label(extra), env, tasks[rank::world], args, size=len(tasks)))
    return out


async def evaluate(sets: list[EvalSet], client: ChatClient, sampling: SamplingArgs) -> dict[str, list[Rollout]]:
    """Play every set, one after the other; each set's tasks run concurrently."""
    played = {}
    for s in sets:
        played[s.label] = await run_rollouts(
            s.env, client, s.tasks, rollouts_per_task=1, concurrency=max(len(s.tasks), 1), sampling=sampling
        )
    return played


def eval_metrics(sets: list[EvalSet], played: dict[str, list[Rollout]]) -> tuple[dict[str, float], str]:
    """`eval/LABEL/...` metrics of every set (see docs/training.md), and the outcome table."""
    metrics: dict[str, float] = {}
    table: list[tuple[str, dict[str, float]]] = []
    for s in sets:
        rollouts = played[s.label]
        summary = summarize(rollouts)
        numbers = reward_metrics(summary, rollouts, s.env)
        del numbers["reward/std"]  # not logged for evaluations
        metrics.update({f"eval/{s.label}/{k}": v for k, v in numbers.items()})
        scored = summary["rollouts"] - summary["errors"]
        metrics[f"eval/{s.label}/error_frac"] = 1 - scored / max(len(rollouts), 1)
        outcomes = {k.removeprefix("outcome/"): v for k, v in numbers.items() if k.startswith("outcome/")}
        table.append((s.label, {"reward": numbers["reward/mean"], **outcomes}))
    return metrics, format_table(table)


async def evaluate_exact(env: MultiTurnEnv[Any], client: ChatClient, sampling: SamplingArgs) -> ExactResult:
    """Greedy play over `env`'s whole game tree (see `rlvr.exact`), with the training token limit."""
    greedy = SamplingArgs(max_tokens=sampling.max_tokens, temperature=0.0, stop=sampling.stop)
    return await enumerate_games(env, client, greedy, concurrency=1024)


def exact_metrics(result: ExactResult) -> dict[str, float]:
    """`exact/OPPONENT/{win,draw,loss,other}_pct`, `exact/beaten_games`, `exact/losing_decisions`
    (the distinct decisions those games went through), `exact/rejected_move_games` and
    `exact/unbeatable` (1 when no line of play beats the policy) of an exact evaluation."""
    metrics: dict[str, float] = {}
    for opponent in result.opponents:
        rates = result.rates(opponent)
        main = {k: 100.0 * rates.get(k, 0.0) for k in ("win", "draw", "loss")}
        metrics.update({f"exact/{opponent}/{k}_pct": v for k, v in main.items()})
        metrics[f"exact/{opponent}/other_pct"] = max(100.0 - sum(main.values()), 0.0)
    summary = result.summary()
    metrics["exact/beaten_games"] = float(len(summary["beaten"]))
    metrics["exact/losing_decisions"] = float(len(summary["mistakes"]))
    metrics["exact/rejected_move_games"] = float(summary["rejected_move_games"])
    metrics["exact/unbeatable"] = float(result.unbeatable)
    return metrics


def exact_line(result: ExactResult) -> str:
    """One line for the console: the rates per opponent and the verdict."""
    parts = []
    for opponent in result.opponents:
        r = result.rates(opponent)
        parts.append(
            f"{opponent} {100 * r.get('win', 0):.2f}/{100 * r.get('draw', 0):.2f}/{100 * r.get('loss', 0):.2f}"
        )
    beaten = len(result.beaten)
    verdict = (
        "unbeatable"
        if not beaten
        else f"beaten in {beaten} of {len(result.games)} games through {len(result.mistakes)} decision(s)"
    )
    return f"exact W/D/L %: {', '.join(parts)}; {verdict}"


def save_exact(path: Path, result: ExactResult, *, env: str, env_args: dict[str, Any], model: str, step: int) -> None:
    """An exact evaluation's games as a results directory (`rlvr report` draws the lost ones)."""
    if path.exists():
        shutil.rmtree(path)
    meta = {"command": "train-eval", "mode": "exact", "env": env, "env_args": env_args, "model": model}
    run, _ = RunDir.create(path, {**meta, "step": step, "num_tasks": "tree", "rollouts_per_task": 1})
    for game in result.games:
        run.append(game)
    run.close(
        status="complete", rollouts=len(result.games), exact={**result.summary(), "failures": list(result.failures)}
    )


def eval_label(extra: dict[str, Any]) -> str:
    """The name of an evaluation set in metric names, from its entry of eval_env_args.

    >>> eval_label({"opponent": "random"}), eval_label({})
    ('opponent=random', 'default')
    """
    return metric_name(",".join(f"{k}={v}" for k, v in sorted(extra.items()))) if extra else "default"


def format_table(rows: list[tuple[str, dict[str, float]]]) -> str:
    """A plain-text table: one row per evaluation set, one column per number, each column as
    wide as its header (or its numbers) and two spaces between columns, so long names never
    run together.

    >>> print(format_table([("opponent=random", {"reward": 0.5, "first_answer_correct_pct": 75.0})]))
    set              reward  first_answer_correct_pct
    opponent=random   0.500                    75.000
    """
    columns = list(dict.fromkeys(k for _, row in rows for k in row))
    cells = [[f"{row.get(c, math.nan):.3f}" for c in columns] for _, row in rows]
    widths = [max([len(c)] + [len(r[i]) for r in cells]) for i, c in enumerate(columns)]
    label_width = max([len(label) for label, _ in rows] + [len("set")])
    lines = ["  ".join([f"{'set':<{label_width}}", *(f"{c:>{w}}" for c, w in zip(columns, widths))])]
    for (label, _), row_cells in zip(rows, cells):
        lines.append("  ".join([f"{label:<{label_width}}", *(f"{v:>{w}}" for v, w in zip(row_cells, widths))]))
    return "\n".join(lines)


def save_eval(
    path: Path, rollouts: list[Rollout], *, env: str, env_args: dict[str, Any], model: str, step: int
) -> None:
    """One evaluation set's rollouts as a results directory (replacing an older one)."""
    if path.exists():
        shutil.rmtree(path)
    run, _ = RunDir.create(
        path,
        {
            "command": "train-eval",
            "env": env,
            "env_args": env_args,
            "model": model,
            "step": step,
            "num_tasks": len(rollouts),
            "rollouts_per_task": 1,
        },
    )
    for r in rollouts:
        run.append(r)
    run.close(status="complete", rollouts=len(rollouts))
