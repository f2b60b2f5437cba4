"""Loading a causal LM for `LocalModel`, and what its decoder needs to know about it.

Nothing here decodes: this module finds the weights and tokenizer, reads the model's context
length and end-of-sequence ids, checks the decoding options against the model (static KV
slots, autocast), and sets up the process and kernels for generation on this device.
"""

from __future__ import annotations

import contextlib
import ctypes
import inspect
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedTokenizerBase

from rlvr.clients.cpu_threads import apply_to_torch
from rlvr.errors import ModelError, UsageError

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
LOAD_ERRORS = (OSError, ValueError, KeyError, TypeError, SafetensorError)
"""What transformers raises for a missing or unusable model folder or id (SafetensorError: a
truncated or corrupt weights file)."""


def load_pretrained(path_or_id: str, device: str | None, dtype: str | None) -> tuple[Any, PreTrainedTokenizerBase]:
    """The model (on `device`, in eval mode) and tokenizer saved at `path_or_id` (a folder or a
    hub id); `ModelError` in one line when there is none. `device` None: CUDA when available;
    `dtype` None: bfloat16 on CUDA, float32 on CPU. On the CPU, torch's thread count is chosen
    first unless the person chose it (`rlvr.clients.cpu_threads`: a busy machine is not oversubscribed)."""
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cpu":
        apply_to_torch()
    if dtype is not None and dtype not in DTYPES:
        raise UsageError(f"dtype must be one of {sorted(DTYPES)}, got {dtype!r}")
    torch_dtype = DTYPES[dtype] if dtype else (torch.bfloat16 if device.startswith("cuda") else torch.float32)
    looks_local = path_or_id.startswith(("/", ".", "~")) or path_or_id.count("/") != 1
    if looks_local and not Path(path_or_id).expanduser().is_dir():
        raise ModelError(f"no model folder at {path_or_id}; pass a folder written by save_pretrained or a hub id")
    path = str(Path(path_or_id).expanduser()) if looks_local else path_or_id
    if looks_local:
        check_not_a_run(path_or_id)
    try:
        model: Any = AutoModelForCausalLM.from_pretrained(path, dtype=torch_dtype)
        tokenizer = AutoTokenizer.from_pretrained(path)
    except LOAD_ERRORS as exc:
        detail = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ModelError(f"cannot load a causal language model from {path_or_id}: {detail}") from None
    return model.to(device).eval(), tokenizer


def check_not_a_run(folder: str) -> None:
    """A `ModelError` naming the model inside when `folder` is a training run's folder (what
    `rlvr sft` and `rlvr train` write: the model is its final/, or a checkpoint's model/)."""
    run = Path(folder).expanduser()  # a run's folder has a config.json too: the run's own
    if (run / "final" / "config.json").is_file():
        raise ModelError(f"{folder} is a training run's folder, not a model; did you mean {Path(folder) / 'final'}?")
    steps = sorted(p for p in (run / "checkpoints").glob("step_*") if (p / "model" / "config.json").is_file())
    if steps:
        last = Path(folder) / "checkpoints" / steps[-1].name / "model"
        raise ModelError(
            f"{folder} is a training run's folder with no final/ model yet (still running, or stopped: "
            f"--resume continues it); its last checkpoint's model is {last}"
        )


def keep_freed_blocks(limit: int = 1 << 30) -> bool:
    """Let glibc's malloc serve blocks up to `limit` bytes from its heap instead of mapping fresh
    pages for each (`mallopt(M_MMAP_THRESHOLD)`), and keep up to `limit` bytes freed at the heap's
    top instead of handing them back (`M_TRIM_THRESHOLD`). On CPU every prefill and every training
    micro-batch allocates activations of hundreds of MB; mapped anew each time, or trimmed and
    grown again, their pages fault in again (measured: 14M page faults and 28 s of system time in a
    200-game tic-tac-toe evaluation on 2 cores, 4M with the first setting, and the evaluation took
    about 30% less time; a CPU training step: docs/benchmarks.md). The process keeps freed memory
    for reuse. Called when a `LocalModel` is made over a model on the CPU, however it was loaded
    (the trainer passes its policy in); False where there is no glibc."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL("libc.so.6")
        return bool(libc.mallopt(-3, limit)) and bool(libc.mallopt(-1, limit))  # M_MMAP_, M_TRIM_THRESHOLD
    except (OSError, AttributeError):
        return False


def base_model(model: Any) -> Any:
    """The transformers model under a peft wrapper (the model itself when there is none)."""
    return model.get_base_model() if hasattr(model, "get_base_model") else model


def context_length(model: Any, tokenizer: PreTrainedTokenizerBase) -> int:
    """Tokens the model attends over: its config's `max_position_embeddings`, else the
    tokenizer's `model_max_length`, else 4096."""
    config = base_model(model).config
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    for value in (
        getattr(text, "max_position_embeddings", None),
        getattr(tokenizer, "model_max_length", None),
    ):
        if isinstance(value, int) and 0 < value < 10_000_000:
            return value
    return 4096


def eos_ids(model: Any, tokenizer: PreTrainedTokenizerBase) -> frozenset[int]:
    """The ids that end a reply: the generation config's and the tokenizer's."""
    ids: set[int] = set()
    for value in (
        getattr(getattr(model, "generation_config", None), "eos_token_id", None),
        tokenizer.eos_token_id,
    ):
        if isinstance(value, int):
            ids.add(value)
        elif isinstance(value, (list, tuple)):
            ids.update(v for v in value if isinstance(v, int))
    if not ids:
        raise ModelError("the model and tokenizer define no end-of-sequence token")
    return frozenset(ids)


def forward_options(model: Any) -> tuple[str, bool]:
    """How this transformers version's forward is called: the name of its cache argument
    ("cache" or "past_key_values"), and whether it takes `logits_to_keep`."""
    params = inspect.signature(base_model(model).forward).parameters
    return ("cache" if "cache" in params else "past_key_values"), "logits_to_keep" in params


def autocast_dtype(name: str | None) -> torch.dtype | None:
    """The dtype that `LocalModel(autocast=...)` names (None: no autocast)."""
    if name is not None and name not in ("bfloat16", "float16"):
        raise UsageError(f"autocast must be 'bfloat16' or 'float16', got {name!r}")
    return None if name is None else DTYPES[name]


def attention_backends(device: torch.device) -> contextlib.AbstractContextManager[Any]:
    """Scaled-dot-product attention without cuDNN on CUDA: cuDNN builds an execution plan per
    new shape, and a growing KV cache is a new shape every step (measured: 10 ms per attention
    call with cuDNN against well under 1 ms without, H200, torch 2.11)."""
    if device.type != "cuda":
        return contextlib.nullcontext()
    from torch.nn.attention import SDPBackend, sdpa_kernel

    return sdpa_kernel([SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH])


class eval_mode:
    """Eval mode for a block (no dropout), and back to train mode after it if the model was
    training: a trainer's model generates between optimizer steps."""

    def __init__(self, model: Any) -> None:
        self.model, self.was_training = model, model.training

    def __enter__(self) -> None:
        if self.was_training:
            self.model.eval()

    def __exit__(self, *exc: object) -> None:
        if self.was_training:
            self.model.train()


@contextlib.contextmanager
def generating(model: Any, device: torch.device, autocast: torch.dtype | None) -> Iterator[None]:
    """What a generation step runs under: inference mode, eval mode, this device's attention
    kernels, and autocast to `autocast` (None: off) without a weight-cast cache (CUDA graphs
    cast on every replay)."""
    with (
        torch.inference_mode(),
        eval_mode(model),
        attention_backends(device),
        torch.autocast(
            device.type, dtype=autocast or torch.bfloat16, enabled=autocast is not None, cache_enabled=False
        ),
    ):
        yield


_SURROGATE = re.compile("[\ud800-\udfff]")


def encodable(value: Any) -> Any:
    """`value` (text, or dicts and lists of it) with each lone surrogate replaced by U+FFFD,
    which a tokenizer can encode: JSON and Python strings hold lone surrogates (a model's reply
    saved by `rlvr gen`, a tool's output), and a fast tokenizer refuses them with a TypeError."""
    if isinstance(value, str):
        return _SURROGATE.sub("\ufffd", value)
    if isinstance(value, dict):
        return {encodable(k): encodable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [encodable(v) for v in value]
    return value
