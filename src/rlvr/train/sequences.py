"""Token batches for the policy loss, built from the ids each rollout actually saw and sampled.

A rollout becomes one or more *sequences*. Turn by turn, the backend reports the prompt ids it
rendered (`Completion.prompt_token_ids`) and the ids it sampled (`Completion.token_ids`):

- When turn k's prompt ids start with everything so far (previous prompt + previous sampled
  ids), only the new ids (the environment's reply and the next assistant header) are appended,
  mask 0, then turn k's sampled ids, mask 1: one sequence holds the whole episode.
- When they do not (the chat template re-tokenised the model's text differently from how it
  was sampled, dropped `<think>` blocks, or a stop string cut the text), the sequence is closed
  and a new one starts from turn k's own prompt ids. Each turn is thus trained in exactly the
  context it was sampled in, at the cost of repeating the shared history; the share of
  rollouts this happens to is logged as `rollout/split_frac`.

Never re-tokenise completion text: the ids trained on are the ids sampled.

Micro-batching: sequences are sorted by length (less padding), cut into micro-batches and
right-padded; or, with `pack`, concatenated into one row (positions restarting at each
sequence, no padding tokens; the loss's tensors stay one row per sequence, and
`MicroBatch.positions` maps them to the packed row). The policy losses normalise *within* the tensors they get (`rlvr.train.losses`),
so a micro-batch loss is rescaled to its share of the whole (mini-)batch loss, by the
normalisation of the loss's row in `rlvr.train.loss_specs.SPECS`:

    seq-mean     x  sequences-with-tokens(micro) / sequences-with-tokens(all)
    token-mean   x  trainable-tokens(micro) / trainable-tokens(all)
    constant     x  sequences(micro) / sequences(all), with a fixed norm_len

Summing the rescaled micro-batch gradients then equals the gradient of the loss on the whole
batch in one piece (tested for every loss in `LOSSES`). Over several GPUs, "all" counts every
rank's sequences and the factor is multiplied by the world size, since DDP averages gradients.
"All" also counts sequences left out of the micro-batches because they add nothing but their
count (advantage 0, `rlvr.train.update`): `sequences_normaliser` counts them without tensors.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from rlvr.errors import UsageError
from rlvr.train.chat_tokens import TurnTokens, rollout_tokens
from rlvr.train.loss_specs import Normalisation
from rlvr.types import Rollout


@dataclass
class TrainSequence:
    """One training sequence: ids, the loss mask, its advantage, generation logprobs."""

    ids: list[int]
    mask: list[int]
    """1 on sampled (assistant) ids to train on; 0 on prompt, env replies and headers."""
    advantage: float
    """The rollout's advantage, on every sampled id (0.0 and unread when `token_adv` is set)."""
    gen_logprobs: list[float]
    """Logprob of each id under the policy that sampled it (nan where not sampled)."""
    rollout: int
    """Index of the rollout this sequence comes from, within the batch."""
    token_adv: list[float] | None = None
    """An advantage per id (turn credit: each turn's own), used instead of `advantage`; 0
    where the mask is 0."""

    @property
    def zero_advantage(self) -> bool:
        """True when no token of it has an advantage (it adds nothing to the policy term)."""
        if self.token_adv is None:
            return self.advantage == 0
        return all(a == 0 for a in self.token_adv)


Part = tuple[list[int], list[int], list[float], list[int]]
"""One sequence of a rollout: ids, mask, generation logprobs, and the model turn each id was
sampled in (-1 where not sampled)."""


def rollout_sequences(rollout: Rollout) -> list[Part]:
    """The sequences of one rollout (see module docstring and `Part`)."""
    out: list[Part] = []
    prompt: list[int] | None = None
    turns: list[TurnTokens] = []
    logprobs: list[float] = []
    owner: list[int] = []
    seen: list[int] = []  # ids of the current sequence so far
    for number, turn in enumerate(rollout.turns):
        c = turn.completion
        if c.token_ids is None or c.prompt_token_ids is None:
            raise UsageError(
                f"rollout {rollout.task_id}/{rollout.rollout_index} turn {number} has no token ids; "
                "training needs a backend that returns the prompt and sampled ids "
                "(LocalModel, or vLLM with return_token_ids)"
            )
        sampled = list(c.token_ids)
        lps = list(c.logprobs) if c.logprobs and len(c.logprobs) == len(sampled) else [math.nan] * len(sampled)
        if prompt is not None and c.prompt_token_ids[: len(seen)] == seen:
            new = list(c.prompt_token_ids[len(seen) :])
            turns.append(TurnTokens(new, sampled))
            logprobs += [math.nan] * len(new) + lps
            owner += [-1] * len(new) + [number] * len(sampled)
            seen += new + sampled
            continue
        if prompt is not None:
            out.append((*rollout_tokens(prompt, turns), logprobs, owner))
        prompt = list(c.prompt_token_ids)
        turns = [TurnTokens([], sampled)]
        logprobs = [math.nan] * len(prompt) + lps
        owner = [-1] * len(prompt) + [number] * len(sampled)
        seen = prompt + sampled
    if prompt is not None:
        out.append((*rollout_tokens(prompt, turns), logprobs, owner))
    return out


def build_sequences(
    rollouts: Sequence[Rollout], advantages: Sequence[float | Sequence[float]], trainable: Sequence[bool]
) -> tuple[list[TrainSequence], int]:
    """Sequences of the `trainable` rollouts of a batch (the others are left out entirely).
    A rollout's advantage is one number, or one per model turn (turn credit): then each
    sampled id gets its turn's.

    Returns the sequences and the number of rollouts that needed more than one sequence.
    """
    seqs: list[TrainSequence] = []
    split = 0
    for index, (rollout, adv, train) in enumerate(zip(rollouts, advantages, trainable)):
        if not train:
            continue
        parts = rollout_sequences(rollout)
        split += len(parts) > 1
        for ids, mask, lps, owner in parts:
            if isinstance(adv, (int, float)):
                seqs.append(TrainSequence(ids, mask, float(adv), lps, index))
                continue
            per_id = [float(adv[t]) if t >= 0 and m else 0.0 for t, m in zip(owner, mask)]
            seqs.append(TrainSequence(ids, mask, 0.0, lps, index, token_adv=per_id))
    return seqs, split


@dataclass
class MicroBatch:
    """Right-padded tensors of a few sequences, already on the training device.

    Targets are shifted: position t of `mask`, `gen_logp` is the token at t + 1 of `ids`.
    Packed (`positions` set): `ids` is one row (1, N) of all the sequences; the target at
    (b, t) of `mask` is the id after input `positions[b, t]` of that row.
    """

    ids: torch.Tensor  # (B, T) long
    attention: torch.Tensor  # (B, T) long, 1 on real tokens
    mask: torch.Tensor  # (B, T-1) float, 1 on trainable target tokens
    adv: torch.Tensor  # (B,) float, or (B, T-1) with turn credit (aligned with `mask`)
    gen_logp: torch.Tensor  # (B, T-1) float, nan where unknown
    host_mask: torch.Tensor | None = None  # `mask` on the CPU (counts without a GPU wait)
    n_tokens: int | None = None  # real tokens in `ids`
    positions: torch.Tensor | None = None  # (B, T-1) long: packed only, see above
    position_ids: torch.Tensor | None = None  # (1, N) long: packed only, restarting at each sequence
    cu_seqlens: torch.Tensor | None = None  # (B+1,) int32: packed only, where each sequence starts, then N
    max_length: int = 0  # packed only: the longest sequence's tokens

    @property
    def tokens(self) -> int:
        return int(self.attention.sum()) if self.n_tokens is None else self.n_tokens

    @property
    def cpu_mask(self) -> torch.Tensor:
        return self.mask.cpu() if self.host_mask is None else self.host_mask


def micro_batches(
    seqs: Sequence[TrainSequence],
    size: int,
    pad_id: int,
    device: torch.device,
    *,
    pack: bool = False,
    tokens: int | None = None,
) -> list[MicroBatch]:
    """Sort by length (longest first), cut into micro-batches of `size` (and, with `tokens`, of at
    most that many tokens: `token_cuts`), pad on the right (or, with `pack`, concatenate each
    micro-batch into one row)."""
    order = sorted(range(len(seqs)), key=lambda i: (-len(seqs[i].ids), i))
    out = []
    for start, stop in token_cuts([len(seqs[i].ids) for i in order], size, tokens, pack=pack):
        chunk = [seqs[i] for i in order[start:stop]]
        width = max(2, max(len(s.ids) for s in chunk))
        pads = [width - len(s.ids) for s in chunk]  # one tensor per field, built from lists
        mask = torch.tensor([list(s.mask) + [0] * p for s, p in zip(chunk, pads)], dtype=torch.float32)
        gen = torch.tensor([list(s.gen_logprobs) + [math.nan] * p for s, p in zip(chunk, pads)], dtype=torch.float32)
        if any(s.token_adv is not None for s in chunk):  # (B, T-1) after the shift, like the mask
            rows = [s.token_adv if s.token_adv is not None else [s.advantage * m for m in s.mask] for s in chunk]
            adv = torch.tensor([list(r) + [0.0] * p for r, p in zip(rows, pads)], dtype=torch.float32)[:, 1:]
        else:
            adv = torch.tensor([s.advantage for s in chunk], dtype=torch.float32)
        n_tokens = sum(len(s.ids) for s in chunk)
        packed: dict[str, Any] = {}
        if pack:
            offsets = list(itertools.accumulate((len(s.ids) for s in chunk), initial=0))
            ids = torch.tensor([[t for s in chunk for t in s.ids]], dtype=torch.long)
            attention = torch.ones_like(ids)
            at = [[o + t if t < len(s.ids) - 1 else 0 for t in range(width - 1)] for s, o in zip(chunk, offsets)]
            packed["positions"] = torch.tensor(at, dtype=torch.long).to(device)
            packed["position_ids"] = torch.tensor([[t for s in chunk for t in range(len(s.ids))]]).to(device)
            packed["cu_seqlens"] = torch.tensor(offsets, dtype=torch.int32).to(device)
            packed["max_length"] = max(len(s.ids) for s in chunk)
        else:
            ids = torch.tensor([s.ids + [pad_id] * p for s, p in zip(chunk, pads)], dtype=torch.long)
            attention = torch.tensor([[1] * len(s.ids) + [0] * p for s, p in zip(chunk, pads)], dtype=torch.long)
        out.append(
            MicroBatch(
                ids.to(device),
                attention.to(device),
                mask[:, 1:].to(device),
                adv.to(device),
                gen[:, 1:].to(device),
                host_mask=mask[:, 1:],
                n_tokens=n_tokens,
                **packed,
            )
        )
    return out


def token_cuts(lengths: list[int], size: int, tokens: int | None, *, pack: bool) -> list[tuple[int, int]]:
    """[start, stop) of each micro-batch of sequences of `lengths` (longest first): at most `size`
    sequences and, with `tokens`, at most that many tokens (packed: the lengths' sum; padded:
    rows x the first, longest), at least one sequence each.

    >>> token_cuts([5, 4, 3, 2], 3, None, pack=False)
    [(0, 3), (3, 4)]
    >>> token_cuts([5, 4, 3, 2], 8, 9, pack=True), token_cuts([5, 4, 3, 2], 8, 9, pack=False)
    ([(0, 2), (2, 4)], [(0, 1), (1, 3), (3, 4)])
    >>> token_cuts([12, 3], 8, 9, pack=True)  # longer than the cap: alone
    [(0, 1), (1, 2)]
    """
    cuts, start, used = [], 0, 0
    for i, n in enumerate(lengths):
        rows = i - start
        grown = used + n if pack else (rows + 1) * lengths[start]
        if rows and (rows == size or (tokens is not None and grown > tokens)):
            cuts.append((start, i))
            start, grown = i, n
        used = grown
    if lengths:
        cuts.append((start, len(lengths)))
    return cuts


def empty_micro_batch(pad_id: int, device: torch.device) -> MicroBatch:
    """A micro-batch with nothing to train on (ranks with fewer micro-batches run these so
    that every rank does the same number of backward passes)."""
    ids = torch.full((1, 2), pad_id, dtype=torch.long, device=device)
    zeros = torch.zeros((1, 1), device=device)
    return MicroBatch(
        ids, torch.ones_like(ids), zeros, torch.zeros(1, device=device), torch.full((1, 1), math.nan, device=device)
    )


def normaliser(kind: Normalisation, mask: torch.Tensor) -> float:
    """The count a loss of normalisation `kind` divides by, for the rows of `mask` (B, T)."""
    if kind == "seq-mean":
        return float((mask.sum(-1) > 0).sum())
    if kind == "token-mean":
        return float(mask.sum())
    if kind == "constant":
        return float(mask.shape[0])
    raise ValueError(f"unknown normalisation {kind!r}")


def sequences_normaliser(kind: Normalisation, seqs: Sequence[TrainSequence]) -> float:
    """What `normaliser` gives the micro-batches of `seqs`, summed, without building them."""
    targets = [s.mask[1:] for s in seqs]  # (shifted: the first id is no target)
    if kind == "seq-mean":
        return float(sum(any(t) for t in targets))
    if kind == "token-mean":
        return float(sum(sum(t) for t in targets))
    if kind == "constant":
        return float(len(targets))
    raise ValueError(f"unknown normalisation {kind!r}")
