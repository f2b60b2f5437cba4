"""Everything a training run builds before its first step, as one plain object.

    run = setup_run(cfg, resume=False, make_env=None, quiet=False, plots=True)
    run.model, run.policy, run.optimizer, run.sampler, run.restarts, run.log ...

`Run` is data, not a trainer: the loop in `rlvr.train.grpo` reads it and calls the step
functions itself. Set-up happens in a fixed order (seed, environments, sampler, restarts, model,
optimizer, checkpoint state, evaluation sets), so a run with the same config and seed replays
exactly. `save_checkpoint` writes what `setup_run` reads back with `resume`.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from rlvr.envs.multiturn import MultiTurnEnv
from rlvr.errors import UsageError
from rlvr.sampler import StratifiedSampler, difficulty_buckets
from rlvr.train import checkpoint as ckpt_io
from rlvr.train.average import WeightAverage
from rlvr.train.config import TrainConfig, check_fits, check_resume
from rlvr.train.distributed import Dist, setup_distributed
from rlvr.train.evaluation import EvalSet, eval_sets
from rlvr.train.logging import MetricsLog
from rlvr.train.logprobs import blocks
from rlvr.train.model import (
    load_model_config,
    load_reference,
    load_tokenizer,
    load_trainable,
    make_optimizer,
    make_scheduler,
    use_bf16,
)
from rlvr.train.restarts import Restarts
from rlvr.train.session import EnvFactory, Envs
from rlvr.train.sharding import wrap
from rlvr.train.update import UpdateSettings
from rlvr.types import SamplingArgs


@dataclass
class Run:
    """What `setup_run` built; the training loop reads it (rank-0-only parts are None elsewhere)."""

    cfg: TrainConfig
    dist: Dist
    say: Callable[..., None]
    """print on rank 0 unless quiet (flushed: a step may take minutes on a CPU)"""
    run_dir: Path
    envs: Envs
    env: MultiTurnEnv[Any]
    """the training environment"""
    sampler: StratifiedSampler
    restarts: Restarts
    tokenizer: Any
    fingerprint: str
    model: torch.nn.Module
    """the trainable model (its weights; `policy` wraps it for DDP/FSDP)"""
    policy: torch.nn.Module
    ref: torch.nn.Module | None
    """the frozen reference model of the KL term (None without kl_coef, or with LoRA)"""
    optimizer: torch.optim.Optimizer
    scheduler: Any
    average: WeightAverage | None
    """the weight average (ema_decay), evaluated and exported instead of the weights"""
    start: int
    """the step this call starts at (0, or the resumed checkpoint's)"""
    sampling: SamplingArgs
    how: UpdateSettings
    log: MetricsLog | None
    """rank 0's metrics log"""
    sets: list[EvalSet]
    """the evaluation sets this process plays (empty without eval_every)"""
    sharded: bool
    bf16: bool


def setup_run(cfg: TrainConfig, *, resume: bool, make_env: EnvFactory | None, quiet: bool, plots: bool) -> Run:
    """Seed, environments, model, optimizer and the state to resume from, in that order."""
    dist = setup_distributed(cfg.device)
    say: Callable[..., None] = (
        functools.partial(print, flush=True) if dist.main and not quiet else (lambda *a, **k: None)
    )
    run_dir = Path(cfg.output_dir or ckpt_io.default_output_dir(cfg.env, cfg.model))
    torch.manual_seed(cfg.seed + dist.rank)
    if dist.device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    if make_env is None:
        from rlvr.registry import load_environment

        make_env = functools.partial(load_environment, cfg.env)
    envs = Envs(make_env, cfg.max_turns)  # one per distinct env args; closed at the end
    env = envs.get(cfg.env_args)
    sampler = make_sampler(env, cfg)
    restarts = Restarts(
        env,
        frac=cfg.restarts.frac,
        below=cfg.restarts.below,
        tasks_per_batch=cfg.tasks_per_batch,
        seed=cfg.seed,
        points=cfg.restarts.points,
        greedy=cfg.restarts.greedy,
        unsure=cfg.restarts.unsure,
        explore=cfg.restarts.explore,
        group_size=cfg.group_size,
    )
    check_fits(cfg, env, dist.world)
    return _with_model(cfg, dist, say, run_dir, envs, env, sampler, restarts, resume=resume, plots=plots)


def _with_model(
    cfg: TrainConfig,
    dist: Dist,
    say: Callable[..., None],
    run_dir: Path,
    envs: Envs,
    env: MultiTurnEnv[Any],
    sampler: StratifiedSampler,
    restarts: Restarts,
    *,
    resume: bool,
    plots: bool,
) -> Run:
    """The model, optimizer and the checkpoint to resume from; then the evaluation sets."""
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
    # (sharded: loaded on the CPU, each process then moves only its shard to its GPU)
    sharded = cfg.compute.sharding == "fsdp" and dist.active
    load_on = torch.device("cpu") if sharded else dist.device
    model = load_trainable(cfg.model, lora=cfg.lora_spec, device=load_on, checkpoint=ckpt.model_dir if ckpt else None)
    model.eval()  # no dropout anywhere: generation, old and new log-probs see the same network
    bf16 = use_bf16(cfg.compute.bf16, dist.device)
    policy = wrap(model, dist, cfg.compute.sharding, bf16=bf16)  # DDP, FSDP2 (in place) or the model alone
    for option in ("gradient_checkpointing", "compile_blocks"):  # a model they cannot apply to: said before any rollout
        if getattr(cfg.compute, option):
            blocks(policy, option)
    ref = load_reference(cfg.model, load_on) if cfg.kl_coef > 0 and cfg.lora_spec is None else None
    ref = wrap(ref, dist, cfg.compute.sharding, bf16=bf16, trainable=False) if ref is not None else None
    optimizer = make_optimizer(model, cfg.lr)
    scheduler = make_scheduler(optimizer, schedule=cfg.lr_schedule, warmup=cfg.warmup_steps, total=cfg.steps)
    average = WeightAverage(model, cfg.ema_decay) if cfg.ema_decay else None  # (the loaded weights)
    start = 0
    if ckpt is not None and state is not None:
        sampler.load_state_dict(state["sampler"])
        restarts.load_state_dict(state.get("restarts"))
        if average is not None:
            average.load_state_dict(state.get("ema"))
        start = ckpt_io.restore_training(
            ckpt, state, optimizer=optimizer, scheduler=scheduler, rank=dist.rank, model=model
        )
        say(f"resuming {run_dir} from step {start} ({ckpt.path})")
    sampling = SamplingArgs(
        max_tokens=cfg.max_tokens, temperature=cfg.temperature, top_p=cfg.top_p, stop=env.sampling.stop, logprobs=True
    )
    how = UpdateSettings.from_config(cfg, pad_id=tokenizer.pad_token_id or 0, bf16=bf16)
    log = MetricsLog(run_dir, resume_step=start, plots=plots) if dist.main else None
    run = Run(
        cfg, dist, say, run_dir, envs, env, sampler, restarts, tokenizer, fingerprint, model, policy, ref,
        optimizer, scheduler, average, start, sampling, how, log, sets=[], sharded=sharded, bf16=bf16,
    )  # fmt: skip
    say(_headline(run))
    run.sets = _eval_sets(run)
    return run


def _headline(run: Run) -> str:
    cfg = run.cfg
    return (
        f"training {cfg.model} on {cfg.env}: {cfg.steps} steps x {cfg.batch_size} rollouts "
        f"({cfg.tasks_per_batch} tasks x {cfg.group_size}), loss {cfg.loss}, "
        f"{'LoRA r=' + str(cfg.lora.rank) if cfg.lora.rank else 'full fine-tuning'}, "
        f"{run.dist.world} process(es) on {run.dist.device.type}{' (FSDP2)' if run.sharded else ''}"
        f"{', bf16' if run.bf16 else ''}; run dir {run.run_dir}"
    )


def _eval_sets(run: Run) -> list[EvalSet]:
    """Fixed tasks and seeds, played at step 0 and every eval.every steps."""
    cfg = run.cfg
    if cfg.eval.every is None:
        return []
    sets = eval_sets(cfg, run.envs.get, rank=run.dist.rank, world=run.dist.world)
    for s in sets:
        if s.size < cfg.eval.tasks:
            run.say(
                f"evaluation set {s.label}: {s.size} tasks, fewer than eval_tasks {cfg.eval.tasks}: its env's "
                "eval split holds no more (an env argument may add some: the scaffolds' eval_tasks)"
            )
    return sets


def make_sampler(env: MultiTurnEnv[Any], cfg: TrainConfig) -> StratifiedSampler:
    """The environment's stratified sampler (by `env.difficulty`), `tasks_per_batch` tasks a batch.

    Environments with a difficulty (tic-tac-toe) bucket their tasks by it; the others give one
    bucket, a seeded shuffle."""
    buckets = difficulty_buckets(env, cfg.num_buckets)
    if cfg.num_buckets is not None and buckets != cfg.num_buckets:
        raise UsageError(
            f"environment {cfg.env!r} makes {buckets} difficulty bucket(s), not "
            f"num_buckets={cfg.num_buckets} (it has no difficulty, or its difficulty "
            f"range has zero width); leave num_buckets unset"
        )
    if cfg.tasks_per_batch % buckets:
        raise UsageError(
            f"the {cfg.tasks_per_batch} tasks of a batch do not split into the "
            f"environment's {buckets} difficulty buckets; make batch_size / "
            f"group_size a multiple of {buckets}"
        )
    return StratifiedSampler.for_env(
        env, seed=cfg.seed, num_buckets=buckets, tasks_per_bucket=cfg.tasks_per_batch // buckets
    )


def save_checkpoint(run: Run, step: int) -> None:
    """Write checkpoint `step` (every rank: a sharded model's weights gather) and log its time."""
    t0 = time.monotonic()
    trainer_state = {
        "step": step,
        "scheduler": run.scheduler.state_dict(),
        "sampler": run.sampler.state_dict(),
        "restarts": run.restarts.state_dict(),
        "ema": run.average.state_dict() if run.average is not None else None,
        "config": run.cfg.to_dict(),
        "fingerprint": run.fingerprint,
    }
    ckpt_io.save_checkpoint(
        run.run_dir,
        step,
        model=run.model,
        tokenizer=run.tokenizer,
        optimizer=run.optimizer,
        trainer_state=trainer_state,
        rank=run.dist.rank,
        barrier=run.dist.barrier,
    )
    if run.log is not None:
        run.log.write(step, {"time/checkpoint": time.monotonic() - t0})


def last_good(run_dir: Path) -> str:
    """Where a run stopped by a non-finite loss can resume from."""
    last = ckpt_io.latest_checkpoint(run_dir)
    where = f"the last good checkpoint is {last.path}" if last else "no checkpoint was written yet"
    return f"the weights were not updated and {where} (resume with --resume, e.g. after lowering lr)"
