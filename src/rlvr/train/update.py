"""The policy update of one batch: minibatches of micro-batches, one optimizer step each.

    how = UpdateSettings.from_config(cfg, pad_id)
    metrics = update_policy(policy, ref, seqs, len(rollouts), how, optimizer, dist)

- The batch's sequences are split into `minibatches` by rollout (whole groups stay together),
  each minibatch into micro-batches of `micro_batch_size` sequences (`rlvr.train.sequences`).
- Each micro-batch's loss is scaled by its share of the minibatch's normaliser (summed over
  every rank), so the accumulated gradient is the minibatch's gradient in one piece; times
  the world size, since DDP averages.
- Old log-probs: with one minibatch, the new ones detached (ratio exactly 1); with several,
  frozen by one no-grad pass before the first update (the later updates are off-policy); for a
  batch another model sampled (`behaviour`: overlap's snapshot, one step behind), that model's
  no-grad pass, so the ratio is new over behaviour policy and each loss corrects it its way.
- Sequences of advantage exactly 0 skip the forward and backward passes where the loss gives
  them nothing but their count in the normaliser (`zero_advantage_adds_nothing`: kl_coef = 0):
  they still count in it, so the gradient is the same; the per-token statistics then cover the
  sequences that ran (`batch/skipped_seqs_frac` says how many did not).
- Every rank runs as many forward and backward passes as the busiest one (empty micro-batches
  pad the others), since DDP all-reduces on the last one and FSDP gathers weights in each; at
  least one where a minibatch has anything to train, so that an optimizer step whose sequences
  were all skipped still sees a (zero) gradient on every weight, as it did when they ran.
- The losses and the gradient norm are read from the device once per update; a non-finite
  one stops every rank together, before the optimizer step.
- Near the hardware (`rlvr.train.logprobs`): the output head runs in chunks, only on trained
  targets; `pack_sequences` packs each micro-batch into one row (None: where attention is
  varlen, else padded rows); `gradient_checkpointing` recomputes each block's activations in
  the backward pass. `throughput/train_mfu` is 6 x parameters x tokens processed / the
  update's seconds / the GPU's bf16 peak (`rlvr.train.hardware`), where that peak is known.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from rlvr.errors import TrainingError
from rlvr.train.config import TrainConfig
from rlvr.train.distributed import Dist
from rlvr.train.hardware import device_peak, training_flops_per_token
from rlvr.train.logprobs import activation_checkpointing, compiled_blocks, micro_batch_logprobs, should_pack
from rlvr.train.loss_specs import SPECS, Normalisation
from rlvr.train.loss_stats import LossStats
from rlvr.train.losses import LOSSES, LossConfig, zero_advantage_adds_nothing
from rlvr.train.model import unwrap
from rlvr.train.sequences import (
    MicroBatch,
    TrainSequence,
    empty_micro_batch,
    micro_batches,
    normaliser,
    sequences_normaliser,
)
from rlvr.train.sharding import clip_grad_norm, no_sync


@dataclass(frozen=True)
class Minibatch:
    """This rank's share of one optimizer step."""

    micro: list[MicroBatch]
    """the micro-batches to run forward and backward (padded to the count of the busiest rank)"""
    skipped: list[TrainSequence]
    """sequences of advantage 0 left out of them: they count in the normaliser, nothing more"""


Plan = list[Minibatch]
"""Each minibatch, in order."""


@dataclass(frozen=True)
class UpdateSettings:
    """How a batch updates the policy (the `TrainConfig` fields of the same names)."""

    loss: str
    loss_cfg: LossConfig
    minibatches: int
    micro_batch_size: int
    temperature: float
    bf16: bool
    max_grad_norm: float
    pad_id: int
    pack_sequences: bool | None = None
    micro_batch_tokens: int | None = None
    gradient_checkpointing: bool = False
    compile_blocks: bool = False
    skip_zero_advantage: bool = True
    """leave sequences of advantage 0 out of the passes where that changes nothing (no config
    field: off only to compare with the passes run, in tests and benchmarks)"""

    @property
    def skips(self) -> bool:
        """Whether sequences of advantage 0 skip the forward and backward passes."""
        return self.skip_zero_advantage and zero_advantage_adds_nothing(self.loss, self.loss_cfg)

    @classmethod
    def from_config(cls, cfg: TrainConfig, pad_id: int, *, bf16: bool | None = None) -> UpdateSettings:
        """The settings of `cfg`; `bf16` as resolved for the device (`use_bf16`), else `cfg.bf16`
        as given (unset: off)."""
        loss_cfg = LossConfig(
            clip_eps=cfg.objective.clip_eps,
            clip_eps_high=cfg.objective.clip_eps_high,
            max_is_weight=cfg.objective.max_is_weight,
            kl_coef=cfg.kl_coef,
            norm_len=cfg.max_tokens,
        )
        return cls(
            loss=cfg.loss,
            loss_cfg=loss_cfg,
            minibatches=cfg.minibatches,
            micro_batch_size=cfg.compute.micro_batch_size,
            temperature=cfg.temperature,
            bf16=bool(cfg.compute.bf16) if bf16 is None else bf16,
            max_grad_norm=cfg.max_grad_norm,
            pad_id=pad_id,
            pack_sequences=cfg.compute.pack_sequences,
            micro_batch_tokens=cfg.compute.micro_batch_tokens,
            gradient_checkpointing=cfg.compute.gradient_checkpointing,
            compile_blocks=cfg.compute.compile_blocks,
        )


def update_policy(
    policy: Any,
    ref: Any,
    seqs: list[TrainSequence],
    n_rollouts: int,
    how: UpdateSettings,
    optimizer: torch.optim.Optimizer,
    dist: Dist,
    *,
    behaviour: torch.nn.Module | None = None,
    started: Callable[[], None] | None = None,
) -> dict[str, float]:
    """`how.minibatches` optimizer steps on this rank's sequences (of `n_rollouts` rollouts);
    returns the loss statistics of all ranks. `ref` is the frozen reference model of the KL
    term (None: none, or LoRA's adapters disabled). `behaviour`: the model that sampled the
    batch where that is not `policy` (overlap: the weights one step behind), whose log-probs are
    then the old ones; `started()` is called once they are in, before the first optimizer step."""
    t0 = time.perf_counter()
    kind = SPECS[how.loss].normalisation
    plans = _plan(seqs, n_rollouts, how, dist, pack=should_pack(policy, how.pack_sequences))
    off_policy = behaviour is not None or how.minibatches > 1
    old = _frozen_logprobs(behaviour or policy, plans, how, dist.device) if off_policy else {}
    if started is not None:
        started()
    stats = LossStats()
    params = [p for p in policy.parameters() if p.requires_grad]
    with compiled_blocks(policy, how.compile_blocks), activation_checkpointing(policy, how.gradient_checkpointing):
        _steps(policy, ref, plans, old, kind, how, optimizer, dist, stats, params)
    stats.count_sequences(len(seqs), sum(len(part.skipped) for part in plans))
    out = stats.result(dist)
    peak = device_peak(dist.device)
    if peak is not None:
        seconds = time.perf_counter() - t0
        flops = training_flops_per_token(policy) * out["tokens/processed"]
        out["throughput/train_mfu"] = flops / max(seconds, 1e-9) / (peak.flops * dist.world)
    return out


def _steps(
    policy: Any,
    ref: Any,
    plans: Plan,
    old: dict[tuple[int, int], torch.Tensor],
    kind: Normalisation,
    how: UpdateSettings,
    optimizer: torch.optim.Optimizer,
    dist: Dist,
    stats: LossStats,
    params: list[torch.nn.Parameter],
) -> None:
    """One optimizer step per minibatch of `plans`."""
    for m, part in enumerate(plans):
        skipped = sequences_normaliser(kind, part.skipped)
        total = dist.sum([sum(normaliser(kind, mb.cpu_mask) for mb in part.micro) + skipped])[0]
        if total == 0:
            continue  # nothing to train on anywhere: no optimizer step (Adam would still move)
        stats.skip(part.skipped, skipped / total)
        count = len(part.micro)  # the same on every rank, at least 1 (`_plan` pads)
        losses = []
        for u, mb in enumerate(part.micro):
            host = mb.cpu_mask
            share = normaliser(kind, host) / total if host.numel() and host.any() else 0.0
            sync = u == count - 1 or not dist.active
            losses.append(_backward(policy, ref, mb, old.get((m, u)), share, sync, how, dist, stats))
        grad_norm = clip_grad_norm(params, how.max_grad_norm)
        stats.grad_norms.append(_finite_or_stop(losses, grad_norm, m, optimizer, dist))
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)


def _plan(seqs: list[TrainSequence], n_rollouts: int, how: UpdateSettings, dist: Dist, *, pack: bool) -> Plan:
    """Minibatches by rollout index (whole groups each), less the sequences that skip the passes,
    cut into micro-batches, each padded with empty ones to the most micro-batches any rank has
    (at least one where some rank skipped a sequence: see the module docstring)."""
    per = max(1, n_rollouts // how.minibatches)
    skips = how.skips
    plans = []
    for m in range(how.minibatches):
        mine = [s for s in seqs if s.rollout // per == m]
        skipped = [s for s in mine if skips and s.zero_advantage]
        run = [s for s in mine if not (skips and s.zero_advantage)]
        plan = micro_batches(
            run, how.micro_batch_size, how.pad_id, dist.device, pack=pack, tokens=how.micro_batch_tokens
        )
        count = dist.max(len(plan) or int(bool(skipped)))
        plans.append(Minibatch(plan + [empty_micro_batch(how.pad_id, dist.device)] * (count - len(plan)), skipped))
    return plans


def _autocast(how: UpdateSettings, device: torch.device) -> torch.autocast:
    return torch.autocast(device.type, dtype=torch.bfloat16, enabled=how.bf16)


def _frozen_logprobs(
    policy: Any, plans: Plan, how: UpdateSettings, device: torch.device
) -> dict[tuple[int, int], torch.Tensor]:
    """Log-probs of every micro-batch under the weights before the first update: the behaviour
    policy of the off-policy updates that follow."""
    old = {}
    with torch.no_grad(), _autocast(how, device):
        for m, part in enumerate(plans):
            for u, mb in enumerate(part.micro):
                old[m, u] = micro_batch_logprobs(policy, mb, how.temperature)[0].float()
    return old


def _backward(
    policy: Any,
    ref: Any,
    mb: MicroBatch,
    old_logp: torch.Tensor | None,
    share: float,
    sync: bool,
    how: UpdateSettings,
    dist: Dist,
    stats: LossStats,
) -> torch.Tensor:
    """Forward and backward of one micro-batch, its gradient scaled to its `share` of the
    minibatch loss (DDP all-reduces only when `sync`); returns its loss, detached."""
    with contextlib.nullcontext() if sync else no_sync(policy):
        with _autocast(how, dist.device):
            logp, ent = micro_batch_logprobs(policy, mb, how.temperature, entropy=True)
        ref_logp = _reference_logprobs(policy, ref, mb, how, dist.device)
        old_logp = logp.detach() if old_logp is None else old_logp
        loss, loss_stats = LOSSES[how.loss](logp, old_logp, mb.adv, mb.mask, how.loss_cfg, ref_logp=ref_logp)
        (loss * (share * dist.world)).backward()
    stats.add(loss_stats, ent, old_logp, mb, share)
    return loss.detach()


def _reference_logprobs(
    policy: Any, ref: Any, mb: MicroBatch, how: UpdateSettings, device: torch.device
) -> torch.Tensor | None:
    if how.loss_cfg.kl_coef == 0:
        return None
    with torch.no_grad(), _autocast(how, device):
        if ref is not None:
            return micro_batch_logprobs(ref, mb, how.temperature)[0].float()
        with unwrap(policy).disable_adapter():
            return micro_batch_logprobs(policy, mb, how.temperature)[0].float()


def _finite_or_stop(
    losses: list[torch.Tensor], grad_norm: torch.Tensor, m: int, optimizer: torch.optim.Optimizer, dist: Dist
) -> float:
    """The gradient norm, read with the losses in one device transfer; when any of them is not
    finite on any rank, every rank drops the gradients and raises `TrainingError`."""
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
    return float(values[-1])
