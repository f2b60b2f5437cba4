"""What the hardware could do at best: peak bf16 FLOP/s and memory bandwidth of known GPUs, and
the training FLOPs of a model, for model FLOPs utilisation (MFU) and bandwidth floors.

    mfu = flops_per_token * tokens / seconds / peak.flops

- Peaks are the vendors' dense bfloat16 tensor-core numbers (no sparsity), whatever dtype a run
  actually uses; a GPU not in `PEAKS` (and every CPU) has no peak, so no MFU is reported.
- Training FLOPs follow the usual 6 x parameters per token (forward 2, backward 4), counting
  the output head (tied or not) but not an untied input embedding (a lookup, no FLOPs), and not
  attention's score/value products, nor extra no-grad forwards (old or reference log-probs).
  With LoRA the frozen weights get no weight gradient, so 6 x parameters overstates the work.

This module imports torch only inside the functions that take a model or a device.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Peak:
    """Peak throughput of one device."""

    name: str
    """The entry of `PEAKS` that matched."""
    flops: float
    """Dense bfloat16 FLOP/s."""
    bandwidth: float
    """Memory bandwidth, bytes/s."""


PEAKS: tuple[tuple[str, float, float], ...] = (
    # (substring of the device name, dense bf16 FLOP/s, bytes/s); first match wins
    ("H100 PCIe", 756e12, 2.0e12),
    ("H100 NVL", 835e12, 3.9e12),
    ("H100", 989e12, 3.35e12),  # SXM, "H100 80GB HBM3"
    ("GH200", 989e12, 4.0e12),
    ("H200", 989e12, 4.8e12),
    ("H20", 148e12, 4.0e12),
    ("B200", 2250e12, 8.0e12),
    ("A100-SXM4-80GB", 312e12, 2.04e12),
    ("A100 80GB PCIe", 312e12, 1.94e12),
    ("A100", 312e12, 1.555e12),  # 40GB
    ("L40S", 362e12, 0.864e12),
    ("A10G", 70e12, 0.6e12),
)


def peak_for(name: str) -> Peak | None:
    """The peak of the device called `name` (as `torch.cuda.get_device_name` gives it).

    >>> peak_for("NVIDIA H100 80GB HBM3")
    Peak(name='H100', flops=989000000000000.0, bandwidth=3350000000000.0)
    >>> peak_for("NVIDIA H200").bandwidth
    4800000000000.0
    >>> peak_for("cpu") is None
    True
    """
    for key, flops, bandwidth in PEAKS:
        if key.lower() in name.lower() and not (key == "H20" and "H200" in name):
            return Peak(key, flops, bandwidth)
    return None


def device_peak(device: Any) -> Peak | None:
    """The peak of a torch device (None for a CPU or an unknown GPU)."""
    import torch

    device = torch.device(device)
    if device.type != "cuda" or not torch.cuda.is_available():
        return None
    return peak_for(torch.cuda.get_device_name(device))


def training_flops_per_token(model: Any) -> float:
    """6 x the parameters a token's forward multiplies by (see the module docstring); tied
    embeddings count once, an untied input embedding not at all."""
    inner = getattr(model, "module", model)
    params = {id(p): p.numel() for p in inner.parameters()}
    get_input = getattr(inner, "get_input_embeddings", None)
    get_output = getattr(inner, "get_output_embeddings", None)
    embed = get_input() if get_input is not None else None
    head = get_output() if get_output is not None else None
    if embed is not None and (head is None or head.weight is not embed.weight):
        params.pop(id(embed.weight), None)
    return 6.0 * sum(params.values())


def memory_metrics(device: Any) -> dict[str, float]:
    """`memory/cuda_peak_gib` (the most the allocator held in tensors since the last call) and
    `memory/cuda_reserved_gib` (what it holds from the driver now, cached blocks included), then a
    new peak count begins; {} off CUDA. Rollouts on a worker thread (overlap) count too."""
    import torch

    device = torch.device(device)
    if device.type != "cuda" or not torch.cuda.is_available():
        return {}
    gib = float(2**30)
    out = {
        "memory/cuda_peak_gib": torch.cuda.max_memory_allocated(device) / gib,
        "memory/cuda_reserved_gib": torch.cuda.memory_reserved(device) / gib,
    }
    torch.cuda.reset_peak_memory_stats(device)
    return out
