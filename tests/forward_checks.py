"""Helpers of the training-forward tests (tests/test_logprobs.py, tests/test_varlen.py): random
sequences, gradients of a loss, and a loss that weighs every trained token differently."""

from __future__ import annotations

import random

import torch

from rlvr.train.sequences import TrainSequence


def sequences(vocab: int, n: int = 5, seed: int = 0) -> list[TrainSequence]:
    """Sequences of different lengths, each a prompt (mask 0) then a reply (mask 1)."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        prompt, reply = rng.randint(2, 9), rng.randint(1, 12)
        ids = [rng.randrange(vocab) for _ in range(prompt + reply)]
        out.append(TrainSequence(ids, [0] * prompt + [1] * reply, rng.uniform(-1, 1), [float("nan")] * len(ids), i))
    return out


def grads(model, fn) -> list[torch.Tensor]:
    model.zero_grad(set_to_none=True)
    fn().backward()
    out = [p.grad.clone() for p in model.parameters()]
    model.zero_grad(set_to_none=True)
    return out


def assert_same_gradients(got, want, tol: float) -> None:
    """Each parameter's gradient equal to `tol` of its norm (float32 sums in another order)."""
    for name_index, (a, b) in enumerate(zip(got, want)):
        assert (a - b).norm() <= tol * b.norm() + 1e-12, (name_index, float((a - b).norm() / b.norm()))


def weighted(logp, mb):
    """A loss that gives every trained token its own weight (so any misplaced token shows)."""
    w = torch.arange(1, mb.mask.numel() + 1, dtype=torch.float32).view_as(mb.mask) / mb.mask.numel()
    return (logp * w * mb.mask).sum()
