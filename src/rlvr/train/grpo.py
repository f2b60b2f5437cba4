"""GRPO-family reinforcement learning for multi-turn environments, as one readable loop.

    rlvr train tictactoe --model runs/sft/final --config train.toml

Each step: (1) draw a stratified batch of tasks, (2) play `group_size` episodes of each
with the current policy through the ordinary engine and `LocalModel`, or on a vLLM server
(`rlvr.train.generation`; every turn, env replies included), (3) turn rewards into group advantages, (4) build token sequences from the
ids that were sampled, (5) take the policy-gradient step(s), (6) log, (7) evaluate now and then,
(8) checkpoint now and then. Before step 1, a probe warns when sampling at the training
temperature loses what the model does greedily (`rlvr.train.probe`). Knobs:
`rlvr.train.config.TrainConfig`; metrics: docs/training.md.

Where the steps live: the loss table `loss_specs`, the losses `losses`, advantages
`advantages`, token sequences `sequences` (and `chat_tokens`), the update `update`, metrics
`metrics`, `loss_stats` and `evaluation`, the model `model`, checkpoints `checkpoint`,
environments and the event loop `session`, several GPUs `distributed` and `sharding` (all
`rlvr.train.*`).

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
- Restarts (restart_frac > 0): a share of each batch replays earlier low-scoring training
  episodes from one of their later model turns, a whole group each (`rlvr.train.restarts`).
- DAPO's dynamic sampling: with loss = dapo (`drop_uniform_groups` in its row of
  `rlvr.train.loss_specs.SPECS`), groups whose rewards are all equal are dropped from the
  batch (no refill: the batch simply shrinks; `batch/kept_groups_frac` says by how much).
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
- Sequences of advantage 0 (a group whose rewards tie) skip the forward and backward passes
  unless kl_coef > 0; they still count in the normaliser, so the gradient is the same
  (`rlvr.train.update`; `batch/skipped_seqs_frac`).
- No dropout: the model stays in eval mode, so generation, old and new log-probs agree.
- Weight average (ema_decay > 0): an exponential moving average of the trainable weights,
  updated after every optimizer step and never used by training; evaluations, keep_best and
  final/ swap it in (`rlvr.train.average`).
- KL (kl_coef > 0): k3 estimator to the starting model; a frozen copy for full fine-tuning, the
  same model with adapters disabled for LoRA.
- Several GPUs (torchrun / accelerate launch): each rank plays its contiguous share of the
  batch's tasks (whole groups), DDP all-reduces gradients, normalisers count every rank's
  tokens; rank 0 logs and writes checkpoints. `sharding = fsdp` shards weights, gradients and
  AdamW state instead (FSDP2); each generation then runs on weights gathered whole for its
  duration (`full_weights`), and checkpoints are still whole model folders.
- A non-finite loss or gradient norm stops the run before the optimizer step, leaving the last
  checkpoint as the last good state.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import math
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

from rlvr.clients.base import ChatClient
from rlvr.engine import run_rollouts
from rlvr.envs.multiturn import MultiTurnEnv, checked_turn_rewards
from rlvr.errors import TrainingError, UsageError
from rlvr.exact import GameTree
from rlvr.sampler import StratifiedSampler, difficulty_buckets
from rlvr.train import checkpoint as ckpt_io
from rlvr.train.advantages import batch_advantages, turn_advantages
from rlvr.train.average import WeightAverage
from rlvr.train.best import KeepBest
from rlvr.train.config import TrainConfig, check_resume
from rlvr.train.distributed import setup_distributed
from rlvr.train.evaluation import (
    eval_metrics,
    eval_sets,
    evaluate,
    evaluate_exact,
    exact_line,
    exact_metrics,
    save_eval,
    save_exact,
)
from rlvr.train.generation import open_generation
from rlvr.train.logging import MetricsLog
from rlvr.train.logprobs import blocks
from rlvr.train.metrics import rollout_metrics, step_line, timing_metrics
from rlvr.train.model import (
    deterministic_kernels,
    export_final,
    exported,
    load_model_config,
    load_reference,
    load_tokenizer,
    load_trainable,
    make_optimizer,
    make_scheduler,
    use_bf16,
)
from rlvr.train.probe import collapse_warning, compare, probe, probe_set
from rlvr.train.protocols import TurnScored
from rlvr.train.restarts import Restarts, weigh_given
from rlvr.train.sequences import build_sequences
from rlvr.train.session import EnvFactory, Envs, StepSeeded, event_loop
from rlvr.train.sharding import full_state_dict, full_weights, wrap
from rlvr.train.update import UpdateSettings, update_policy
from rlvr.types import Rollout, SamplingArgs, Task

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
    with deterministic_kernels(cfg.deterministic):
        return _train(cfg, resume=resume, make_env=make_env, quiet=quiet, plots=plots)


def _train(
    cfg: TrainConfig, *, resume: bool, make_env: EnvFactory | None, quiet: bool, plots: bool
) -> list[dict[str, float]]:
    dist = setup_distributed(cfg.device)
    # flushed: a redirected stdout is block-buffered, and a step may take minutes on a CPU
    say: Callable[..., None] = (
        functools.partial(print, flush=True) if dist.main and not quiet else (lambda *a, **k: None)
    )
    run_dir = Path(cfg.output_dir or ckpt_io.default_output_dir(cfg.env, cfg.model))
    torch.manual_seed(cfg.seed + dist.rank)
    if dist.device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True

    # ---- environment and stratified sampler ------------------------------------------------------
    if make_env is None:
        from rlvr.registry import load_environment

        make_env = functools.partial(load_environment, cfg.env)
    envs = Envs(make_env, cfg.max_turns)  # one per distinct env args; closed at the end
    env = envs.get(cfg.env_args)
    sampler = make_sampler(env, cfg)
    restarts = Restarts(
        env,
        frac=cfg.restart_frac,
        below=cfg.restart_below,
        tasks_per_batch=cfg.tasks_per_batch,
        seed=cfg.seed,
        points=cfg.restart_points,
        greedy=cfg.restart_greedy,
        unsure=cfg.restart_unsure,
        explore=cfg.restart_explore,
        group_size=cfg.group_size,
    )
    if cfg.restart_greedy % dist.world:
        raise UsageError(
            f"restart_greedy = {cfg.restart_greedy} greedy probes do not split over {dist.world} processes; "
            f"make it a multiple of {dist.world}"
        )
    if cfg.turn_credit and not isinstance(env, TurnScored):
        raise UsageError(
            f"turn_credit = {cfg.turn_credit}: environment {cfg.env!r} scores no turns (it does not define "
            "turn_rewards); set turn_credit = 0"
        )
    if cfg.eval_exact and not isinstance(env, GameTree):
        raise UsageError(f"eval_exact: environment {cfg.env!r} offers no game tree to evaluate exactly")
    if cfg.tasks_per_batch % (dist.world * cfg.minibatches):
        raise UsageError(
            f"the {cfg.tasks_per_batch} tasks of a batch do not split over {dist.world} "
            f"process(es) x {cfg.minibatches} minibatch(es); make batch_size / "
            f"group_size a multiple of {dist.world * cfg.minibatches}"
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
    # (sharded: loaded on the CPU, each process then moves only its shard to its GPU)
    sharded = cfg.sharding == "fsdp" and dist.active
    load_on = torch.device("cpu") if sharded else dist.device
    model = load_trainable(cfg.model, lora=cfg.lora, device=load_on, checkpoint=ckpt.model_dir if ckpt else None)
    model.eval()  # no dropout anywhere: generation, old and new log-probs see the same network
    bf16 = use_bf16(cfg.bf16, dist.device)
    policy = wrap(model, dist, cfg.sharding, bf16=bf16)  # DDP, FSDP2 (in place) or the model alone
    for option in ("gradient_checkpointing", "compile_blocks"):  # a model they cannot apply to: said before any rollout
        if getattr(cfg, option):
            blocks(policy, option)
    ref = load_reference(cfg.model, load_on) if cfg.kl_coef > 0 and cfg.lora is None else None
    ref = wrap(ref, dist, cfg.sharding, bf16=bf16, trainable=False) if ref is not None else None
    optimizer = make_optimizer(model, cfg.lr)
    scheduler = make_scheduler(optimizer, schedule=cfg.lr_schedule, warmup=cfg.warmup_steps, total=cfg.steps)
    average = WeightAverage(model, cfg.ema_decay) if cfg.ema_decay else None  # (from the loaded weights)
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
    say(
        f"training {cfg.model} on {cfg.env}: {cfg.steps} steps x {cfg.batch_size} rollouts "
        f"({cfg.tasks_per_batch} tasks x {cfg.group_size}), loss {cfg.loss}, "
        f"{'LoRA r=' + str(cfg.lora_rank) if cfg.lora_rank else 'full fine-tuning'}, "
        f"{dist.world} process(es) on {dist.device.type}{' (FSDP2)' if sharded else ''}{', bf16' if bf16 else ''}; "
        f"run dir {run_dir}"
    )

    # ---- evaluation sets: fixed tasks and seeds, played at step 0 and every eval_every steps ----
    sets = eval_sets(cfg, envs.get, rank=dist.rank, world=dist.world) if cfg.eval_every is not None else []
    for s in sets:
        if s.size < cfg.eval_tasks:
            say(
                f"evaluation set {s.label}: {s.size} tasks, fewer than eval_tasks {cfg.eval_tasks}: its env's "
                "eval split holds no more (an env argument may add some: the scaffolds' eval_tasks)"
            )

    history: list[dict[str, float]] = []
    with event_loop(envs, log) as run_async:
        # in process (LocalModel, the model being trained) or on a vLLM server given its weights
        generation = open_generation(cfg, model, tokenizer, run_dir=run_dir, step=start, dist=dist, run_async=run_async)
        client = generation.client

        keep = KeepBest(cfg.keep_best, run_dir / "best") if cfg.keep_best and dist.main else None

        def averaged() -> contextlib.ExitStack:
            """Inside: the model holds the weight average (ema_decay), if the run keeps one."""
            stack = contextlib.ExitStack()
            if average is not None:
                stack.callback(generation.weights_changed)  # (last: after the weights are back)
                stack.enter_context(average.swapped_in())
                generation.weights_changed()
            return stack

        def evaluate_and_log(step: int) -> None:
            with averaged():  # the evaluations and the kept best play the average (ema_decay)
                with full_weights(model):  # sharded: gathered whole (rank 0's exact evaluation too)
                    metrics = play_and_log(step)
                if cfg.keep_best:
                    keep_if_best(step, metrics)

        def keep_if_best(step: int, metrics: dict[str, float] | None) -> None:
            """Every rank: export the model to RUN_DIR/best when rank 0 finds `metrics` best."""
            best, problem = False, None
            if keep is not None and metrics is not None:  # rank 0
                try:
                    best = keep.better(metrics)
                except UsageError as exc:  # e.g. a metric no evaluation logs
                    problem = exc
            if dist.max(int(problem is not None)):  # every rank stops, none waits on the others
                raise problem or UsageError("keep_best failed on process 0 (its error says why)")
            if dist.max(int(best)):  # every rank: a sharded model's weights gather
                weights = full_state_dict(model)
                if keep is not None and metrics is not None:  # rank 0, which found it best
                    record = keep.record(step, metrics)
                    export_final(model, tokenizer, run_dir / "best", state_dict=weights, extra=record)

        def play_and_log(step: int) -> dict[str, float] | None:
            """Play the evaluation sets; rank 0 saves their rollouts, logs and prints them, and
            returns their metrics (other ranks: None)."""
            t0 = time.monotonic()
            played = {label: dist.gather(r) for label, r in run_async(evaluate(sets, client, sampling)).items()}
            if log is None:
                return None
            for s in sets:
                where = run_dir / "eval" / f"step_{step:06d}" / s.label
                save_eval(where, played[s.label], env=cfg.env, env_args=s.env_args, model=cfg.model, step=step)
            metrics, table = eval_metrics(sets, played)
            if cfg.eval_exact:  # rank 0 alone: the tree is small, and its result is exact
                exact = run_async(evaluate_exact(env, client, sampling))
                metrics.update(exact_metrics(exact))
                where = run_dir / "eval" / f"step_{step:06d}" / "exact"
                save_exact(where, exact, env=cfg.env, env_args=cfg.env_args, model=cfg.model, step=step)
                table += "\n" + exact_line(exact)
            log.write(step, {**metrics, "time/eval": time.monotonic() - t0})
            log.write_text(step, "eval", table.replace("\n", "  \n"))
            log.plot_async()
            of = f" (weight average, ema_decay {cfg.ema_decay})" if average is not None else ""
            say(f"evaluation at step {step}{of}:\n{table}")
            return metrics

        if start == 0 and cfg.probe_tasks:  # before any compute is spent: does sampling break the model?
            played_by = probe_set(env, cfg.probe_tasks, cfg.env_args, rank=dist.rank, world=dist.world)
            with full_weights(model):
                greedy, sampled = run_async(probe(played_by, client, sampling))
            found = compare(env, dist.gather(greedy), dist.gather(sampled), cfg.temperature)
            if log is not None:
                log.write(0, found.metrics())
                warning = collapse_warning(found)
                if warning is not None:  # even under -q: it is the most expensive mistake to miss
                    print(warning, file=sys.stderr, flush=True)
        if start == 0 and cfg.eval_every is not None:
            evaluate_and_log(0)
        for step in range(start, cfg.steps):
            t_step = time.monotonic()
            # ---- 1. a stratified batch of tasks (some may be restarts); this process plays its share
            batch = restarts.fill(next(sampler), step)
            tasks = dist.shard(batch)

            # ---- 2. rollouts with the current policy (multi-turn, env replies included), and
            # beside them in the same batches the greedy probes, which are not trained on -----------
            t0, counted = time.monotonic(), generation.counters()
            with full_weights(model):  # sharded: gathered whole for the generation, then freed
                rollouts, probes = run_async(
                    _play(
                        env,
                        restarts.client(StepSeeded(client, cfg.seed, step)),
                        tasks,
                        dist.shard(restarts.probe_tasks(batch, step)),
                        sampling=sampling,
                        group_size=cfg.group_size,
                    )
                )
            t_rollouts = time.monotonic() - t0
            gen_counts = {k: v - counted[k] for k, v in generation.counters().items()}  # this rank's

            # ---- 3. group advantages -------------------------------------------------------------
            advantages, trainable, kept_groups = batch_advantages(
                rollouts,
                cfg.group_size,
                scale_std=cfg.advantage_std_scaling,
                mask_truncated=cfg.mask_truncated,
                drop_uniform=cfg.loss_spec.drop_uniform_groups,
            )

            credited: Sequence[float | Sequence[float]] = advantages
            if cfg.turn_credit:  # each model turn also gets its own score's share
                credited, scored = _turn_credit(env, tasks, rollouts, advantages, trainable, cfg)
            if cfg.restart_explore and cfg.restart_explore_weight != 1:  # given replies' own turns weigh less
                credited = weigh_given(rollouts, credited, cfg.restart_explore_weight)

            # ---- 4. token sequences from the sampled ids (env tokens masked) ---------------------
            seqs, split = build_sequences(rollouts, credited, trainable)

            # ---- 5. policy update ----------------------------------------------------------------
            t0 = time.monotonic()
            lr = scheduler.get_last_lr()[0]
            try:
                train_stats = update_policy(policy, ref, seqs, len(rollouts), how, optimizer, dist)
            except TrainingError as exc:
                raise TrainingError(f"step {step + 1}: {exc}; {_last_good(run_dir)}") from None
            scheduler.step()
            if average is not None:
                average.update()
            t_train, t0 = time.monotonic() - t0, time.monotonic()
            generation.after_step(model, step + 1, run_async, dist)  # the next rollouts use the new weights
            t_sync = time.monotonic() - t0

            # ---- 6. log --------------------------------------------------------------------------
            everyone = dist.gather(rollouts)
            metrics = rollout_metrics(everyone, env, cfg.group_size)
            metrics.update(train_stats)
            metrics["rollout/split_frac"] = dist.sum([split])[0] / max(len(everyone), 1)
            metrics["batch/kept_groups_frac"] = kept_groups
            if cfg.turn_credit:
                n_scored, total = dist.sum([float(len(scored)), math.fsum(scored)])
                metrics["turn/scored"] = n_scored
                metrics["turn/score_mean"] = total / n_scored if n_scored else math.nan
            restarts.add(everyone, batch, step, probes=dist.gather(probes))
            metrics.update(restarts.metrics(everyone))
            metrics["optim/lr"] = lr
            metrics["time/weight_sync"] = t_sync
            metrics.update(gen_counts)
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
                evaluate_and_log(step + 1)

            # ---- 8. checkpoint -------------------------------------------------------------------
            if last_step or (cfg.save_every is not None and (step + 1) % cfg.save_every == 0):
                t0 = time.monotonic()
                trainer_state = {
                    "step": step + 1,
                    "scheduler": scheduler.state_dict(),
                    "sampler": sampler.state_dict(),
                    "restarts": restarts.state_dict(),
                    "ema": average.state_dict() if average is not None else None,
                    "config": cfg.to_dict(),
                    "fingerprint": fingerprint,
                }
                ckpt_io.save_checkpoint(
                    run_dir,
                    step + 1,
                    model=model,
                    tokenizer=tokenizer,
                    optimizer=optimizer,
                    trainer_state=trainer_state,
                    rank=dist.rank,
                    barrier=dist.barrier,
                )
                if log is not None:
                    log.write(step + 1, {"time/checkpoint": time.monotonic() - t0})

        # ---- the end: a plain model folder anyone can load ---------------------------------------
        # (rank 0 decides, since every rank gathers a sharded model's weights)
        if dist.max(int(dist.main and (start < cfg.steps or not exported(run_dir / "final")))):  # (a kill mid-export)
            with averaged():  # final/ is the average when the run keeps one
                weights = full_state_dict(model)
                if dist.main:
                    export_final(model, tokenizer, run_dir / "final", state_dict=weights)
            if dist.main:
                what = "weight average" if average is not None else "final model"
                say(f"done: {what} in {run_dir / 'final'}, metrics in {run_dir / 'metrics.csv'}")
        if log is not None:
            log.final_plots()
    dist.barrier()
    dist.close()
    return history


# ==== setup ==================================================================================


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


def _last_good(run_dir: Path) -> str:
    last = ckpt_io.latest_checkpoint(run_dir)
    where = f"the last good checkpoint is {last.path}" if last else "no checkpoint was written yet"
    return f"the weights were not updated and {where} (resume with --resume, e.g. after lowering lr)"


def _turn_credit(
    env: MultiTurnEnv[Any],
    tasks: list[Task],
    rollouts: list[Rollout],
    advantages: list[float],
    trainable: list[bool],
    cfg: TrainConfig,
) -> tuple[list[list[float]], list[float]]:
    """Advantages per model turn (`advantages.turn_advantages`) from the env's turn scores of
    the trainable rollouts, and every score given (for the log)."""
    by_id = {t.id: t for t in tasks}
    scores: list[list[float] | None] = []
    for rollout, train in zip(rollouts, trainable):
        given = env.turn_rewards(by_id[rollout.task_id], rollout) if train and isinstance(env, TurnScored) else None
        where = f"environment {cfg.env!r}, rollout {rollout.task_id}/{rollout.rollout_index}"
        scores.append(checked_turn_rewards(given, len(rollout.turns), where))
    turns = [len(r.turns) for r in rollouts]
    per_turn = turn_advantages(advantages, scores, turns, cfg.group_size, cfg.turn_credit)
    return per_turn, [x for row in scores if row is not None for x in row]


async def _play(
    env: MultiTurnEnv[Any],
    client: ChatClient,
    tasks: list[Task],
    probe_tasks: list[Task],
    *,
    sampling: SamplingArgs,
    group_size: int,
) -> tuple[list[Rollout], list[Rollout]]:
    """A group of rollouts of each task (`client` may give some first replies: restart_explore) and one
    greedy rollout of each probe task, played side by side (one engine's batches hold both)."""
    concurrency = len(tasks) * group_size
    train = run_rollouts(env, client, tasks, sampling=sampling, rollouts_per_task=group_size, concurrency=concurrency)
    if not probe_tasks:
        return await train, []
    greedy = sampling.replace(temperature=0.0, top_p=1.0, logprobs=False)
    probe = run_rollouts(env, client, probe_tasks, sampling=greedy, concurrency=len(probe_tasks))
    rollouts, probes = await asyncio.gather(train, probe)
    return rollouts, probes
