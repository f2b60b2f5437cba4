"""Token sampling for `LocalModel`'s batched decoder: temperature, top-p, and per-row noise.

The randomness of a row comes only from its own key, hashed from (request seed, token index):
a seeded request draws the same tokens whatever else shares its batch. A token is drawn by
inverting the row's cumulative distribution (float64) at one uniform made from that key: a few
passes over the vocabulary (block sums first, then the running sum inside one block). The
sampler before this one added Gumbel noise hashed per (row, token), some twenty int64 passes
over (rows, vocabulary), 4.6x slower on a 2-core CPU at 64 rows of a 151,936-token vocabulary
(`benchmarks/bench_sampling.py`).
"""

from __future__ import annotations

from typing import Any

import torch

_M32 = 0xFFFFFFFF


def sample_tokens(
    logits: torch.Tensor, *, temperatures: list[float], top_ps: list[float], keys: list[int]
) -> tuple[torch.Tensor, torch.Tensor]:
    """One token per row of `logits` (B, V) and its logprob under `log_softmax(logits / T)`.

    Temperature 0 is greedy (logprob under T = 1). Top-p keeps the smallest set of tokens whose
    mass reaches p. Randomness is one uniform per row hashed from its key (see `row_key`), so a
    row's sample never depends on the other rows.
    """
    device = logits.device
    if not any(t > 0 for t in temperatures):  # all greedy: no noise to draw
        choice = logits.argmax(dim=-1)
        return choice, torch.log_softmax(logits, dim=-1).gather(1, choice[:, None]).squeeze(1)
    cut = [(i, p) for i, (t, p) in enumerate(zip(temperatures, top_ps)) if t > 0 and p < 1.0]
    return draw(
        logits, torch.tensor(temperatures, device=device), torch.tensor(keys, dtype=torch.long, device=device), cut
    )


def draw(
    logits: torch.Tensor,
    temps: torch.Tensor,
    keys: torch.Tensor,
    cut: list[tuple[int, float]] | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """`sample_tokens` from tensors (B,) of temperatures and row keys, with top-p given as
    (row, p) pairs. Without `cut` it reads no host values and takes no data-dependent branch,
    so it can run inside a CUDA graph."""
    scaled = logits / torch.where(temps > 0, temps, 1.0)[:, None]  # (B, V)
    if cut:
        lse = torch.logsumexp(scaled, dim=-1, keepdim=True)
        sampled, total = inverse_cdf(_top_p(scaled, cut), uniform(keys))
    else:  # the normaliser from the sampler's own sum: one pass of exp over the logits, not two
        top = scaled.amax(dim=-1, keepdim=True)
        sampled, total = pick((scaled - top).exp_(), uniform(keys))
        lse = top + total.log().to(top.dtype)[:, None]
    # greedy rows, and rows whose weights do not sum to a finite number (a NaN or +inf logit):
    # the argmax, the token holding all the weight
    choice = torch.where((temps > 0) & torch.isfinite(total), sampled, logits.argmax(dim=-1))  # (B,)
    return choice, (scaled.gather(1, choice[:, None]) - lse).squeeze(1)


BLOCK = 256
"""Tokens per block of `inverse_cdf`'s two-level search."""


def inverse_cdf(scores: torch.Tensor, u: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(B,) for each row of `scores` (B, V) the token i with cdf[i - 1] < u * total <= cdf[i],
    and (B,) the total; cdf the running sum of exp(scores - max) (each term float32, the sums
    float64): a draw from softmax(scores), -inf never drawn. A float64 sum, because a float32
    running sum over 10^5 tokens may carry errors larger than a rare token's probability."""
    return pick((scores - scores.amax(dim=-1, keepdim=True)).exp_(), u)


def pick(weights: torch.Tensor, u: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """`inverse_cdf` from the weights (B, V) float32, non-negative, in two levels, so that no
    (B, V) float64 array is written: the sums of blocks of `BLOCK` tokens and their running sum
    find the block, then the running sum inside that block alone finds the token."""
    rows, vocab = weights.shape
    whole = vocab - vocab % BLOCK
    sums = weights[:, :whole].reshape(rows, -1, BLOCK).sum(-1, dtype=torch.float64)
    if whole < vocab:
        sums = torch.cat([sums, weights[:, whole:].sum(-1, keepdim=True, dtype=torch.float64)], dim=1)
    upto = sums.cumsum(dim=-1)  # (B, blocks)
    total = upto[:, -1]
    target = u.double()[:, None] * total[:, None]  # (B, 1), in (0, total)
    block = torch.searchsorted(upto, target).clamp_(max=upto.shape[1] - 1)  # upto[b - 1] < target <= upto[b]
    cols = block * BLOCK + torch.arange(BLOCK, device=weights.device)  # (B, BLOCK), the tail block past V
    inside = weights.gather(1, cols.clamp(max=vocab - 1)).double().masked_fill_(cols >= vocab, 0.0).cumsum_(-1)
    # what is left to reach inside the block, kept within (0, its sum], so that float rounding
    # between the two levels can never land on a token of weight 0
    rest = (target - (upto.gather(1, block) - sums.gather(1, block))).clamp_(min=torch.finfo(torch.float64).tiny)
    rest = torch.minimum(rest, inside[:, -1:])
    index = block * BLOCK + torch.searchsorted(inside, rest)
    return index.squeeze(1).clamp_(max=vocab - 1), total


def uniform(keys: torch.Tensor) -> torch.Tensor:
    """(B,) float64 uniforms in (0, 1), one per 32-bit row key."""
    return ((keys & _M32).double() + 0.5) * 2.0**-32


def _top_p(scaled: torch.Tensor, cut: list[tuple[int, float]]) -> torch.Tensor:
    rows = torch.tensor([j for j, _ in cut], device=scaled.device)
    p = torch.tensor([p for _, p in cut], device=scaled.device)[:, None]
    values, order = scaled[rows].sort(dim=-1, descending=True)
    probs = values.softmax(dim=-1)
    drop = (probs.cumsum(dim=-1) - probs) >= p  # mass before this token already reaches p
    values = values.masked_fill(drop, float("-inf"))
    out = scaled.clone()
    out[rows] = torch.full_like(values, float("-inf")).scatter(1, order, values)
    return out


def _mix32(x: Any) -> Any:
    """A 32-bit integer hash (works on Python ints and int64 tensors alike)."""
    x = (((x >> 16) ^ x) * 0x45D9F3B) & _M32
    x = (((x >> 16) ^ x) * 0x45D9F3B) & _M32
    return (x >> 16) ^ x


def row_key(seed: Any, step: Any) -> Any:
    """The noise key of a row's `step`-th token (Python ints, or int64 tensors: same values)."""
    return _mix32(((seed & _M32) * 0x9E3779B1 + (step + 1) * 0x85EBCA6B) & _M32)
