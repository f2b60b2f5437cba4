"""The model being trained: loading (full or LoRA), optimizer, LR schedule, token log-probs.

- Weights are loaded and trained in float32; `bf16` only autocasts the forward/backward pass,
  so optimizer state and checkpoints stay exact.
- LoRA targets every `nn.Linear` of the architecture except the output head (for Qwen/Llama:
  q/k/v/o and the MLP projections), found by walking the model, not from a per-model list.
- Log-probs divide the logits by the sampling temperature: the policy trained is the one the
  rollouts were sampled from (LocalModel reports logprobs of `log_softmax(logits / T)` too).
"""

from __future__ import annotations

import contextlib
import math
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
from torch import nn

from rlvr.errors import ModelError
from rlvr.train.config import TrainConfig


def load_tokenizer_and_config(path: str) -> tuple[Any, Any]:
    from transformers import AutoConfig, AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(path), AutoConfig.from_pretrained(path)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        detail = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ModelError(f"cannot load a model from {path}: {detail}") from None


def load_policy(cfg: TrainConfig, device: torch.device, checkpoint_model: Path | None) -> Any:
    """The trainable model: `cfg.model` (or a full checkpoint), wrapped with LoRA if asked."""
    from transformers import AutoModelForCausalLM

    source = str(checkpoint_model) if checkpoint_model is not None and cfg.lora_rank == 0 else cfg.model
    try:
        model = AutoModelForCausalLM.from_pretrained(source, dtype=torch.float32)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ModelError(f"cannot load a causal language model from {source}: {exc}") from None
    model.to(device)
    if cfg.lora_rank > 0:
        from peft import LoraConfig, PeftModel, get_peft_model

        with quiet_peft():
            if checkpoint_model is not None:
                model = PeftModel.from_pretrained(model, str(checkpoint_model), is_trainable=True)
            else:
                lora = LoraConfig(
                    r=cfg.lora_rank,
                    lora_alpha=cfg.lora_alpha or 2 * cfg.lora_rank,
                    target_modules=lora_targets(model),
                    lora_dropout=0.0,
                    bias="none",
                    task_type="CAUSAL_LM",
                )
                model = get_peft_model(model, lora)
    model.eval()  # no dropout anywhere: generation, old and new log-probs see the same network
    return model


@contextlib.contextmanager
def quiet_peft() -> Iterator[None]:
    """peft 0.21 reads a property that transformers 5 deprecated; that FutureWarning is theirs."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*", category=FutureWarning)
        yield


def lora_targets(model: nn.Module) -> list[str]:
    """Names (last part) of every Linear layer except the output head."""
    head = model.get_output_embeddings()
    names = {name.rsplit(".", 1)[-1] for name, m in model.named_modules() if isinstance(m, nn.Linear) and m is not head}
    if not names:
        raise ModelError("found no nn.Linear layers to put LoRA adapters on; use lora_rank = 0")
    return sorted(names)


def load_reference(cfg: TrainConfig, device: torch.device) -> Any:
    """A frozen copy of the starting model for the KL term (full fine-tuning only; with LoRA
    the reference is the same model with its adapters disabled)."""
    from transformers import AutoModelForCausalLM

    ref = AutoModelForCausalLM.from_pretrained(cfg.model, dtype=torch.float32).to(device).eval()
    ref.requires_grad_(False)
    return ref


def make_optimizer(model: nn.Module, cfg: TrainConfig) -> torch.optim.Optimizer:
    params = [p for p in model.parameters() if p.requires_grad]
    fused = bool(params) and all(p.is_cuda for p in params)  # one kernel for all parameters
    return torch.optim.AdamW(params, lr=cfg.lr, betas=(0.9, 0.99), eps=1e-8, weight_decay=0.0, fused=fused or None)


def lr_factor(step: int, cfg: TrainConfig) -> float:
    """Multiplier of cfg.lr for optimizer step `step` (0-based): linear warm-up, then schedule.

    >>> from rlvr.train.config import TrainConfig
    >>> c = TrainConfig(env="e", model="m", steps=10, warmup_steps=2, lr_schedule="linear")
    >>> [round(lr_factor(s, c), 3) for s in (0, 1, 2, 6, 9)]
    [0.5, 1.0, 1.0, 0.5, 0.125]
    """
    if step < cfg.warmup_steps:
        return (step + 1) / cfg.warmup_steps
    if cfg.lr_schedule == "constant":
        return 1.0
    span = max(1, cfg.steps - cfg.warmup_steps)
    done = min(1.0, (step - cfg.warmup_steps) / span)
    if cfg.lr_schedule == "linear":
        return 1.0 - done
    return 0.5 * (1.0 + math.cos(math.pi * done))


def make_scheduler(optimizer: torch.optim.Optimizer, cfg: TrainConfig) -> Any:
    return torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: lr_factor(step, cfg))


def token_logprobs(
    model: Any, ids: torch.Tensor, attention: torch.Tensor, temperature: float, *, entropy: bool = False
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """log pi(ids[:, t+1] | ids[:, :t+1]) for every t: (B, T-1); and the entropy (B, T-1),
    without gradient, when asked."""
    logits = model(input_ids=ids, attention_mask=attention).logits[:, :-1].float()  # (B, T-1, V)
    if temperature != 1.0:
        logits = logits / temperature
    logz = torch.logsumexp(logits, dim=-1)  # (B, T-1)
    logp = logits.gather(-1, ids[:, 1:, None]).squeeze(-1) - logz  # (B, T-1)
    ent = None
    if entropy:
        with torch.no_grad():
            ent = logz - (logits.softmax(-1) * logits).sum(-1)  # (B, T-1)
    return logp, ent


def unwrap(model: Any) -> Any:
    """The model inside a DistributedDataParallel wrapper (or the model itself)."""
    return getattr(model, "module", model)
