"""The attention of LocalModel's slot decode step (`rlvr.clients.local_slots.attend`) alone,
one layer, on random tensors of a real model's shapes: the step's own way (two batched matmuls
and a float32 softmax with an additive mask) against torch's
`scaled_dot_product_attention` with the same mask (grouped-query heads as `enable_gqa`), per
backend torch picks or is told to use. Alternated, several repeats:

    python benchmarks/bench_slot_attention.py --device cuda             # 256 rows, Qwen3 0.6B/1.7B heads
    python benchmarks/bench_slot_attention.py --device cuda --length 1024

Prints each variant's ms per call (median [min-max] over repeats), the bytes of keys and values
the call must read and the bandwidth that implies, and the largest difference from the matmul
output (the variants compute the same thing).
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

import torch
import torch.nn.functional as F

from rlvr.clients.local_slots import attend


def sdpa_attention(
    q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, bias: torch.Tensor, scaling: float
) -> torch.Tensor:
    n, kv, g, d = q.shape
    out = F.scaled_dot_product_attention(
        q.reshape(n, kv * g, 1, d), keys, values, attn_mask=bias.to(q.dtype), scale=scaling, enable_gqa=True
    )
    return out.reshape(n, kv, g, d)


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
    mask = torch.arange(L, device=dev)[None, :] > pos[:, None]
    bias = torch.zeros(mask.shape, device=dev).masked_fill(mask, float("-inf"))[:, None, None, :]
    scaling = d**-0.5
    variants: dict[str, Any] = {"matmul (the step's)": lambda: attend(q, keys, values, bias, scaling)}
    variants["sdpa (torch picks)"] = lambda: sdpa_attention(q, keys, values, bias, scaling)
    if dev.type == "cuda":
        from torch.nn.attention import SDPBackend, sdpa_kernel

        for name, backend in (("efficient", SDPBackend.EFFICIENT_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION)):

            def run(backend: Any = backend) -> torch.Tensor:
                with sdpa_kernel(backend):
                    return sdpa_attention(q, keys, values, bias, scaling)

            variants[f"sdpa {name}"] = run
    want = variants["matmul (the step's)"]().float()
    usable: dict[str, Any] = {}
    for name, fn in variants.items():
        try:
            err = (fn().float() - want).abs().max().item()
        except RuntimeError as exc:
            print(f"{name:22s} unavailable: {str(exc).splitlines()[0][:100]}")
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
    base = statistics.median(times["matmul (the step's)"])
    for name, ts in times.items():
        m = statistics.median(ts)
        print(
            f"  {name:22s} {m:7.3f} ms [{min(ts):.3f}-{max(ts):.3f}]  {kv_bytes / m / 1e6:7.0f} GB/s"
            f"  matmul/this {base / m:5.2f}x  max |diff| {usable[name][1]:.2e}"
        )


if __name__ == "__main__":
    main()
