"""GRPO-family reinforcement learning for multi-turn environments, as one readable loop.

    rlvr train tictactoe --model runs/sft/final --config train.toml

Each step: (1) draw a stratified batch of tasks, (2) play `rollouts_per_example` episodes of
each with the current policy through the ordinary engine and `LocalModel` (every turn, env
replies included), (3) turn rewards into group advantages, (4) build token sequences from the
ids that were sampled, (5) take the policy-gradient step(s), (6) log, (7) evaluate now and then,
(8) checkpoint now and then. Knobs: `rlvr.train.config.TrainConfig`; metrics: docs/training.md.

Algorithmic choices
-------------------
- Group advantage: reward - group mean, divided by the group std unless `scale_std` is off
  (default off for dr_grpo). `rlvr.train.advantages` does the arithmetic.
- Failed rollouts (an exception in the env, the model or a reward function) are never trained
  on; for the baseline their reward is replaced by the mean of their group's scored rollouts,
  so they shift nobody's advantage.
- Truncated rollouts (max_turns, token budget, timeout, prompt too long) keep their reward and
  are trained on by default: running out of turns is a real outcome (a tic-tac-toe timeout
  scores no win). `mask_truncated` leaves them out of the loss; they still count in their
  group's baseline. A single turn cut at max_tokens is trained like any other.
- DAPO's dynamic sampling: with loss = dapo (`drop_uniform_groups` in its row of
  `rlvr.train.loss_specs.SPECS`), groups whose rewards are all equal are dropped from the batch (no refill: the batch simply shrinks; `batch/kept_groups_frac` says by how much).
- Token sequences come from the sampled ids, never from re-tokenised text. A multi-turn rollout
  is one sequence while each turn's prompt ids extend the previous prompt + sampled ids; where
  they do not (the template re-tokenised or rewrote history), a new sequence starts from that
  turn's own prompt ids. Details: `rlvr.train.sequences`.
- Old log-probs are recomputed by the trainer, not taken from generation. With
  `minibatches = 1` (the default, fully on-policy) old = new.detach() from the same forward
  pass, so the ratio is exactly 1 at no extra cost; with `minibatches > 1` one no-grad pass
  over the whole batch before the first update gives them. Why not generation's: those come
  from another code path (KV cache, batched decode, left padding, maybe other kernels or
  dtypes), so they differ from the training forward by numerical noise that the clip and the
  IS weight would then treat as policy change. Generation's log-probs are still used: their
  gap to the trainer's is logged as `logprob/gen_mismatch`, the early warning for a
  tokenisation or numerics mismatch between sampling and training.
- Log-probs are taken at the sampling temperature, log_softmax(logits / T): the trained policy
  is the one that sampled (LocalModel reports the same quantity).
- Seeds: every request's seed mixes the run seed, the step and the engine's per-rollout, per-turn
  seed, so a task drawn again later gets fresh samples while a resumed run replays exactly.
  Evaluation uses fixed seeds, identical at every evaluation.
- Micro-batches are rescaled so their summed gradient equals the whole batch's (see
  `rlvr.train.sequences`); gradients are clipped to `max_grad_norm`; AdamW, no weight decay.
- No dropout: the model stays in eval mode, so generation, old and new log-probs agree.
- KL (kl_coef > 0): k3 estimator to the starting model; a frozen copy for full fine-tuning, the
  same model with adapters disabled for LoRA.
- Several GPUs (torchrun / accelerate launch): each rank plays its contiguous share of the
  batch's tasks (whole groups), DDP all-reduces gradients, normalisers count every rank's
  tokens; rank 0 logs and writes checkpoints.
- A non-finite loss or gradient norm stops the run before the optimizer step, leaving the last
  checkpoint as the last good state.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import math
import re
import statistics
import time
from collections.abc import Callable, Coroutine, Iterator
from pathlib import Path
from typing import Any, TypeVar

import torch

from rlvr.clients.local import LocalModel
from rlvr.engine import run_rollouts
from rlvr.envs.multiturn import MultiTurnEnv, mix_seed
from rlvr.errors import TrainingError, UsageError
from rlvr.sampler import StratifiedSampler
from rlvr.train import checkpoint as ckpt_io
from rlvr.train.advantages import drop_uniform_groups, group_advantages
from rlvr.train.config import TrainConfig, check_resume
from rlvr.train.distributed import Dist, setup_distributed
from rlvr.train.evaluation import EvalSet, eval_metrics, eval_sets, evaluate, save_eval
from rlvr.train.logging import MetricsLog
from rlvr.train.loss_stats import LossStats
from rlvr.train.losses import LOSSES, LossConfig
from rlvr.train.metrics import rollout_metrics, step_line, timing_metrics
from rlvr.train.model import (
    export_final,
    load_model_config,
    load_reference,
    load_tokenizer,
    load_trainable,
    make_optimizer,
    make_scheduler,
    token_logprobs,
    unwrap,
)
from rlvr.train.sequences import (
    MicroBatch,
    build_sequences,
    empty_micro_batch,
    micro_batches,
    normaliser,
)
from rlvr.types import Rollout, SamplingArgs

EnvFactory = Callable[..., MultiTurnEnv[Any]]
T = TypeVar("T")
PLOT_EVERY = 10
"""Regenerate the PNG plots every N steps (and at every evaluation and at the end)."""


def train(
    cfg: TrainConfig,
    *,
    resume: bool = False,
    make_env: EnvFactory | None = None,
    quiet: bool = False,
    plots: bool = True,
) -> list[dict[str, float]]:
    """Run (or with `resume`, continue) the training described by `cfg`.

    `make_env(**env_args)` builds environments (default: the installed environment `cfg.env`);
    `plots=False` skips the PNG plots (tests, benchmarks). Returns the metrics of each step
    this call trained.
    """
    dist = setup_distributed()
    say: Callable[..., None] = print if dist.main and not quiet else (lambda *a, **k: None)
    run_dir = Path(cfg.output_dir or default_output_dir(cfg))
    torch.manual_seed(cfg.seed + dist.rank)
    if dist.device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True

    # ---- environment and stratified sampler ------------------------------------------------------
    if make_env is None:
        from rlvr.registry import load_environment

        make_env = functools.partial(load_environment, cfg.env)

    envs = _Envs(make_env, cfg.max_turns)  # one per distinct env args; closed at the end
    env = envs.get(cfg.env_args)
    sampler = make_sampler(env, cfg)
    if cfg.tasks_per_batch % (dist.world * cfg.minibatches):
        raise UsageError(
            f"the {cfg.tasks_per_batch} tasks of a batch do not split over {dist.world} "
            f"process(es) x {cfg.minibatches} minibatch(es); make batch_size / "
            f"rollouts_per_example a multiple of {dist.world * cfg.minibatches}"
        )

    # ---- model, optimizer, and the checkpoint to resume from -------------------------------------
    tokenizer = load_tokenizer(cfg.model)
    fingerprint = ckpt_io.model_fingerprint(load_model_config(cfg.model), tokenizer)
    ckpt, state = ckpt_io.open_run_dir(
        run_dir,
        cfg.to_dict(),
        config_file="config.json",
        resume=resume,
        check_resume=lambda saved: check_resume(saved, cfg),
        fingerprint=fingerprint,
        barrier=dist.barrier,
        main=dist.main,
    )
    model = load_trainable(cfg.model, lora=cfg.lora, device=dist.device, checkpoint=ckpt.model_dir if ckpt else None)
    model.eval()  # no dropout anywhere: generation, old and new log-probs see the same network
    ref = load_reference(cfg.model, dist.device) if cfg.kl_coef > 0 and cfg.lora is None else None
    optimizer = make_optimizer(model, cfg.lr)
    scheduler = make_scheduler(optimizer, schedule=cfg.lr_schedule, warmup=cfg.warmup_steps, total=cfg.steps)
    start = 0
    if ckpt is not None and state is not None:
        sampler.load_state_dict(state["sampler"])
        start = ckpt_io.restore_training(ckpt, state, optimizer=optimizer, scheduler=scheduler, rank=dist.rank)
        say(f"resuming {run_dir} from step {start} ({ckpt.path})")
    policy = model
    if dist.active:
        from torch.nn.parallel import DistributedDataParallel

        policy = DistributedDataParallel(model, device_ids=[dist.device.index] if dist.device.type == "cuda" else None)
    per_rank = cfg.batch_size // dist.world
    client = LocalModel(
        cfg.model,
        model=model,
        tokenizer=tokenizer,
        max_batch_size=max(per_rank, cfg.eval_tasks),
        autocast="bfloat16" if cfg.bf16 else None,
    )
    log = MetricsLog(run_dir, resume_step=start, plots=plots) if dist.main else None
    loss_cfg = LossConfig(
        clip_eps=cfg.clip_eps,
        clip_eps_high=cfg.clip_eps_high,
        max_is_weight=cfg.max_is_weight,
        kl_coef=cfg.kl_coef,
        norm_len=cfg.max_tokens,
    )
    sampling = SamplingArgs(
        max_tokens=cfg.max_tokens, temperature=cfg.temperature, top_p=cfg.top_p, stop=env.sampling.stop, logprobs=True
    )
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    say(
        f"training {cfg.model} on {cfg.env}: {cfg.steps} steps x {cfg.batch_size} rollouts "
        f"({cfg.tasks_per_batch} tasks x {cfg.rollouts_per_example}), loss {cfg.loss}, "
        f"{'LoRA r=' + str(cfg.lora_rank) if cfg.lora_rank else 'full fine-tuning'}, "
        f"{dist.world} process(es) on {dist.device.type}; run dir {run_dir}"
    )

    history: list[dict[str, float]] = []
    with _session(envs, log) as run_async:
        sets: list[EvalSet] = []

        def evaluate_now(step: int) -> None:
            """Play the evaluation sets; rank 0 logs, prints and saves them."""
            t0 = time.monotonic()
            if not sets:
                sets.extend(eval_sets(cfg, envs.get, rank=dist.rank, world=dist.world))
            played = {
                label: dist.gather(rollouts) for label, rollouts in run_async(evaluate(sets, client, sampling)).items()
            }
            if not dist.main:
                return
            for s in sets:
                where = run_dir / "eval" / f"step_{step:06d}" / s.label
                save_eval(where, played[s.label], env=cfg.env, env_args=s.env_args, model=cfg.model, step=step)
            metrics, table = eval_metrics(sets, played)
            metrics["time/eval"] = time.monotonic() - t0
            say(f"evaluation at step {step}:\n{table}")
            if log is not None:
                log.write(step, metrics)
                log.write_text(step, "eval", table.replace("\n", "  \n"))
                log.plot_async()

        if start == 0 and cfg.eval_every is not None:
            evaluate_now(0)
        for step in range(start, cfg.steps):
            t_step = time.monotonic()
            # ---- 1. a stratified batch of tasks; this process plays its share --------------------
            tasks = dist.shard(next(sampler))

            # ---- 2. rollouts with the current policy (multi-turn, env replies included) ----------
            t0 = time.monotonic()
            rollouts = run_async(
                run_rollouts(
                    env,
                    _StepSeeded(client, cfg.seed, step),
                    tasks,
                    sampling=sampling,
                    rollouts_per_task=cfg.rollouts_per_example,
                    concurrency=len(tasks) * cfg.rollouts_per_example,
                )
            )
            t_rollouts = time.monotonic() - t0

            # ---- 3. group advantages -------------------------------------------------------------
            advantages, trainable, kept_groups = compute_advantages(rollouts, cfg)

            # ---- 4. token sequences from the sampled ids (env tokens masked) ---------------------
            seqs, split = build_sequences(rollouts, advantages, trainable)

            # ---- 5. policy update ----------------------------------------------------------------
            t0 = time.monotonic()
            lr = scheduler.get_last_lr()[0]
            try:
                train_stats = update_policy(policy, ref, seqs, len(rollouts), cfg, loss_cfg, optimizer, dist, pad_id)
            except TrainingError as exc:
                raise TrainingError(f"step {step + 1}: {exc}; {_last_good(run_dir)}") from None
            scheduler.step()
            client.clear_cache()  # the kept KV caches belong to the old weights
            sampler_state = sampler.state_dict()
            t_train = time.monotonic() - t0

            # ---- 6. log --------------------------------------------------------------------------
            everyone = dist.gather(rollouts)
            metrics = rollout_metrics(everyone, env, cfg.rollouts_per_example)
            metrics.update(train_stats)
            metrics.update(
                {
                    "rollout/split_frac": dist.sum([split])[0] / max(len(everyone), 1),
                    "batch/kept_groups_frac": kept_groups,
                    "optim/lr": lr,
                }
            )
            metrics.update(
                timing_metrics(
                    everyone,
                    rollouts_s=t_rollouts,
                    train_s=t_train,
                    step_s=time.monotonic() - t_step,
                    tokens_processed=metrics["tokens/processed"],
                )
            )
            history.append(metrics)
            if log is not None:
                log.write(step + 1, metrics)
                if (step + 1) % PLOT_EVERY == 0:
                    log.plot_async()
            say(step_line(step + 1, cfg.steps, metrics))

            # ---- 7. evaluate ---------------------------------------------------------------------
            last_step = step + 1 == cfg.steps
            if cfg.eval_every is not None and ((step + 1) % cfg.eval_every == 0 or last_step):
                evaluate_now(step + 1)

            # ---- 8. checkpoint -------------------------------------------------------------------
            if last_step or (cfg.save_every is not None and (step + 1) % cfg.save_every == 0):
                t0 = time.monotonic()
                state = {
                    "step": step + 1,
                    "optimizer": optimizer.state_dict(),
                    "scheduler": scheduler.state_dict(),
                    "sampler": sampler_state,
                    "config": cfg.to_dict(),
                    "fingerprint": fingerprint,
                }
                ckpt_io.save_checkpoint(
                    run_dir,
                    step + 1,
                    model=model,
                    tokenizer=tokenizer,
                    trainer_state=state,
                    rank=dist.rank,
                    barrier=dist.barrier,
                )
                if log is not None:
                    log.write(step + 1, {"time/checkpoint": time.monotonic() - t0})

        # ---- the end: a plain model folder anyone can load ---------------------------------------
        if dist.main and start < cfg.steps:
            export_final(model, tokenizer, run_dir / "final")
            say(f"done: final model in {run_dir / 'final'}, metrics in {run_dir / 'metrics.csv'}")
        if log is not None:
            log.final_plots()
    dist.barrier()
    dist.close()
    return history


@contextlib.contextmanager
def _session(envs: _Envs, log: MetricsLog | None) -> Iterator[Callable[[Coroutine[Any, Any, T]], T]]:
    """One event loop for the whole run (envs may hold loop-bound resources); closes the envs
    and the log whatever happens."""
    runner = asyncio.Runner()
    try:
        yield runner.run
    finally:
        try:
            runner.run(envs.aclose())
        finally:
            runner.close()
            if log is not None:
                log.close()  # waits for the plots being drawn


class _Envs:
    """Environments by their arguments (training and evaluation sets), built once each."""

    def __init__(self, make_env: EnvFactory, max_turns: int | None) -> None:
        self.make_env, self.max_turns = make_env, max_turns
        self.built: dict[str, MultiTurnEnv[Any]] = {}

    def get(self, args: dict[str, Any]) -> MultiTurnEnv[Any]:
        key = json.dumps(args, sort_keys=True, default=str)
        if key not in self.built:
            env = self.make_env(**args)
            if self.max_turns is not None:
                env.max_turns = self.max_turns
            self.built[key] = env
        return self.built[key]

    async def aclose(self) -> None:
        for env in self.built.values():
            await env.aclose()


def _last_good(run_dir: Path) -> str:
    last = ckpt_io.latest_checkpoint(run_dir)
    where = f"the last good checkpoint is {last.path}" if last else "no checkpoint was written yet"
    return f"the weights were not updated and {where} (resume with --resume, e.g. after lowering lr)"


# ==== the pieces of a step ===================================================================


class _StepSeeded:
    """A client whose request seeds also mix in (run seed, step)."""

    def __init__(self, client: Any, seed: int, step: int) -> None:
        self.client, self.seed, self.step, self.name = client, seed, step, client.name

    async def chat(self, messages: Any, sampling: SamplingArgs, tools: Any = None) -> Any:
        seed = mix_seed(self.seed, self.step, sampling.seed or 0)
        return await self.client.chat(messages, sampling.replace(seed=seed), tools)


def compute_advantages(rollouts: list[Rollout], cfg: TrainConfig) -> tuple[list[float], list[bool], float]:
    """Advantages, which rollouts to train on, and the share of groups kept (DAPO filter)."""
    g = cfg.rollouts_per_example
    rewards = [r.reward for r in rollouts]
    for start in range(0, len(rollouts), g):  # failed rollouts take their group's mean
        group = rollouts[start : start + g]
        scored = [r.reward for r in group if r.error is None]
        fill = statistics.fmean(scored) if scored else 0.0
        for i, r in enumerate(group):
            if r.error is not None:
                rewards[start + i] = fill
    advantages = group_advantages(rewards, g, scale_std=cfg.advantage_std_scaling)
    trainable = [r.error is None and not (cfg.mask_truncated and r.truncated) for r in rollouts]
    kept = 1.0
    if cfg.loss_spec.drop_uniform_groups:
        keep = drop_uniform_groups(rewards, g)
        trainable = [t and keep[i // g] for i, t in enumerate(trainable)]
        kept = sum(keep) / max(len(keep), 1)
    return advantages, trainable, kept


def update_policy(
    policy: Any,
    ref: Any,
    seqs: list[Any],
    n_rollouts: int,
    cfg: TrainConfig,
    loss_cfg: LossConfig,
    optimizer: torch.optim.Optimizer,
    dist: Dist,
    pad_id: int,
) -> dict[str, float]:
    """`cfg.minibatches` optimizer steps on this rank's sequences (of `n_rollouts` rollouts,
    whole groups per minibatch); returns the train metrics of all ranks."""
    kind, loss_fn, device = cfg.loss_spec.normalisation, LOSSES[cfg.loss], dist.device
    per = max(1, n_rollouts // cfg.minibatches)
    plans = [
        micro_batches([s for s in seqs if s.rollout // per == m], cfg.micro_batch_size, pad_id, device)
        for m in range(cfg.minibatches)
    ]
    autocast = torch.autocast(device.type, dtype=torch.bfloat16, enabled=cfg.bf16)
    old: dict[tuple[int, int], torch.Tensor] = {}
    if cfg.minibatches > 1:  # off-policy updates follow: freeze the behaviour log-probs now
        with torch.no_grad(), autocast:
            for m, plan in enumerate(plans):
                for u, mb in enumerate(plan):
                    old[m, u] = token_logprobs(policy, mb.ids, mb.attention, cfg.temperature)[0].float()
    acc = LossStats()
    params = [p for p in policy.parameters() if p.requires_grad]
    for m, plan in enumerate(plans):
        total = dist.sum([sum(normaliser(kind, mb.cpu_mask) for mb in plan)])[0]
        if total == 0:
            continue  # nothing to train on anywhere: no optimizer step (Adam would still move)
        count = dist.max(len(plan))
        plan = plan + [empty_micro_batch(pad_id, device)] * (count - len(plan))
        losses = []  # checked once after the backward passes (no GPU wait per micro-batch);
        # every rank runs every backward (DDP) whatever they hold
        for u, mb in enumerate(plan):
            host = mb.cpu_mask
            share = normaliser(kind, host) / total if host.numel() and host.any() else 0.0
            sync = u == count - 1 or not dist.active
            with contextlib.nullcontext() if sync else policy.no_sync():
                with autocast:
                    logp, ent = token_logprobs(policy, mb.ids, mb.attention, cfg.temperature, entropy=True)
                ref_logp = _reference_logprobs(policy, ref, mb, cfg, autocast)
                old_logp = old.get((m, u), logp.detach())
                loss, stats = loss_fn(logp, old_logp, mb.adv, mb.mask, loss_cfg, ref_logp=ref_logp)
                losses.append(loss.detach())
                (loss * (share * dist.world)).backward()
            acc.add(stats, ent, old_logp, mb, share)
        grad_norm = torch.nn.utils.clip_grad_norm_(params, cfg.max_grad_norm)
        values = torch.stack([*losses, grad_norm.detach().float()]).tolist()
        bad = next(
            (
                f"the loss is {v} (micro-batch {u + 1} of update {m + 1})"
                for u, v in enumerate(values[:-1])
                if not math.isfinite(v)
            ),
            "",
        )
        if not bad and not math.isfinite(values[-1]):
            bad = f"the gradient norm is {values[-1]} (update {m + 1})"
        if dist.max(int(bool(bad))):  # stop on every rank together, before the step
            optimizer.zero_grad(set_to_none=True)
            raise TrainingError(bad or "another process got a non-finite loss")
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        acc.grad_norms.append(values[-1])
    return acc.result(dist)


def _reference_logprobs(policy: Any, ref: Any, mb: MicroBatch, cfg: TrainConfig, autocast: Any) -> torch.Tensor | None:
    if cfg.kl_coef == 0:
        return None
    with torch.no_grad(), autocast:
        if ref is not None:
            return token_logprobs(ref, mb.ids, mb.attention, cfg.temperature)[0].float()
        with unwrap(policy).disable_adapter():
            return token_logprobs(policy, mb.ids, mb.attention, cfg.temperature)[0].float()


# ==== setup ==================================================================================


def default_output_dir(cfg: TrainConfig) -> str:
    """`runs/train/ENV--MODEL`, MODEL from the model path (`runs/sft/x/final` -> `x-final`).

    >>> default_output_dir(TrainConfig(env="tictactoe", model="runs/sft/small/final"))
    'runs/train/tictactoe--small-final'
    """
    parts = [p for p in cfg.model.split("/") if p]
    name = "-".join(parts[-2:]) if parts[-1] in ("final", "model") and len(parts) > 1 else parts[-1]
    return f"runs/train/{cfg.env}--{re.sub(r'[^A-Za-z0-9._-]+', '_', name)[:60]}"


def make_sampler(env: MultiTurnEnv[Any], cfg: TrainConfig) -> StratifiedSampler:
    """The environment's stratified sampler (`env.sampler`), `tasks_per_batch` tasks a batch.

    Environments with a difficulty (tic-tac-toe) bucket their tasks by it; the others give one
    bucket, a seeded shuffle."""
    groups = env.sampler(cfg.seed, num_groups=cfg.num_groups).num_groups
    if cfg.num_groups is not None and groups != cfg.num_groups:
        raise UsageError(
            f"environment {cfg.env!r} makes {groups} difficulty bucket(s), not "
            f"num_groups={cfg.num_groups} (it has no difficulty, or its difficulty "
            f"range has zero width); leave num_groups unset"
        )
    if cfg.tasks_per_batch % groups:
        raise UsageError(
            f"the {cfg.tasks_per_batch} tasks of a batch do not split into the "
            f"environment's {groups} difficulty buckets; make batch_size / "
            f"rollouts_per_example a multiple of {groups}"
        )
    return env.sampler(cfg.seed, num_groups=cfg.num_groups, tasks_per_group=cfg.tasks_per_batch // groups)
