"""GRPO-family reinforcement learning for multi-turn environments, as one readable loop.

    rlvr train tictactoe --model runs/sft/final --config train.toml

Each step: (1) draw a stratified batch of tasks, (2) play `group_size` episodes of each
with the current policy through the ordinary engine and `LocalModel`, or on a vLLM server
(`rlvr.train.generation`; every turn, env replies included), (3) turn rewards into group advantages, (4) build token sequences from the
ids that were sampled, (5) take the policy-gradient step(s), (6) log, (7) evaluate now and then,
(8) checkpoint now and then. With overlap (`--async`, off by default) steps 1-2 of the next
batch run during step 5, on a snapshot of the weights before it (`rlvr.train.batch`). Before
step 1, a probe warns when sampling at the training temperature loses what the model does
greedily (`rlvr.train.probe`). Knobs:
`rlvr.train.config.TrainConfig`; metrics: docs/training.md.

Where the steps live: set-up `run` (`setup_run` builds the model, optimizer, sampler, restarts
and log as one plain `Run`), each step's batch drawn and played (or played ahead) `batch`, the
loss table `loss_specs`, the losses `losses`, advantages `advantages`, token sequences
`sequences` (and `chat_tokens`), the update `update`, metrics `metrics` and `loss_stats`,
evaluations `evaluator` and `evaluation`, the model `model`, checkpoints `checkpoint`,
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
- Overlap (`generation.overlap`, `--async`): the next batch is played during this update on
  the weights before it, so each update trains on a batch one step stale (`async/staleness`);
  its old log-probs come from a no-grad pass of that snapshot, not from the trained weights, so
  the ratio is new over behaviour policy and each loss clips or caps it its own way. The first
  step and the step after each checkpoint play their own batch (staleness 0).
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

import time
from collections.abc import Sequence
from typing import Any

from rlvr.envs.multiturn import MultiTurnEnv, checked_turn_rewards
from rlvr.errors import TrainingError
from rlvr.train.advantages import batch_advantages, turn_advantages
from rlvr.train.batch import Batches
from rlvr.train.config import TrainConfig
from rlvr.train.evaluator import Evaluator
from rlvr.train.generation import open_generation
from rlvr.train.hardware import memory_metrics
from rlvr.train.metrics import step_line, step_metrics
from rlvr.train.model import deterministic_kernels, export_final, exported, settle_export, tf32_restored
from rlvr.train.protocols import TurnScored
from rlvr.train.restarts import weigh_given
from rlvr.train.run import Run, last_good, make_sampler, save_checkpoint, setup_run
from rlvr.train.sequences import build_sequences
from rlvr.train.session import EnvFactory, event_loop
from rlvr.train.sharding import full_state_dict
from rlvr.train.update import update_policy
from rlvr.types import Rollout, Task

__all__ = ["make_sampler", "train"]

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
    with deterministic_kernels(cfg.deterministic), tf32_restored():
        return _train(cfg, resume=resume, make_env=make_env, quiet=quiet, plots=plots)


def _train(
    cfg: TrainConfig, *, resume: bool, make_env: EnvFactory | None, quiet: bool, plots: bool
) -> list[dict[str, float]]:
    run = setup_run(cfg, resume=resume, make_env=make_env, quiet=quiet, plots=plots)
    dist, env, model, restarts, log = run.dist, run.env, run.model, run.restarts, run.log
    history: list[dict[str, float]] = []
    with event_loop(run.envs, log) as run_async:
        # in process (LocalModel, the model being trained) or on a vLLM server given its weights
        generation = open_generation(
            cfg, model, run.tokenizer, run_dir=run.run_dir, step=run.start, dist=dist, run_async=run_async
        )
        evaluator = Evaluator(run, generation, run_async)
        if run.start == 0:
            evaluator.before_training()  # the probe: does sampling break the model? then step 0's evaluation
        with Batches(run, generation, run_async) as batches:
            for step in range(run.start, cfg.steps):
                t_step = time.monotonic()
                # ---- 1-2. a stratified batch of tasks (some may be restarts) and its rollouts with the
                # current policy (multi-turn, env replies included), beside them in the same batches the
                # greedy probes, which are not trained on; with overlap, played during the last update
                played = batches.take(step)
                tasks, rollouts, everyone = played.drawn.tasks, played.rollouts, dist.gather(played.rollouts)
                restarts.add(everyone, played.drawn.batch, step, probes=dist.gather(played.probes))
                restart_metrics = restarts.metrics(everyone)  # (before the next batch is drawn)

                # ---- 3. group advantages (and each model turn's own share: turn_credit) ----------
                advantages, trainable, kept_groups = batch_advantages(
                    rollouts, cfg.group_size, scale_std=cfg.advantage_std_scaling,
                    mask_truncated=cfg.objective.mask_truncated, drop_uniform=cfg.loss_spec.drop_uniform_groups,
                    sharpen=cfg.objective.sharpen,
                )  # fmt: skip
                credited, scored = _credit(env, tasks, rollouts, advantages, trainable, cfg)

                # ---- 4. token sequences from the sampled ids (env tokens masked) -----------------
                seqs, split = build_sequences(rollouts, credited, trainable)

                # ---- 5. policy update (overlap: the next batch is drawn and played meanwhile) ----
                t0, lr = time.monotonic(), run.scheduler.get_last_lr()[0]
                try:
                    train_stats = update_policy(
                        run.policy, run.ref, seqs, len(rollouts), run.how, run.optimizer, dist,
                        behaviour=batches.behaviour(played), started=batches.ahead(step + 1),
                    )  # fmt: skip
                except TrainingError as exc:
                    raise TrainingError(f"step {step + 1}: {exc}; {last_good(run.run_dir)}") from None
                run.scheduler.step()
                if run.average is not None:
                    run.average.update()
                t_train = time.monotonic() - t0
                batches.wait()  # the next batch is in: the weights may go to the server
                t0 = time.monotonic()
                generation.after_step(model, step + 1, run_async, dist)  # the next rollouts use the new weights
                t_sync = time.monotonic() - t0
                times = {"rollouts": played.seconds, "train": t_train, "weight_sync": t_sync, "start": t_step}

                # ---- 6. log ----------------------------------------------------------------------
                metrics = step_metrics(
                    everyone, env, cfg.group_size, dist, train_stats=train_stats, split=split,
                    kept_groups=kept_groups, scored=scored if cfg.objective.turn_credit else None,
                    restart_metrics=restart_metrics, lr=lr, gen_counts=played.gen_counts, times=times,
                )  # fmt: skip
                history.append({**metrics, **batches.metrics(played), **memory_metrics(dist.device)})
                if log is not None:
                    log.write(step + 1, history[-1])
                    if (step + 1) % PLOT_EVERY == 0:
                        log.plot_async()
                run.say(step_line(step + 1, cfg.steps, metrics))

                # ---- 7. evaluate -----------------------------------------------------------------
                if evaluator.due(step + 1):
                    evaluator.after(step + 1)

                # ---- 8. checkpoint (never with a batch played ahead: see rlvr.train.batch) -------
                if step + 1 == cfg.steps or (cfg.save_every is not None and (step + 1) % cfg.save_every == 0):
                    save_checkpoint(run, step + 1)

        _finish(run, evaluator)
    dist.barrier()
    dist.close()
    return history


def _finish(run: Run, evaluator: Evaluator) -> None:
    """The end: a plain model folder anyone can load (the weight average, if the run keeps one).

    Rank 0 decides, since every rank gathers a sharded model's weights; a run resumed after
    its last step exports again only when a kill cut the export short (`settle_export`) or
    left a `final/` that is not a whole model."""
    dist, final = run.dist, run.run_dir / "final"
    if dist.max(int(dist.main and (run.start < run.cfg.steps or settle_export(final) or not exported(final)))):
        with evaluator.averaged():
            weights = full_state_dict(run.model)
            if dist.main:
                export_final(run.model, run.tokenizer, final, state_dict=weights)
        what = "weight average" if run.average is not None else "final model"
        run.say(f"done: {what} in {final}, metrics in {run.run_dir / 'metrics.csv'}")
    if run.log is not None:
        run.log.final_plots()


# ==== steps ==================================================================================


def _credit(
    env: MultiTurnEnv[Any],
    tasks: list[Task],
    rollouts: list[Rollout],
    advantages: list[float],
    trainable: list[bool],
    cfg: TrainConfig,
) -> tuple[Sequence[float | Sequence[float]], list[float]]:
    """Each rollout's advantage, or each model turn's (turn_credit: plus its own score's share;
    restart_explore_weight: a given reply's turn weighs less), and every turn score given."""
    credited: Sequence[float | Sequence[float]] = advantages
    scored: list[float] = []
    if cfg.objective.turn_credit:  # each model turn also gets its own score's share
        credited, scored = _turn_credit(env, tasks, rollouts, advantages, trainable, cfg)
    if cfg.restarts.explore and cfg.restarts.explore_weight != 1:  # given replies' own turns weigh less
        credited = weigh_given(rollouts, credited, cfg.restarts.explore_weight)
    return credited, scored


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
    scorer = env if isinstance(env, TurnScored) else None  # (a runtime Protocol check: once, not per rollout)
    for rollout, train in zip(rollouts, trainable):
        given = scorer.turn_rewards(by_id[rollout.task_id], rollout) if train and scorer is not None else None
        where = f"environment {cfg.env!r}, rollout {rollout.task_id}/{rollout.rollout_index}"
        scores.append(checked_turn_rewards(given, len(rollout.turns), where))
    turns = [len(r.turns) for r in rollouts]
    per_turn = turn_advantages(advantages, scores, turns, cfg.group_size, cfg.objective.turn_credit)
    return per_turn, [x for row in scores if row is not None for x in row]
