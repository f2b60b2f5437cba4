"""`SFTConfig`: every knob of `rlvr sft`. Each field's one-line docstring is its `--help` text.

Kept apart from `rlvr.train.sft` so that building the CLI imports no torch.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

from rlvr.errors import UsageError
from rlvr.train import fields
from rlvr.train.fields import LR_SCHEDULES, LoraSpec

RESUME_MAY_CHANGE = frozenset(
    {
        "output_dir",
        "epochs",
        "max_steps",
        "eval_every",
        "save_every",
        "skip_bad_lines",
        "device",
        "deterministic",
        "gradient_checkpointing",
        "pack_sequences",
    }
)
"""Fields a resumed run may change; any other difference from the saved config is an error."""


@dataclass
class SFTConfig:
    """Configuration of one supervised fine-tuning run."""

    model: str
    """model to fine-tune: a local model folder or a Hugging Face id"""
    data: str
    """JSONL chat dataset, one {"messages": [...], "tools": [...]} per line (e.g. from `rlvr gen`);
    `rlvr sft -d` also takes .json, .parquet or a saved HF dataset, converted to JSONL first"""
    output_dir: str
    """run directory: metrics.csv, tensorboard/, plots/, checkpoints/, and final/ (the model)"""
    epochs: int = 3
    """passes over the training conversations (ignored when max_steps is set)"""
    max_steps: int | None = None
    """optimizer steps to train for; None = epochs x batches per epoch"""
    batch_size: int = 32
    """conversations per optimizer step"""
    micro_batch_size: int = 8
    """conversations per forward/backward pass (gradients accumulate over a batch)"""
    lr: float = 2e-5
    """peak learning rate (LoRA usually wants about 10x more)"""
    lr_schedule: str = "constant"
    """learning rate after warm-up: constant, or a linear or cosine decay to 0 at the last step"""
    warmup_steps: int = 0
    """steps of linear learning-rate warm-up from 0 (from random weights at a high lr, give it about a
    tenth of the steps: docs/training.md, "Train on a CPU")"""
    weight_decay: float = 0.0
    """AdamW weight decay"""
    max_grad_norm: float = 1.0
    """clip the global gradient norm to this before each optimizer step"""
    max_length: int = 2048
    """tokens per conversation; longer ones are cut at this length"""
    gradient_checkpointing: bool = False
    """recompute each transformer block's activations in the backward pass (less memory, ~1/3 more compute)"""
    pack_sequences: bool | None = None
    """pack each micro-batch into one row without padding (on CUDA through torch's varlen attention); None = only where the model's attention is varlen (flash_attention_2)"""
    lora_rank: int = 0
    """LoRA rank; 0 = full fine-tuning"""
    lora_alpha: float | None = None
    """LoRA scale numerator; None = 2 * lora_rank"""
    lora_dropout: float = 0.0
    """dropout on the LoRA inputs during training"""
    bf16: bool | None = None
    """bfloat16 autocast of forward and backward passes (weights stay float32); unset = on for a CUDA GPU with bf16, off on CPU"""
    eval_fraction: float = 0.05
    """share of conversations held out for the eval loss (at least one when > 0)"""
    eval_every: int | None = 20
    """compute the eval loss every N steps (and before the first and after the last)"""
    save_every: int | None = 50
    """checkpoint every N steps (and after the last); None = only after the last"""
    seed: int = 0
    """seed of the eval split, the batch order, LoRA init and dropout"""
    deterministic: bool = False
    """torch's deterministic kernels: the same seed, data and machine give the same weights bit for bit (on a GPU the default kernels' sums can differ from run to run)"""
    skip_bad_lines: bool = False
    """skip malformed dataset lines (reporting their numbers) instead of stopping"""
    device: str | None = None
    """cpu, cuda, cuda:1 ...; None = CUDA when available"""

    def __post_init__(self) -> None:
        def need(ok: bool, message: str) -> None:
            if not ok:
                raise UsageError(message)

        for name in ("epochs", "batch_size", "micro_batch_size", "max_length"):
            need(getattr(self, name) >= 1, f"{name} must be >= 1, got {getattr(self, name)}")
        for name in ("max_steps", "eval_every", "save_every"):
            value = getattr(self, name)
            need(value is None or value >= 1, f"{name} must be >= 1 or None (unset), got {value}")
        need(math.isfinite(self.lr) and self.lr > 0, f"lr must be > 0, got {self.lr}")
        need(
            self.lr_schedule in LR_SCHEDULES,
            f"unknown lr_schedule {self.lr_schedule!r}; expected one of {', '.join(LR_SCHEDULES)}",
        )
        need(self.warmup_steps >= 0, f"warmup_steps must be >= 0, got {self.warmup_steps}")
        need(self.weight_decay >= 0, f"weight_decay must be >= 0, got {self.weight_decay}")
        need(self.max_grad_norm > 0, f"max_grad_norm must be > 0, got {self.max_grad_norm}")
        need(
            self.lora_rank >= 0,
            f"lora_rank must be >= 0 (0 = full fine-tuning), got {self.lora_rank}",
        )
        need(
            self.lora_alpha is None or self.lora_alpha > 0,
            f"lora_alpha must be > 0, got {self.lora_alpha}",
        )
        need(0 <= self.lora_dropout < 1, f"lora_dropout must be in [0, 1), got {self.lora_dropout}")
        need(
            0 <= self.eval_fraction < 1,
            f"eval_fraction must be in [0, 1), got {self.eval_fraction}",
        )

    @property
    def lora(self) -> LoraSpec | None:
        """The LoRA adapters to train (None: full fine-tuning)."""
        return LoraSpec(self.lora_rank, self.lora_alpha, self.lora_dropout) if self.lora_rank else None

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def check_resume(saved: dict[str, Any], new: SFTConfig) -> None:
    """A resumed run keeps the config it started with, except `RESUME_MAY_CHANGE`."""
    fields.check_resume(saved, new.to_dict(), RESUME_MAY_CHANGE)


def field_docs() -> dict[str, str]:
    """Each field's docstring, for `--help`."""
    return fields.field_docs(SFTConfig)
