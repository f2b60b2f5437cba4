"""What a training step measures about its batch: rewards, outcomes, rollout shape, timing.

Every metric name is explained in docs/training.md. Reward numbers come from
`rlvr.summary.summarize` (what `rlvr eval` prints), so a mean reward is computed in one place;
the loss statistics are `rlvr.train.loss_stats`, the evaluation sets `rlvr.train.evaluation`.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Mapping
from typing import Any, Protocol

from rlvr.envs.multiturn import MultiTurnEnv
from rlvr.summary import summarize
from rlvr.train.advantages import group_stats, own_logprob
from rlvr.train.logging import metric_name
from rlvr.types import Rollout

_NO_STATS = {"mean": math.nan, "std": math.nan}


class Sums(Protocol):
    """Sums over every process (`rlvr.train.distributed.Dist`)."""

    def sum(self, values: list[float]) -> list[float]: ...


def step_metrics(
    rollouts: list[Rollout],
    env: MultiTurnEnv[Any],
    group_size: int,
    dist: Sums,
    *,
    train_stats: Mapping[str, float],
    split: int,
    kept_groups: float,
    scored: list[float] | None,
    restart_metrics: Mapping[str, float],
    lr: float,
    gen_counts: Mapping[str, float],
    times: Mapping[str, float],
) -> dict[str, float]:
    """Everything a training step logs (docs/training.md lists each name).

    `rollouts`: every process's; `split`: this process's rollouts cut into several sequences;
    `scored`: this process's turn scores (None without turn_credit); `times`: seconds of
    `rollouts`, `train` and `weight_sync`, and the `start` of the step (time.monotonic)."""
    metrics = rollout_metrics(rollouts, env, group_size)
    metrics.update(train_stats)
    metrics["rollout/split_frac"] = dist.sum([split])[0] / max(len(rollouts), 1)
    metrics["batch/kept_groups_frac"] = kept_groups
    if scored is not None:
        n_scored, total = dist.sum([float(len(scored)), math.fsum(scored)])
        metrics["turn/scored"] = n_scored
        metrics["turn/score_mean"] = total / n_scored if n_scored else math.nan
    metrics.update(restart_metrics)
    metrics["optim/lr"] = lr
    metrics["time/weight_sync"] = times["weight_sync"]
    metrics.update(gen_counts)
    step_s = time.monotonic() - times["start"]
    timing = timing_metrics(
        rollouts, rollouts_s=times["rollouts"], train_s=times["train"], step_s=step_s,
        tokens_processed=metrics["tokens/processed"],
    )  # fmt: skip
    metrics.update(timing)
    return metrics


def reward_metrics(summary: dict[str, Any], rollouts: list[Rollout], env: MultiTurnEnv[Any]) -> dict[str, float]:
    """`reward/mean`, `reward/std` and `reward/<function>` over the scored rollouts (nan when
    none is scored; std 0), and `outcome/<name>` from the environment's `summarize`.

    `summary` is `rlvr.summary.summarize(rollouts)`.
    """
    scored = summary["rollouts"] - summary["errors"]
    out = {"reward/mean": summary["reward"]["mean"], "reward/std": summary["reward"]["std"] if scored else 0.0}
    for name in env.rubric.names:
        out[f"reward/{name}"] = summary["rewards"].get(name, _NO_STATS)["mean"]
    for key, value in (env.summarize(rollouts) or {}).items():
        out[f"outcome/{metric_name(key)}"] = float(value)
    return out


def rollout_metrics(rollouts: list[Rollout], env: MultiTurnEnv[Any], group_size: int) -> dict[str, float]:
    """Reward, outcome, rollout-shape and group metrics of a batch (see docs/training.md)."""
    s = summarize(rollouts)
    out = reward_metrics(s, rollouts, env)
    turns = [t for r in rollouts for t in r.turns]
    out["rollout/turns"] = statistics.fmean(len(r.turns) for r in rollouts) if rollouts else 0.0
    out["rollout/completion_tokens"] = s["completion_tokens"]["mean"] if rollouts else 0.0
    out["rollout/turn_tokens"] = statistics.fmean(len(t.completion.token_ids or ()) for t in turns) if turns else 0.0
    out["rollout/length_cut_frac"] = sum(t.completion.finish_reason == "length" for t in turns) / max(len(turns), 1)
    own = [lp for r in rollouts if r.error is None and (lp := own_logprob(r)) is not None]
    out["rollout/logprob"] = sum(own) / len(own) if own else math.nan  # -inf, not a crash, past float range
    out["rollout/truncated_frac"] = s["truncated"]
    out["rollout/error_frac"] = s["errors"] / max(len(rollouts), 1)
    if len(rollouts) % group_size == 0 and rollouts:
        out.update(group_stats([r.reward for r in rollouts], group_size))
    return out


def timing_metrics(
    rollouts: list[Rollout], *, rollouts_s: float, train_s: float, step_s: float, tokens_processed: float
) -> dict[str, float]:
    """`time/*` and `throughput/*` of a step (`tokens_processed`: what the update's forward
    passes saw)."""
    gen_tokens = sum(r.usage.completion_tokens for r in rollouts)
    return {
        "time/rollouts": rollouts_s,
        "time/train": train_s,
        "time/step": step_s,
        "time/env": phase_seconds(rollouts, "env"),
        "time/score": phase_seconds(rollouts, "score"),
        "throughput/rollouts_per_s": len(rollouts) / step_s,
        "throughput/gen_tokens_per_s": gen_tokens / max(rollouts_s, 1e-9),
        "throughput/train_tokens_per_s": tokens_processed / max(train_s, 1e-9),
    }


def phase_seconds(rollouts: list[Rollout], key: str) -> float:
    """Seconds spent in one phase, summed over rollouts (concurrent rollouts overlap)."""
    return sum(r.timing.get(key, 0.0) for r in rollouts)


def step_line(step: int, steps: int, m: dict[str, float]) -> str:
    outcome = " ".join(f"{k[8:-4]} {v:.0f}%" for k, v in m.items() if k.startswith("outcome/") and k.endswith("_pct"))
    return (
        f"step {step}/{steps}  reward {m['reward/mean']:.3f}  "
        + (f"[{outcome}]  " if outcome else "")
        + f"loss {m.get('loss/total', math.nan):+.4f}  entropy {m.get('entropy/mean', math.nan):.3f}  "
        f"tokens/turn {m['rollout/turn_tokens']:.0f}  {m['time/step']:.1f}s "
        f"(rollouts {m['time/rollouts']:.1f}s, train {m['time/train']:.1f}s"
        + (f", MFU {m['throughput/train_mfu']:.0%})" if "throughput/train_mfu" in m else ")")
    )
