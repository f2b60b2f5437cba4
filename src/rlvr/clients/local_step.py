"""The parts of the slot decode step (`rlvr.clients.local_decode`): a layer's math before and
after its attention, the attention over the slot buffers, the logits and the sampler.

`EAGER` holds them as plain functions; `compiled_parts()` runs the same functions through
`torch.compile(dynamic=True)` (the modules are arguments, so every layer of every model shares
one graph per function, and the slot count is a dynamic size). `SlotDecoder.parts` is one or the
other, and `SlotDecoder.attention` is `attend_cudnn` (cuDNN's fused sdpa kernel, 1.07x the whole
run at Qwen3-0.6B shapes on an H100) where it runs, else `attend` (two batched matmuls and a
float32 softmax). The measurements behind each choice are in docs/benchmarks.md.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

from rlvr.clients.local_sampling import draw, row_key


def layer_first(
    layer: Any, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, rope: Any, dtype: torch.dtype
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """A layer's step up to its attention: q (n, heads, 1, d) with rotary embeddings, and the
    new key (n, kv, d) and value (n, kv, d) in the buffers' dtype. (The head size is read from
    the module, a constant when compiled: as an argument it would be a symbol, and Dynamo
    could tie it to the slot count.)"""
    attn, n, head_dim = layer.self_attn, x.shape[0], layer.self_attn.head_dim
    h = _rms_norm(layer.input_layernorm, x)
    q = attn.q_proj(h).view(n, 1, -1, head_dim)
    k = attn.k_proj(h).view(n, 1, -1, head_dim)
    v = attn.v_proj(h).view(n, 1, -1, head_dim)
    if getattr(attn, "q_norm", None) is not None:
        q, k = _rms_norm(attn.q_norm, q), _rms_norm(attn.k_norm, k)
    q, k = rope(q.transpose(1, 2), k.transpose(1, 2), cos, sin)  # (n, heads, 1, d)
    return q, k[:, :, 0].to(dtype), v[:, 0].to(dtype)


def layer_second(layer: Any, x: torch.Tensor, attended: torch.Tensor) -> torch.Tensor:
    """A layer's step after its attention (n, 1, heads * d): output projection, MLP, residuals."""
    x = x + layer.self_attn.o_proj(attended.to(x.dtype))
    return x + layer.mlp(_rms_norm(layer.post_attention_layernorm, x))


def logits_of(norm: Any, head: Any, x: torch.Tensor) -> torch.Tensor:
    """The step's float32 logits (n, V) from the last layer's output (n, 1, hidden)."""
    return head(_rms_norm(norm, x)[:, 0]).float()


def sample(
    logits: torch.Tensor, temps: torch.Tensor, seeds: torch.Tensor, counts: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Each slot's token and its logprob (`draw`, no top-p), keyed by its seed and count."""
    return draw(logits, temps, row_key(seeds, counts))


EAGER = (layer_first, layer_second, logits_of, sample)

COMPILE_BACKEND = "inductor"
"""torch.compile's backend for `compiled_parts` (tests on a CPU without a C++ build use another)."""

_COMPILED: list[Any] = []


def compiled_parts() -> tuple[Any, ...]:
    """`EAGER`'s functions through `torch.compile(dynamic=True)`, made once per process: the
    modules are arguments, so every layer of every model shares one graph per function (and the
    slot count is a dynamic size: one compile for all buckets). Compiled, the sampler's passes
    over the vocabulary fuse too (256 x 151,936 on an H200: 0.35 ms against 0.96 eager)."""
    if not _COMPILED:
        _COMPILED.extend(torch.compile(fn, dynamic=True, backend=COMPILE_BACKEND) for fn in EAGER)
    return tuple(_COMPILED)


def step_bias(pos: torch.Tensor, span: int) -> torch.Tensor:
    """The decode step's additive attention mask, (n, 1, 1, span) float32: 0 at the positions a
    row has written (<= its `pos`), -inf after. Every row sees position 0, so no row is masked
    entirely (a free slot's clamped `pos` may pass the span: it then sees all).

    >>> step_bias(torch.tensor([0, 2]), 4)[:, 0, 0].tolist()
    [[0.0, -inf, -inf, -inf], [0.0, 0.0, 0.0, -inf]]
    """
    after = torch.arange(span, device=pos.device)[None, :] > pos[:, None]
    return torch.zeros(after.shape, device=pos.device).masked_fill(after, float("-inf"))[:, None, None, :]


def attend(
    q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, bias: torch.Tensor, scaling: float
) -> torch.Tensor:
    """The decode step's attention: q (n, kv, g, d) against keys and values (n, kv, L, d) with
    an additive bias (n, 1, 1, L); two batched matmuls and a float32 softmax."""
    scores = torch.matmul(q, keys.transpose(-1, -2))  # (n, kv, g, L)
    probs = torch.softmax(scores.float() * scaling + bias, dim=-1).to(values.dtype)
    return torch.matmul(probs, values)


def attend_cudnn(
    q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, bias: torch.Tensor, scaling: float
) -> torch.Tensor:
    """`attend` by cuDNN's fused sdpa kernel, the kv * g query heads as heads of one query each
    (`enable_gqa`), whatever backends the caller allows. CUDA, bfloat16 or float16 only (see
    `cudnn_attention_works`). A new shape costs cuDNN a plan once; a captured graph's shapes
    are fixed."""
    n, kv, g, d = q.shape
    q = q.to(values.dtype).reshape(n, kv * g, 1, d)  # under autocast, rotary leaves q in float32
    with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
        out = torch.nn.functional.scaled_dot_product_attention(
            q, keys, values, attn_mask=bias.to(q.dtype), scale=scaling, enable_gqa=True
        )
    return out.reshape(n, kv, g, d)


def _rms_norm(norm: Any, x: torch.Tensor) -> torch.Tensor:
    """`norm(x)` for the llama/qwen `RMSNorm` (weight * (x / rms(x)) in float32, cast back
    before the weight), with torch's fused kernel: 2-3 kernels instead of 7."""
    eps = getattr(norm, "variance_epsilon", None)
    if eps is None:
        return norm(x)
    normed = torch.nn.functional.rms_norm(x.float(), (x.shape[-1],), eps=eps)
    return norm.weight * normed.to(x.dtype)
