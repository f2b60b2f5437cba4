"""What each policy loss implies, in one table that the whole trainer reads (torch-free).

A loss of the GRPO family is more than its per-token term: it fixes how the token terms are
reduced to one number, whether advantages are divided by the group's reward std, and whether
groups whose rewards are all equal are dropped from the batch. `SPECS` says all of it, one row
per loss; nothing else in rlvr knows which loss is active:

    config.py       validates `loss` against SPECS; `cfg.loss_spec` is the row, and the
                    std-scaling default (`cfg.advantage_std_scaling`) comes from it
    losses.py       builds LOSSES[name] from the row: its surrogate, reduced by its normalisation
    update.py       rescales micro-batches by the row's normalisation (`sequences.normaliser`)
    grpo.py         passes the row's drop_uniform_groups to `advantages.batch_advantages`

Adding a loss: a row here. A loss with a new per-token term also needs that term: one
function in `rlvr.train.losses`, named in its `SURROGATES`. The loss tests run over every row.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Normalisation = Literal["seq-mean", "token-mean", "constant"]


@dataclass(frozen=True)
class LossSpec:
    """One loss: its per-token term and every batch-level choice that goes with it."""

    surrogate: str
    """the per-token term: a key of `rlvr.train.losses.SURROGATES` (ppo, cispo, gspo)"""
    normalisation: Normalisation
    """seq-mean: mean over each sequence's tokens, then over sequences with tokens;
    token-mean: sum / trainable tokens; constant: sum / (sequences x norm_len)"""
    scale_std: bool = True
    """divide advantages by the group's reward std (config `scale_std` overrides it)"""
    drop_uniform_groups: bool = False
    """leave groups whose rewards are all equal out of the batch (DAPO's dynamic sampling)"""


SPECS: dict[str, LossSpec] = {
    # DeepSeekMath (Shao et al. 2024)
    "grpo": LossSpec("ppo", "seq-mean"),
    # Dr. GRPO (Liu et al. 2025): no length or std normalisation
    "dr_grpo": LossSpec("ppo", "constant", scale_std=False),
    # DAPO (Yu et al. 2025): clip-higher comes from clip_eps_high, dynamic sampling from here
    "dapo": LossSpec("ppo", "token-mean", drop_uniform_groups=True),
    # MiniMax-M1 (2025)
    "cispo": LossSpec("cispo", "token-mean"),
    # GSPO (Zheng et al. 2025)
    "gspo": LossSpec("gspo", "seq-mean"),
}
"""Every loss `TrainConfig.loss` may name."""
