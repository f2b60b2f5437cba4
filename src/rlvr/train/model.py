"""The model being trained, shared by `rlvr train` and `rlvr sft`: loading (full or LoRA), the
LR schedule, and the final export (its log-probs: `rlvr.train.logprobs`).

- Weights are loaded and trained in float32; `bf16` only autocasts the forward/backward pass,
  so optimizer state and checkpoints stay exact.
- LoRA targets every `nn.Linear` of the architecture except the output head (for Qwen/Llama:
  q/k/v/o and the MLP projections), found by walking the model, not from a per-model list.
- `final/` is a plain model folder: LoRA adapters are merged into a copy before saving.
"""

from __future__ import annotations

import contextlib
import copy
import json
import math
import os
import shutil
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import torch
from torch import nn

from rlvr.clients.local_load import LOAD_ERRORS as _LOAD_ERRORS
from rlvr.errors import ModelError, first_line
from rlvr.train.fields import LoraSpec

if TYPE_CHECKING:
    from transformers import PreTrainedModel


# ---- loading -------------------------------------------------------------------------------


def load_tokenizer(path: str) -> Any:
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(path)
    except _LOAD_ERRORS as exc:
        raise ModelError(f"cannot load a tokenizer from {path}: {first_line(exc)}") from None


def load_model_config(path: str) -> Any:
    """The model's transformers config (its architecture, without loading the weights)."""
    from transformers import AutoConfig

    try:
        return AutoConfig.from_pretrained(path)
    except _LOAD_ERRORS as exc:
        raise ModelError(f"cannot load a model from {path}: {first_line(exc)}") from None


def load_trainable(source: str, *, lora: LoraSpec | None, device: torch.device, checkpoint: Path | None = None) -> Any:
    """The model to train, in float32 on `device`: `source`, or the model folder of a
    `checkpoint` to resume from; with `lora`, wrapped with new adapters (or the checkpoint's)."""
    from transformers import AutoModelForCausalLM

    path = str(checkpoint) if checkpoint is not None and lora is None else source
    try:
        model: Any = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    except _LOAD_ERRORS as exc:
        raise ModelError(f"cannot load a causal language model from {path}: {first_line(exc)}") from None
    model.to(device)
    if lora is None:
        return model
    from peft import LoraConfig, PeftModel, get_peft_model

    with quiet_peft():
        if checkpoint is not None:
            try:
                return PeftModel.from_pretrained(model, str(checkpoint), is_trainable=True)
            except _LOAD_ERRORS as exc:
                raise ModelError(f"cannot load the LoRA adapter in {checkpoint}: {first_line(exc)}") from None
        alpha = lora.alpha or 2 * lora.rank
        config = LoraConfig(
            r=lora.rank,
            lora_alpha=cast(int, alpha),  # peft annotates int; the scale alpha / r takes a float
            target_modules=lora_targets(model),
            lora_dropout=lora.dropout,
            bias="none",
            task_type="CAUSAL_LM",
        )
        return get_peft_model(model, config)


@contextlib.contextmanager
def quiet_peft() -> Iterator[None]:
    """peft 0.21 reads a property that transformers 5 deprecated; that FutureWarning is theirs."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*", category=FutureWarning)
        yield


def lora_targets(model: PreTrainedModel) -> list[str]:
    """Names (last part) of every Linear layer except the output head."""
    head = model.get_output_embeddings()
    names = {name.rsplit(".", 1)[-1] for name, m in model.named_modules() if isinstance(m, nn.Linear) and m is not head}
    if not names:
        raise ModelError("found no nn.Linear layers to put LoRA adapters on; use lora_rank = 0")
    return sorted(names)


def load_reference(source: str, device: torch.device) -> Any:
    """A frozen copy of the starting model for the KL term (full fine-tuning only; with LoRA
    the reference is the same model with its adapters disabled)."""
    from transformers import AutoModelForCausalLM

    try:
        ref: Any = AutoModelForCausalLM.from_pretrained(source, dtype=torch.float32)
    except _LOAD_ERRORS as exc:
        raise ModelError(f"cannot load a causal language model from {source}: {first_line(exc)}") from None
    ref.to(device).eval()
    ref.requires_grad_(False)
    return ref


# ---- optimizer and learning rate -----------------------------------------------------------


def make_optimizer(model: nn.Module, lr: float) -> torch.optim.Optimizer:
    """AdamW over the trainable parameters: betas (0.9, 0.99), no weight decay, one fused
    kernel on CUDA. (`rlvr sft` keeps its own: torch's default betas and a weight_decay knob.)"""
    params = [p for p in model.parameters() if p.requires_grad]
    fused = bool(params) and all(p.is_cuda for p in params)  # one kernel for all parameters
    return torch.optim.AdamW(params, lr=lr, betas=(0.9, 0.99), eps=1e-8, weight_decay=0.0, fused=fused or None)


def lr_factor(step: int, *, schedule: str, warmup: int, total: int) -> float:
    """Multiplier of the peak learning rate at optimizer step `step` (0-based) of `total`:
    linear warm-up over `warmup` steps, then `schedule` (constant, or a linear or cosine decay
    that reaches 0 at step `total`).

    >>> [round(lr_factor(s, schedule="linear", warmup=2, total=10), 3) for s in (0, 1, 2, 6, 9)]
    [0.5, 1.0, 1.0, 0.5, 0.125]
    >>> [round(lr_factor(s, schedule="cosine", warmup=2, total=10), 3) for s in (0, 1, 2, 6, 9)]
    [0.5, 1.0, 1.0, 0.5, 0.038]
    """
    if step < warmup:
        return (step + 1) / warmup
    if schedule == "constant":
        return 1.0
    done = min(1.0, (step - warmup) / max(1, total - warmup))
    if schedule == "linear":
        return 1.0 - done
    return 0.5 * (1.0 + math.cos(math.pi * done))


def make_scheduler(optimizer: torch.optim.Optimizer, *, schedule: str, warmup: int, total: int) -> Any:
    return torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: lr_factor(step, schedule=schedule, warmup=warmup, total=total)
    )


# ---- the end of a run ----------------------------------------------------------------------


def export_final(
    model: Any,
    tokenizer: Any,
    path: Path,
    *,
    state_dict: dict[str, Any] | None = None,
    extra: dict[str, str] | None = None,
) -> None:
    """Save the trained model as a plain model folder (LoRA merged into a copy), loadable with
    `from_pretrained`; an older folder at `path` is replaced. `state_dict`: the weights to
    write instead of the model's own (a sharded model's, gathered by
    `rlvr.train.sharding.full_state_dict`).

    The folder is written as `path.tmp`, then swapped in by renames: the old folder aside to
    `path.old`, the new one in, the old one removed. A kill at any point leaves `path` whole
    (the old model or the new one) or, between the two renames, missing with `path.old` whole;
    `settle_export` puts that back and tells whether an export was cut short. `extra`: more
    text files (name -> text) written into the folder before the swap, so they and the weights
    appear together.
    """
    settle_export(path)
    tmp, old = _export_sides(path)
    if tmp.exists():
        shutil.rmtree(tmp)
    if hasattr(model, "merge_and_unload"):
        with quiet_peft():
            model = copy.deepcopy(model).merge_and_unload()
    model.save_pretrained(tmp, **({} if state_dict is None else {"state_dict": state_dict}))
    tokenizer.save_pretrained(tmp)
    for name, text in (extra or {}).items():
        (tmp / name).write_text(text, encoding="utf-8")
    if path.exists():
        path.rename(old)
    tmp.rename(path)
    shutil.rmtree(old, ignore_errors=True)


def settle_export(path: Path) -> bool:
    """Finish what a kill mid-`export_final` left at `path`; True when that export was cut short
    before its new folder was in (export again), False when none was or it had completed.

    Killed between the two renames, the old folder is put back; killed while removing the old
    folder, the rest of it is removed.
    """
    tmp, old = _export_sides(path)
    if old.exists():
        if path.exists():
            shutil.rmtree(old)
        else:
            old.rename(path)
    return tmp.exists()


def _export_sides(path: Path) -> tuple[Path, Path]:
    """The folders `export_final` writes the new model to, and moves the old one to."""
    return path.with_name(path.name + ".tmp"), path.with_name(path.name + ".old")


def exported(path: Path) -> bool:
    """Whether `path` holds a whole exported model: a config that parses and every weights file
    its index names, each with a header that covers the file (a kill mid-export by an older
    version could leave an empty config.json, or config.json without the weights)."""
    from safetensors import SafetensorError, safe_open

    try:
        if not isinstance(json.loads((path / "config.json").read_text(encoding="utf-8")), dict):
            return False
        index = path / "model.safetensors.index.json"
        names = (
            set(json.loads(index.read_text(encoding="utf-8"))["weight_map"].values())
            if index.exists()
            else {"model.safetensors"}
        )
        for name in names:
            with safe_open(str(path / name), "pt"):
                pass
    except (OSError, ValueError, KeyError, TypeError, AttributeError, SafetensorError):
        return False
    return True


# ---- wrappers ------------------------------------------------------------------------------


def unwrap(model: Any) -> Any:
    """The model inside a DistributedDataParallel wrapper (or the model itself)."""
    return getattr(model, "module", model)


NOT_DETERMINISTIC = "does not have a deterministic implementation"
"""Part of the RuntimeError torch raises for a kernel without a deterministic version."""


@contextlib.contextmanager
def deterministic_kernels(on: bool) -> Iterator[None]:
    """torch's deterministic kernels for the block (`on`; off: nothing changes), where a GPU's
    default kernels may sum in another order each run: no cuDNN autotuning, and a fixed cuBLAS
    workspace (`CUBLAS_WORKSPACE_CONFIG`, read at the process's first cuBLAS call, so the block
    comes first, as in `rlvr sft` and `rlvr train`). All is restored afterwards. A kernel without
    a deterministic version stops the run with a ModelError naming it. What it measured to make
    repeatable (SFT) and what not (RL): docs/training.md, "Repeatable runs".
    """
    if not on:
        yield
        return
    was_on, warn_only = (
        torch.are_deterministic_algorithms_enabled(),
        torch.is_deterministic_algorithms_warn_only_enabled(),
    )
    autotune, workspace = torch.backends.cudnn.benchmark, os.environ.get("CUBLAS_WORKSPACE_CONFIG")
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.use_deterministic_algorithms(True)
    torch.backends.cudnn.benchmark = False
    try:
        yield
    except RuntimeError as e:
        text = first_line(e)
        if NOT_DETERMINISTIC not in text:
            raise
        kernel = text[: text.index(NOT_DETERMINISTIC) + len(NOT_DETERMINISTIC)]  # torch's advice after it is for code
        raise ModelError(f"--deterministic: {kernel}; run without --deterministic") from e
    finally:
        torch.use_deterministic_algorithms(was_on, warn_only=warn_only)
        torch.backends.cudnn.benchmark = autotune
        if workspace is None:
            os.environ.pop("CUBLAS_WORKSPACE_CONFIG", None)
        else:
            os.environ["CUBLAS_WORKSPACE_CONFIG"] = workspace


@contextlib.contextmanager
def tf32_restored() -> Iterator[None]:
    """TF32 matmul flags as they were before the block, whatever it set (`rlvr train` turns them
    on for a GPU): a caller's own float32 work after an in-process run is not changed by it."""
    saved = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved


def use_bf16(setting: bool | None, device: Any) -> bool:
    """Whether to autocast to bfloat16 on `device` (a torch.device): `setting` when given;
    unset (the default of `rlvr train` and `rlvr sft`), on for a CUDA GPU that supports bf16
    and off elsewhere (a CPU: slower there, and no gain in memory).

    >>> use_bf16(None, type("D", (), {"type": "cpu"})()), use_bf16(True, None)
    (False, True)
    """
    if setting is not None:
        return setting
    if getattr(device, "type", None) != "cuda":
        return False
    return bool(torch.cuda.is_bf16_supported())
