"""Policy losses of the GRPO family: pure functions, chosen once from `LOSSES`.

`LOSSES[name]` is built from the loss's row of `rlvr.train.loss_specs.SPECS`: its surrogate
(the per-token term, from `SURROGATES`) reduced by its normalisation, plus the KL term. Every
loss has the same signature (`LossFn`) and returns `(loss, stats)`:

    loss, stats = LOSSES[name](logp, old_logp, adv, mask, cfg, ref_logp=None)

    logp      (B, T)  log pi_theta(token) under the policy being trained (carries the gradient)
    old_logp  (B, T)  log-probs of the same tokens under the policy that sampled them
    adv       (B,)    one advantage per sequence (see `rlvr.train.advantages`), or (B, T) one
                      per token (turn credit: each model turn its own)
    mask      (B, T)  1 (or True) on trainable assistant tokens, 0 on prompt, env and padding
    ref_logp  (B, T)  optional reference-model log-probs for the KL term

Choices, shared by all losses:
- r = exp(logp - old_logp) per token. Tokens outside the mask get log-ratio 0 and log-prob 0
  before any arithmetic, so whatever padding holds (0, -inf, NaN) never reaches the loss or
  its gradient.
- Three normalisations (`LossSpec.normalisation`): "seq-mean" (mean over each sequence's
  tokens, then over the sequences that have at least one token), "token-mean" (sum over the
  batch / number of trainable tokens), "constant" (sum over the batch / (B * norm_len),
  norm_len defaulting to T).
- No trainable token at all gives a loss of exactly 0 that still backpropagates (zero grads).
- KL to a reference model (only when `ref_logp` is given): the k3 estimator
  exp(ref - logp) - (ref - logp) - 1 per token, reduced with the loss's own normalisation and
  added with weight `kl_coef` (kl_coef = 0: logged only).
- No entropy bonus or other term without the advantage: every surrogate is A times a factor of
  the sequence's own tokens, so a sequence of advantage 0 adds nothing but its count in the
  normaliser while kl_coef = 0 (`zero_advantage_adds_nothing`; the update then leaves it out
  of its forward and backward passes).

The surrogates and the losses built on them (normalisation and the rest: `SPECS`):
- ppo     PPO clipped surrogate min(r*A, clip(r, 1-eps, 1+eps_high)*A):
          grpo (DeepSeekMath, Shao et al. 2024), seq-mean;
          dr_grpo (Dr. GRPO, "Understanding R1-Zero-Like Training", Liu et al. 2025), constant
          normalisation, so long sequences are not down-weighted, and no std scaling;
          dapo (DAPO, Yu et al. 2025) with "clip-higher" (paper: clip_eps=0.2,
          clip_eps_high=0.28), token-mean; its dynamic sampling (drop groups whose rewards are
          all equal) is a batch filter, `advantages.drop_uniform_groups`.
- cispo   (MiniMax-M1, 2025): -sg(min(r, max_is_weight)) * A * logp, token-mean. The weight is
          capped and detached, never the update: every token keeps its gradient.
- gspo    (GSPO, Zheng et al. 2025): sequence ratio s = exp(mean_t(logp - old_logp)), clipped
          PPO-style at sequence level with small eps (paper: 3e-4 low, 4e-4 high), in the
          GSPO-token form s_t = sg(s) * exp(logp - sg(logp)): value s, gradient s * dlogp. Seq-mean.

Stats (0-dim detached tensors; `kl/ref` only when ref_logp is given):
    loss/policy      the policy term           loss/total     what is returned (policy + KL)
    kl/ref           k3 KL to the reference    ratio/mean|min|max   r over trainable tokens
                                                                    (gspo: s over sequences)
    clip/frac        share of trainable tokens whose gradient clipping removes
                     (cispo: whose weight is capped); clip/low_frac + clip/high_frac = clip/frac
    is_weight/mean|max   per-token coefficient of A * dlogp in the gradient: r or 0 when
                     clipped (grpo, dr_grpo, dapo), min(r, cap) (cispo), s or 0 (gspo)
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple, Protocol

import torch
from torch import Tensor

from rlvr.errors import UsageError
from rlvr.train.loss_specs import SPECS, LossSpec, Normalisation

Stats = dict[str, Tensor]


@dataclass(frozen=True)
class LossConfig:
    """Hyper-parameters of the policy losses; each field has one meaning for every loss."""

    clip_eps: float = 0.2
    """PPO clip of the token ratio: r >= 1 - clip_eps (grpo, dr_grpo, dapo)."""
    clip_eps_high: float | None = None
    """Upper PPO clip: r <= 1 + clip_eps_high (DAPO's clip-higher uses 0.28); None = clip_eps."""
    seq_clip_eps: float = 3e-4
    """GSPO clip of the sequence ratio: s >= 1 - seq_clip_eps (paper: 3e-4)."""
    seq_clip_eps_high: float = 4e-4
    """GSPO upper clip of the sequence ratio: s <= 1 + seq_clip_eps_high (paper: 4e-4)."""
    max_is_weight: float = 4.0
    """CISPO cap on the detached importance weight min(r, max_is_weight); no lower bound."""
    norm_len: int | None = None
    """Dr. GRPO divisor: loss = sum of token terms / (B * norm_len); None = padded length T."""
    kl_coef: float = 0.0
    """Weight of the k3 KL to the reference model; 0 = no KL term (ref_logp only logged)."""

    def __post_init__(self) -> None:
        for name in ("clip_eps", "seq_clip_eps", "seq_clip_eps_high", "max_is_weight"):
            if not getattr(self, name) > 0:
                raise UsageError(f"LossConfig.{name} must be > 0, got {getattr(self, name)}")
        if self.clip_eps_high is not None and not self.clip_eps_high > 0:
            raise UsageError(f"LossConfig.clip_eps_high must be > 0 or None, got {self.clip_eps_high}")
        if self.norm_len is not None and self.norm_len < 1:
            raise UsageError(f"LossConfig.norm_len must be >= 1 or None, got {self.norm_len}")
        if self.kl_coef < 0:
            raise UsageError(f"LossConfig.kl_coef must be >= 0, got {self.kl_coef}")


class LossFn(Protocol):
    def __call__(
        self, logp: Tensor, old_logp: Tensor, adv: Tensor, mask: Tensor, cfg: LossConfig, ref_logp: Tensor | None = None
    ) -> tuple[Tensor, Stats]: ...


class Masked(NamedTuple):
    """A loss's inputs with everything off the mask neutralised (see `_prepare`)."""

    on: Tensor  # (B, T) bool, trainable tokens
    m: Tensor  # (B, T) `on` in logp's dtype
    log_ratio: Tensor  # (B, T) logp - old_logp, 0 off-mask
    logp_on: Tensor  # (B, T) logp, 0 off-mask
    adv: Tensor  # (B, 1) or (B, T) detached


SurrogateFn = Callable[[Masked, LossConfig], tuple[Tensor, Stats]]
"""A per-token term: (B, T) values to reduce, and the ratio/clip statistics."""


# ---------------------------------------------------------------- normalisations (B, T) -> ()
def _seq_mean(x: Tensor, m: Tensor) -> Tensor:
    n_tok = m.sum(-1)  # (B,)
    per_seq = (x * m).sum(-1) / n_tok.clamp(min=1)  # (B,)
    return per_seq.sum() / (n_tok > 0).sum().clamp(min=1)  # ()


def _token_mean(x: Tensor, m: Tensor) -> Tensor:
    return (x * m).sum() / m.sum().clamp(min=1)  # ()


def _constant(x: Tensor, m: Tensor, norm_len: int | None) -> Tensor:
    batch, width = x.shape
    return (x * m).sum() / max(batch * (norm_len or width), 1)  # ()


def reduce(kind: Normalisation, x: Tensor, m: Tensor, norm_len: int | None) -> Tensor:
    """Token values (B, T) to one number, by the normalisation `kind`."""
    if kind == "seq-mean":
        return _seq_mean(x, m)
    if kind == "token-mean":
        return _token_mean(x, m)
    return _constant(x, m, norm_len)


# ---------------------------------------------------------------- shared pieces
def _prepare(logp: Tensor, old_logp: Tensor, adv: Tensor, mask: Tensor) -> Masked:
    if logp.dim() != 2 or old_logp.shape != logp.shape or mask.shape != logp.shape:
        raise ValueError(
            f"logp, old_logp and mask must share one (B, T) shape, got "
            f"{tuple(logp.shape)}, {tuple(old_logp.shape)}, {tuple(mask.shape)}"
        )
    if adv.shape not in (logp.shape[:1], logp.shape):
        raise ValueError(
            f"adv must be (B,) = {tuple(logp.shape[:1])} or (B, T) = {tuple(logp.shape)}, got {tuple(adv.shape)}"
        )
    on = mask > 0  # (B, T) bool
    m = on.to(logp.dtype)  # (B, T)
    log_ratio = torch.where(on, logp - old_logp.detach(), 0.0)  # (B, T), 0 off-mask
    logp_on = torch.where(on, logp, 0.0)  # (B, T), 0 off-mask
    a = adv.detach().to(logp.dtype)
    a = torch.where(on, a, 0.0) if a.dim() == 2 else a.unsqueeze(-1)  # (B, T) 0 off-mask, or (B, 1)
    return Masked(on, m, log_ratio, logp_on, a)


@torch.no_grad()
def _stats(ratio: Tensor, weight: Tensor, low: Tensor, high: Tensor, on: Tensor) -> Stats:
    """ratio: values to summarise (any shape, all valid); weight/low/high/on: (B, T)."""
    n = on.sum().clamp(min=1).to(weight.dtype)
    zero = weight.new_zeros(())
    return {
        "ratio/mean": ratio.mean() if ratio.numel() else zero,
        "ratio/min": ratio.min() if ratio.numel() else zero,
        "ratio/max": ratio.max() if ratio.numel() else zero,
        "clip/frac": ((low | high) & on).sum() / n,
        "clip/low_frac": (low & on).sum() / n,
        "clip/high_frac": (high & on).sum() / n,
        "is_weight/mean": (weight * on).sum() / n,
        "is_weight/max": weight[on].max() if on.any() else zero,
    }


# ---------------------------------------------------------------- the surrogates
def ppo_surrogate(x: Masked, cfg: LossConfig) -> tuple[Tensor, Stats]:
    """PPO clipped surrogate per token: -min(r*A, clip(r, 1-eps, 1+eps_high)*A)."""
    ratio = x.log_ratio.exp()  # (B, T)
    lo = 1 - cfg.clip_eps
    hi = 1 + (cfg.clip_eps if cfg.clip_eps_high is None else cfg.clip_eps_high)
    per_token = -torch.minimum(ratio * x.adv, ratio.clamp(lo, hi) * x.adv)  # (B, T)
    low = (ratio < lo) & (x.adv < 0)  # (B, T) gradient removed
    high = (ratio > hi) & (x.adv > 0)  # (B, T) gradient removed
    weight = torch.where(low | high, 0.0, ratio).detach()  # (B, T)
    return per_token, _stats(ratio.detach()[x.on], weight, low, high, x.on)


def cispo_surrogate(x: Masked, cfg: LossConfig) -> tuple[Tensor, Stats]:
    """CISPO (MiniMax-M1): clip the importance weight, keep every token's gradient."""
    ratio = x.log_ratio.exp().detach()  # (B, T)
    weight = ratio.clamp(max=cfg.max_is_weight)  # (B, T) detached
    per_token = -weight * x.adv * x.logp_on  # (B, T)
    high = ratio > cfg.max_is_weight  # (B, T) weight capped
    return per_token, _stats(ratio[x.on], weight, torch.zeros_like(x.on), high, x.on)


def gspo_surrogate(x: Masked, cfg: LossConfig) -> tuple[Tensor, Stats]:
    """GSPO: PPO clip on the length-normalised sequence ratio, GSPO-token gradient form."""
    n_tok = x.m.sum(-1)  # (B,)
    seq_ratio = (x.log_ratio.sum(-1) / n_tok.clamp(min=1)).exp().detach()  # (B,) s_i
    s = seq_ratio.unsqueeze(-1)  # (B, 1)
    token_ratio = s * (x.logp_on - x.logp_on.detach()).exp()  # (B, T) value s_i, grad s_i*dlogp
    lo, hi = 1 - cfg.seq_clip_eps, 1 + cfg.seq_clip_eps_high
    per_token = -torch.minimum(token_ratio * x.adv, token_ratio.clamp(lo, hi) * x.adv)  # (B, T)
    low = ((s < lo) & (x.adv < 0)).expand_as(x.on)  # (B, T) gradient removed
    high = ((s > hi) & (x.adv > 0)).expand_as(x.on)  # (B, T) gradient removed
    weight = torch.where(low | high, 0.0, s.expand_as(x.logp_on))  # (B, T)
    return per_token, _stats(seq_ratio[n_tok > 0], weight, low, high, x.on)


SURROGATES: dict[str, SurrogateFn] = {"ppo": ppo_surrogate, "cispo": cispo_surrogate, "gspo": gspo_surrogate}
"""The per-token terms `LossSpec.surrogate` names."""

SCALED_BY_ADVANTAGE = frozenset({"ppo", "cispo", "gspo"})
"""Surrogates whose every token term is its sequence's A times a factor of that sequence's own
tokens: -min(r*A, clip(r)*A), -sg(min(r, cap))*A*logp, -min(s*A, clip(s)*A). Where A = 0 the
term and its gradient are exactly 0, whatever the ratios; a new surrogate joins only if so."""


def zero_advantage_adds_nothing(name: str, cfg: LossConfig) -> bool:
    """Whether a sequence of advantage exactly 0 adds nothing to loss `name`, value or gradient,
    but its count in the normaliser: its surrogate is `SCALED_BY_ADVANTAGE`, no KL term is added
    (kl_coef = 0; the k3 KL does not vanish with A), and the normaliser is a count (not the
    constant one without norm_len, whose padded width T depends on the other sequences).

    >>> zero_advantage_adds_nothing("cispo", LossConfig())
    True
    >>> zero_advantage_adds_nothing("grpo", LossConfig(kl_coef=0.1))
    False
    """
    spec = SPECS[name]
    width_free = spec.normalisation != "constant" or cfg.norm_len is not None
    return spec.surrogate in SCALED_BY_ADVANTAGE and cfg.kl_coef == 0 and width_free


# ---------------------------------------------------------------- the losses
def policy_loss(
    spec: LossSpec,
    logp: Tensor,
    old_logp: Tensor,
    adv: Tensor,
    mask: Tensor,
    cfg: LossConfig,
    ref_logp: Tensor | None = None,
) -> tuple[Tensor, Stats]:
    """The loss `spec` describes: its surrogate reduced by its normalisation, plus the KL term."""
    x = _prepare(logp, old_logp, adv, mask)
    per_token, stats = SURROGATES[spec.surrogate](x, cfg)
    policy = reduce(spec.normalisation, per_token, x.m, cfg.norm_len)  # ()
    loss = policy
    stats["loss/policy"] = policy.detach()
    if ref_logp is not None:
        d = torch.where(x.on, ref_logp.detach() - x.logp_on, 0.0)  # (B, T)
        kl = reduce(spec.normalisation, d.exp() - d - 1, x.m, cfg.norm_len)  # () k3 estimator
        stats["kl/ref"] = kl.detach()
        if cfg.kl_coef > 0:
            loss = loss + cfg.kl_coef * kl
    elif cfg.kl_coef > 0:
        raise ValueError(f"kl_coef={cfg.kl_coef} needs ref_logp; pass the reference model's log-probs or set kl_coef=0")
    stats["loss/total"] = loss.detach()
    return loss, stats


LOSSES: dict[str, LossFn] = {name: functools.partial(policy_loss, spec) for name, spec in SPECS.items()}
"""Every loss of `SPECS`, by name: `LOSSES["cispo"](logp, old_logp, adv, mask, cfg)`."""
