"""Packed rows through torch's own variable-length attention, without the flash_attn package.

    if mb.cu_seqlens is not None and unavailable(model) is None:   # a packed micro-batch, on CUDA
        with packed_attention(model):
            model(input_ids=mb.ids, position_ids=mb.position_ids, **varlen_kwargs(mb.cu_seqlens, mb.max_length))

A packed micro-batch is one row of several sequences. Under sdpa it needs a block-diagonal mask
over the whole row, which costs (sum of lengths)^2 attention against sum(length^2) padded, so
packing used to pay only with flash_attn installed (`flash_attention_2`). torch >= 2.10 ships
the same kind of kernel, `torch.nn.attention.varlen.varlen_attn` (FlashAttention, CUDA, fp16 /
bf16): this module registers it with transformers as the attention implementation
`rlvr_varlen`, and the training forward switches a mask-attention model (sdpa, eager) to it for
packed micro-batches only, so generation and padded forwards keep the model's own attention.
The sequences' boundaries come from the packer (`cu_seqlens`, computed on the host), passed as
the keyword arguments transformers already threads to every attention call for flash kernels.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
from collections.abc import Iterator
from typing import Any

import torch

NAME = "rlvr_varlen"
"""The attention implementation's name in transformers' registry (`AttentionInterface`)."""

REPLACED = ("sdpa", "eager")
"""The model attention this module stands in for on packed rows (flex_attention keeps its own
block mask)."""


def _config(model: Any) -> Any:
    return getattr(getattr(model, "module", model), "config", None)  # DDP wraps the model


def attention_implementation(model: Any) -> str:
    """The attention implementation transformers runs `model` with (eager where unset)."""
    return str(getattr(_config(model), "_attn_implementation", None) or "eager")


@functools.cache
def _kernel() -> Any:
    """torch's varlen_attn, or None where this torch has none."""
    try:
        from torch.nn.attention.varlen import varlen_attn
    except ImportError:
        return None
    return varlen_attn


def unavailable(model: Any) -> str | None:
    """Why packed rows of `model` cannot run through `rlvr_varlen` (None: they can)."""
    attn = attention_implementation(model)
    if attn not in REPLACED:
        return f"the model's attention is {attn!r}, not one of {REPLACED}"
    if _kernel() is None:
        return f"torch {torch.__version__} has no torch.nn.attention.varlen (torch >= 2.10)"
    try:
        param = next(model.parameters())
    except (StopIteration, AttributeError):
        return "the model has no parameters to place it"
    if param.device.type != "cuda":
        return f"varlen_attn runs on CUDA only; the model is on {param.device.type}"
    return None


_KERNEL: dict[str, Any] = {}
"""Filled by `register`: the kernel and which of its keyword arguments this torch has, read by
the attention function, which runs inside compiled blocks too (plain globals trace well there)."""


@functools.cache
def register() -> None:
    """Register `rlvr_varlen` with transformers (once a process)."""
    from transformers import AttentionInterface

    kernel = _kernel()
    if kernel is None:
        raise RuntimeError(f"torch {torch.__version__} has no torch.nn.attention.varlen (torch >= 2.10)")
    names = frozenset(inspect.signature(kernel).parameters)
    _KERNEL.update(
        fn=kernel,
        scale="scale" in names,
        window="window_size" in names,
        gqa="enable_gqa" in names,
        float32=False,  # FlashAttention: fp16 and bf16 only
    )
    AttentionInterface.register(NAME, varlen_attention_forward)


@contextlib.contextmanager
def packed_attention(model: Any, on: bool = True) -> Iterator[None]:
    """Within the block, `model`'s attention is `rlvr_varlen` (when `on`), then what it was."""
    if not on:
        yield
        return
    register()
    config = _config(model)
    saved = config._attn_implementation
    config._attn_implementation = NAME
    try:
        yield
    finally:
        config._attn_implementation = saved


def varlen_kwargs(cu_seqlens: torch.Tensor, max_length: int) -> dict[str, Any]:
    """The keyword arguments that carry a packed row's boundaries to every attention call (the
    names transformers uses for its flash kernels)."""
    return {
        "cu_seq_lens_q": cu_seqlens,
        "cu_seq_lens_k": cu_seqlens,
        "max_length_q": max_length,
        "max_length_k": max_length,
    }


def varlen_attention_forward(
    module: torch.nn.Module,
    query: torch.Tensor,  # (1, Hq, N, D)
    key: torch.Tensor,  # (1, Hkv, N, D)
    value: torch.Tensor,  # (1, Hkv, N, D)
    attention_mask: torch.Tensor | None,
    scaling: float | None = None,
    dropout: float = 0.0,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """transformers' attention interface over one packed row: causal within each sequence of
    `cu_seq_lens_q`, nothing across them. Returns (1, N, Hq, D) and no weights."""
    cu, longest = kwargs.get("cu_seq_lens_q"), kwargs.get("max_length_q")
    if cu is None or longest is None or query.shape[0] != 1:
        raise RuntimeError(f"{NAME} runs packed rows only (one row, cu_seq_lens_q given); got {tuple(query.shape)}")
    if dropout:  # (rlvr train keeps the model in eval mode; rlvr sft trains in train mode)
        raise RuntimeError(
            f"{NAME} has no attention dropout, and this model's is {dropout} in train mode: "
            "train without pack_sequences, or set the model's attention_dropout to 0"
        )
    dtype = query.dtype
    low = dtype  # the flash kernel takes fp16 / bf16 only: float32 runs as autocast's dtype, else bf16
    if dtype == torch.float32 and not _KERNEL["float32"]:
        low = torch.get_autocast_dtype("cuda") if torch.is_autocast_enabled("cuda") else torch.bfloat16
    q, k, v = (t[0].transpose(0, 1).to(low) for t in (query, key, value))  # (N, H, D)
    options: dict[str, Any] = {"window_size": (-1, 0)} if _KERNEL["window"] else {"is_causal": True}
    if scaling is not None and _KERNEL["scale"]:
        options["scale"] = scaling
    elif scaling is not None:  # a kernel without `scale` scales by D ** -0.5 itself
        q = q * (scaling * q.shape[-1] ** 0.5)
    if k.shape[1] != q.shape[1]:  # grouped-query attention
        if _KERNEL["gqa"]:
            options["enable_gqa"] = True
        else:
            k, v = (t.repeat_interleave(q.shape[1] // t.shape[1], dim=1) for t in (k, v))
    out = _KERNEL["fn"](q, k, v, cu, cu, longest, longest, **options)  # (N, Hq, D)
    return out.to(dtype).unsqueeze(0), None
