"""The attention of LocalModel's slot decode step alone, one layer, on random tensors of a real
model's shapes: the step's `attend` (two batched matmuls and a float32 softmax, over the step's
additive mask) against two layouts of torch's `scaled_dot_product_attention` (sdpa), the
candidates to replace it: each KV head's query heads as its query length (`sdpa_step_layout`,
no expansion of K and V), and the query heads as heads with `enable_gqa` (`sdpa_gqa_heads`). On
CUDA each sdpa layout runs as torch picks, under the step's `attention_backends` (no cuDNN), and
under each backend told to. Alternated, several repeats:

    python benchmarks/bench_slot_attention.py --device cuda             # 256 rows, Qwen3 0.6B/1.7B heads
    python benchmarks/bench_slot_attention.py --device cuda --length 1024

Prints each variant's ms per call (median [min-max] over repeats), the bytes of keys and values
the call must read and the bandwidth that implies, and the largest difference from `attend`'s
output (the variants compute the same thing). `bench_scale.py`'s decode phase times the
captured step with each candidate swapped in (`device_ms_attention_*`).
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import statistics
import time
from typing import Any

import torch
import torch.nn.functional as F

from rlvr.clients.local_load import attention_backends
from rlvr.clients.local_step import attend, attend_cudnn, step_bias


def sdpa_step_layout(
    q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, bias: torch.Tensor, scaling: float
) -> torch.Tensor:
    """sdpa with each KV head's g query heads as its query length (the shapes `attend` gets)."""
    q = q.to(values.dtype)  # under autocast the rotary embedding leaves q in float32
    return F.scaled_dot_product_attention(q, keys, values, attn_mask=bias.to(q.dtype), scale=scaling)


def sdpa_gqa_heads(
    q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, bias: torch.Tensor, scaling: float
) -> torch.Tensor:
    """sdpa over kv * g query heads of one query each (`enable_gqa`)."""
    n, kv, g, d = q.shape
    q = q.to(values.dtype).reshape(n, kv * g, 1, d)
    out = F.scaled_dot_product_attention(q, keys, values, attn_mask=bias.to(q.dtype), scale=scaling, enable_gqa=True)
    return out.reshape(n, kv, g, d)


CANDIDATES = {"sdpa_step_layout": sdpa_step_layout, "sdpa_gqa_heads": sdpa_gqa_heads}
if torch.cuda.is_available():
    CANDIDATES["attend_cudnn"] = attend_cudnn  # sdpa_gqa_heads on cuDNN: the step's attention on CUDA
"""The sdpa layouts that could replace `attend` (bench_scale swaps each into the captured step)."""


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--rows", type=int, default=256)
    p.add_argument("--length", type=int, default=256, help="positions attended over (the step's span)")
    p.add_argument("--kv-heads", type=int, default=8)
    p.add_argument("--groups", type=int, default=2, help="query heads per KV head")
    p.add_argument("--head-dim", type=int, default=128)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--calls", type=int, default=50)
    args = p.parse_args()
    dev, dt = torch.device(args.device), torch.bfloat16
    n, kv, g, d, L = args.rows, args.kv_heads, args.groups, args.head_dim, args.length
    gen = torch.Generator(device=dev).manual_seed(0)
    q = torch.randn(n, kv, g, d, device=dev, dtype=dt, generator=gen)
    keys = torch.randn(n, kv, L, d, device=dev, dtype=dt, generator=gen)
    values = torch.randn(n, kv, L, d, device=dev, dtype=dt, generator=gen)
    pos = torch.randint(L // 4, L, (n,), device=dev, generator=gen)
    bias = step_bias(pos, L)
    scaling = d**-0.5
    base_name = "attend (matmuls)"
    variants: dict[str, Any] = {base_name: lambda: attend(q, keys, values, bias, scaling)}
    for label, fn in CANDIDATES.items():

        def run(fn: Any = fn, context: Any = contextlib.nullcontext) -> torch.Tensor:
            with context():
                return fn(q, keys, values, bias, scaling)

        variants[f"{label} (step's backends)"] = functools.partial(run, context=lambda: attention_backends(dev))
        if dev.type == "cuda":
            from torch.nn.attention import SDPBackend, sdpa_kernel

            variants[f"{label} (torch picks)"] = run
            for name, backend in (("efficient", SDPBackend.EFFICIENT_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION)):
                variants[f"{label}, {name}"] = functools.partial(run, context=lambda b=backend: sdpa_kernel(b))
    want = variants[base_name]().float()
    usable: dict[str, Any] = {}
    for name, fn in variants.items():
        try:
            err = (fn().float() - want).abs().max().item()
        except RuntimeError as exc:
            print(f"{name:36s} unavailable: {str(exc).splitlines()[0][:100]}")
            continue
        usable[name] = (fn, err)
    times: dict[str, list[float]] = {name: [] for name in usable}
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    for _ in range(args.repeats):
        for name, (fn, _err) in usable.items():
            fn()
            sync()
            t0 = time.perf_counter()
            for _ in range(args.calls):
                fn()
            sync()
            times[name].append(1e3 * (time.perf_counter() - t0) / args.calls)
    kv_bytes = 2 * n * kv * L * d * keys.element_size()
    print(
        f"{dev}, {n} rows x {kv} KV heads x {g} groups x {L} positions x {d}: keys + values {kv_bytes / 1e6:.0f} MB a call"
    )
    base = statistics.median(times[base_name])
    for name, ts in times.items():
        m = statistics.median(ts)
        print(
            f"  {name:36s} {m:7.3f} ms [{min(ts):.3f}-{max(ts):.3f}]  {kv_bytes / m / 1e6:7.0f} GB/s"
            f"  matmul/this {base / m:5.2f}x  max |diff| {usable[name][1]:.2e}"
        )


if __name__ == "__main__":
    main()
