"""An exponential moving average of the trained weights (`ema_decay`), evaluated and exported.

After every optimizer step `average = decay * average + (1 - decay) * weights`, over the
trainable parameters only (LoRA: the adapters), kept in float32 beside them and started at the
starting weights. Training itself never reads the average: rollouts and updates use the
current weights, so the run's trajectory is the same with and without it. Evaluations, the
kept best model and `final/` use the average (swapped into the model in place for the
duration, then swapped back, so CUDA graphs that read the parameters' storage stay valid);
checkpoints hold the current weights and the average, so a resumed run continues both exactly.

Why: an RL run's greedy behaviour moves from step to step with the noise of each batch (on
tic-tac-toe, the lost games over the whole tree went 0, 3, 0, 2 at four evaluations of one
run at a constant learning rate). Averaging the last ~1 / (1 - decay) steps' weights damps that
noise without slowing the run that produces them.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch
from torch import nn


class WeightAverage:
    """The moving average of `model`'s trainable parameters."""

    def __init__(self, model: nn.Module, decay: float) -> None:
        if not 0.0 < decay < 1.0:
            raise ValueError(f"decay must be in (0, 1), got {decay}")
        self.decay = decay
        self.params = {name: p for name, p in model.named_parameters() if p.requires_grad}
        self.average = {name: p.detach().float().clone() for name, p in self.params.items()}

    @torch.no_grad()
    def update(self) -> None:
        """Fold the current weights in (call after each optimizer step)."""
        for name, p in self.params.items():
            self.average[name].lerp_(p.detach().float(), 1.0 - self.decay)

    @contextlib.contextmanager
    def swapped_in(self) -> Iterator[None]:
        """The model holds the average inside the block, its own weights again after it (also
        after an exception), bit for bit."""
        self._swap()
        try:
            yield
        finally:
            self._swap()

    @torch.no_grad()
    def _swap(self) -> None:
        for name, p in self.params.items():
            kept = p.detach().clone()
            p.copy_(self.average[name])  # (the parameters are float32, as the average is)
            self.average[name].copy_(kept)

    def state_dict(self) -> dict[str, Any]:
        return {"average": {name: t.cpu() for name, t in self.average.items()}}  # (decay: the run's config)

    def load_state_dict(self, state: dict[str, Any] | None) -> None:
        """Restore a saved average; `None` (a checkpoint written without one) keeps the start."""
        if state is None:
            return
        saved = state["average"]
        if set(saved) != set(self.average):
            raise ValueError("the checkpoint's weight average holds other parameters than the model's")
        for name, t in saved.items():
            self.average[name].copy_(t)
