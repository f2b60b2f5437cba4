"""What an RL run measures: batch metrics, loss statistics over micro-batches, evaluations.

Every metric name is explained in docs/training.md. `evaluate` plays the fixed, seeded
evaluation sets (one per entry of `eval_env_args`), logs `eval/LABEL/...` and prints the
outcome table; its rollouts are saved under `RUN_DIR/eval/step_N/LABEL/` (an ordinary results
directory, readable by `rlvr report`).
"""

from __future__ import annotations

import math
import shutil
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from rlvr.engine import run_rollouts
from rlvr.envs.multiturn import MultiTurnEnv
from rlvr.results import RunDir
from rlvr.train.advantages import group_stats
from rlvr.train.config import TrainConfig
from rlvr.train.distributed import Dist
from rlvr.train.logging import MetricsLog, metric_name
from rlvr.train.sequences import MicroBatch
from rlvr.types import Rollout, SamplingArgs

# ---- loss statistics -------------------------------------------------------------------------


class LossStats:
    """Loss statistics over micro-batches (and ranks): loss terms add up by their batch share,
    other means are weighted by trainable tokens, min/max stay min/max."""

    SUMMED = ("loss/policy", "loss/total", "kl/ref")

    def __init__(self) -> None:
        self.sums: dict[str, float] = {}
        self.mins: dict[str, float] = {}
        self.maxs: dict[str, float] = {}
        self.grad_norms: list[float] = []
        self._pending: list[tuple[list[str], list[torch.Tensor], float, float, int]] = []

    def add(
        self, stats: dict[str, torch.Tensor], ent: torch.Tensor | None, logp: torch.Tensor, mb: MicroBatch, share: float
    ) -> None:
        """Queue a micro-batch's statistics; they are read back from the device all at once, by
        `result` (a read per value would make the CPU wait for the GPU each time)."""
        tokens = float(mb.cpu_mask.sum())
        if tokens == 0:
            return
        on = mb.mask > 0
        known = on & torch.isfinite(mb.gen_logp)
        names, values = list(stats), [torch.as_tensor(v, device=logp.device).float() for v in stats.values()]
        zero = logp.new_zeros(())
        if ent is not None:
            names.append("entropy/mean")
            values.append(torch.where(on, ent, zero).sum().float())
        names += ["_mismatch", "_known"]
        values += [torch.where(known, (mb.gen_logp - logp).abs(), zero).sum().float(), known.sum().float()]
        self._pending.append((names, values, share, tokens, mb.tokens))

    def _flush(self) -> None:
        if not self._pending:
            return
        flat = torch.stack([v for _, values, *_ in self._pending for v in values]).tolist()
        at = 0
        s = self.sums
        for names, _, share, tokens, processed in self._pending:
            for name in names:
                v, at = flat[at], at + 1
                if name in self.SUMMED:
                    s[name] = s.get(name, 0.0) + v * share
                elif name.endswith("/min"):
                    self.mins[name] = min(self.mins.get(name, math.inf), v)
                elif name.endswith("/max"):
                    self.maxs[name] = max(self.maxs.get(name, -math.inf), v)
                elif name.startswith("_") or name == "entropy/mean":
                    s[name] = s.get(name, 0.0) + v
                else:
                    s[name] = s.get(name, 0.0) + v * tokens
            s["_tokens"] = s.get("_tokens", 0.0) + tokens
            s["tokens/processed"] = s.get("tokens/processed", 0.0) + processed
            s["_updates"] = s.get("_updates", 0.0) + share
        self._pending.clear()

    def result(self, dist: Dist) -> dict[str, float]:
        self._flush()
        parts = dist.gather([(self.sums, self.mins, self.maxs)])
        sums: dict[str, float] = {}
        mins: dict[str, float] = {}
        maxs: dict[str, float] = {}
        for s, lo, hi in parts:
            for k, v in s.items():
                sums[k] = sums.get(k, 0.0) + v
            for k, v in lo.items():
                mins[k] = min(mins.get(k, math.inf), v)
            for k, v in hi.items():
                maxs[k] = max(maxs.get(k, -math.inf), v)
        tokens = sums.pop("_tokens", 0.0)
        known = sums.pop("_known", 0.0)
        mismatch = sums.pop("_mismatch", 0.0)
        updates = sums.pop("_updates", 0.0)
        out: dict[str, float] = {"tokens/trained": tokens, "tokens/processed": sums.pop("tokens/processed", 0.0)}
        for k, v in sums.items():
            out[k] = v / max(updates, 1e-12) if k in self.SUMMED else v / max(tokens, 1.0)
        out.update(mins)
        out.update(maxs)
        if known:
            out["logprob/gen_mismatch"] = mismatch / known
        if self.grad_norms:
            out["grad/norm"] = statistics.fmean(self.grad_norms)
        return out


# ---- batch metrics ---------------------------------------------------------------------------


def rollout_metrics(rollouts: list[Rollout], env: MultiTurnEnv[Any], cfg: TrainConfig) -> dict[str, float]:
    """Reward, outcome and rollout-shape metrics of a batch (see docs/training.md)."""
    ok = [r for r in rollouts if r.error is None]
    out: dict[str, float] = {}
    rewards = [r.reward for r in ok]
    out["reward/mean"] = statistics.fmean(rewards) if rewards else math.nan
    out["reward/std"] = statistics.pstdev(rewards) if len(rewards) > 1 else 0.0
    for name in env.rubric.names:
        out[f"reward/{name}"] = statistics.fmean(r.rewards[name] for r in ok) if ok else math.nan
    for key, value in (env.summarize(rollouts) or {}).items():
        out[f"outcome/{metric_name(key)}"] = float(value)
    turns = [t for r in rollouts for t in r.turns]
    out["rollout/turns"] = statistics.fmean(len(r.turns) for r in rollouts) if rollouts else 0.0
    out["rollout/completion_tokens"] = (
        statistics.fmean(r.usage.completion_tokens for r in rollouts) if rollouts else 0.0
    )
    out["rollout/turn_tokens"] = statistics.fmean(len(t.completion.token_ids or ()) for t in turns) if turns else 0.0
    out["rollout/length_cut_frac"] = sum(t.completion.finish_reason == "length" for t in turns) / max(len(turns), 1)
    out["rollout/truncated_frac"] = sum(r.truncated for r in rollouts) / max(len(rollouts), 1)
    out["rollout/error_frac"] = sum(r.error is not None for r in rollouts) / max(len(rollouts), 1)
    if len(rollouts) % cfg.rollouts_per_example == 0 and rollouts:
        out.update(group_stats([r.reward for r in rollouts], cfg.rollouts_per_example))
    return out


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
        f"(rollouts {m['time/rollouts']:.1f}s, train {m['time/train']:.1f}s)"
    )


# ---- evaluation ----------------------------------------------------------------------------


def evaluate(
    cfg: TrainConfig,
    load_env: Callable[[dict[str, Any]], MultiTurnEnv[Any]],
    run_async: Callable[[Any], Any],
    client: Any,
    sampling: SamplingArgs,
    dist: Dist,
    run_dir: Path,
    step: int,
    log: MetricsLog | None,
    say: Callable[..., None],
) -> None:
    """Play every fixed, seeded evaluation set; log and print its outcome table."""
    t0 = time.monotonic()
    metrics: dict[str, float] = {}
    table: list[tuple[str, dict[str, float]]] = []
    for extra, args in zip(cfg.eval_env_args or [{}], cfg.eval_sets):
        env = load_env(args)
        tasks = env.tasks("eval")[: cfg.eval_tasks]
        mine = tasks[dist.rank :: dist.world]
        rollouts = dist.gather(
            run_async(
                run_rollouts(env, client, mine, rollouts_per_task=1, concurrency=max(len(mine), 1), sampling=sampling)
            )
        )
        if not dist.main:
            continue
        label = eval_label(extra)
        ok = [r for r in rollouts if r.error is None]
        row = {"reward": statistics.fmean(r.reward for r in ok) if ok else math.nan}
        outcomes = {metric_name(k): float(v) for k, v in (env.summarize(rollouts) or {}).items()}
        row.update(outcomes)
        metrics[f"eval/{label}/reward/mean"] = row["reward"]
        for name in env.rubric.names:
            metrics[f"eval/{label}/reward/{name}"] = statistics.fmean(r.rewards[name] for r in ok) if ok else math.nan
        metrics.update({f"eval/{label}/outcome/{k}": v for k, v in outcomes.items()})
        metrics[f"eval/{label}/error_frac"] = 1 - len(ok) / max(len(rollouts), 1)
        table.append((label, row))
        save_eval(run_dir / "eval" / f"step_{step:06d}" / label, rollouts, cfg, args, step)
    if not dist.main:
        return
    metrics["time/eval"] = time.monotonic() - t0
    text = format_table(table)
    say(f"evaluation at step {step}:\n{text}")
    if log is not None:
        log.write(step, metrics)
        log.write_text(step, "eval", text.replace("\n", "  \n"))
        log.plot_async()


def eval_label(extra: dict[str, Any]) -> str:
    """The name of an evaluation set in metric names, from its entry of eval_env_args.

    >>> eval_label({"opponent": "random"}), eval_label({})
    ('opponent=random', 'default')
    """
    return metric_name(",".join(f"{k}={v}" for k, v in sorted(extra.items()))) if extra else "default"


def format_table(rows: list[tuple[str, dict[str, float]]]) -> str:
    """A plain-text table: one row per evaluation set, one column per number."""
    columns = list(dict.fromkeys(k for _, row in rows for k in row))
    width = max([len(label) for label, _ in rows] + [8])
    lines = [" " * width + "".join(f"{c:>14}" for c in columns)]
    for label, row in rows:
        lines.append(f"{label:<{width}}" + "".join(f"{row.get(c, math.nan):>14.3f}" for c in columns))
    return "\n".join(lines)


def save_eval(path: Path, rollouts: list[Rollout], cfg: TrainConfig, args: dict[str, Any], step: int) -> None:
    if path.exists():
        shutil.rmtree(path)
    run, _ = RunDir.create(
        path,
        {
            "command": "train-eval",
            "env": cfg.env,
            "env_args": args,
            "model": cfg.model,
            "step": step,
            "num_tasks": len(rollouts),
            "rollouts_per_task": 1,
        },
    )
    for r in rollouts:
        run.append(r)
    run.close(status="complete", rollouts=len(rollouts))
