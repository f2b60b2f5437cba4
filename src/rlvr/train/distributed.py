"""Data-parallel plumbing: one process per GPU (torchrun / accelerate launch), or none at all.

`setup_distributed()` reads the launcher's environment (`WORLD_SIZE`, `RANK`, `LOCAL_RANK`):
without it (a plain `rlvr train`) it returns a single-process `Dist` whose collectives are
no-ops, so the training loop has one code path. With it, each process takes GPU `LOCAL_RANK`
(NCCL) or, without CUDA, the CPU (gloo).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as tdist

from rlvr.errors import UsageError


@dataclass
class Dist:
    """This process's place in the job, and the few collectives the trainer needs."""

    rank: int = 0
    world: int = 1
    local_rank: int = 0
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))

    @property
    def main(self) -> bool:
        """True on the process that logs, evaluates the summary and writes shared files."""
        return self.rank == 0

    @property
    def active(self) -> bool:
        return self.world > 1

    def barrier(self) -> None:
        if self.active:
            tdist.barrier()

    def sum(self, values: list[float]) -> list[float]:
        """Element-wise sum over ranks (float64)."""
        if not self.active:
            return list(values)
        t = torch.tensor(values, dtype=torch.float64, device=self._comm_device)
        tdist.all_reduce(t)
        return t.tolist()

    def max(self, value: int) -> int:
        if not self.active:
            return value
        t = torch.tensor([value], dtype=torch.long, device=self._comm_device)
        tdist.all_reduce(t, op=tdist.ReduceOp.MAX)
        return int(t.item())

    def gather(self, items: list[Any]) -> list[Any]:
        """Every rank's list, concatenated in rank order (picklable objects)."""
        if not self.active:
            return list(items)
        out: list[Any] = [None] * self.world
        tdist.all_gather_object(out, items)
        return [x for part in out for x in part]

    def shard(self, items: list[Any]) -> list[Any]:
        """This rank's contiguous share of `items` (len(items) must divide by world)."""
        per = len(items) // self.world
        return items[self.rank * per : (self.rank + 1) * per]

    @property
    def _comm_device(self) -> torch.device:
        return self.device if tdist.get_backend() == "nccl" else torch.device("cpu")

    def close(self) -> None:
        if self.active and tdist.is_initialized():
            tdist.destroy_process_group()


def setup_distributed(device_name: str | None = None) -> Dist:
    """This process's `Dist`. `device_name` (`cpu`, `cuda`, `cuda:1`; None = CUDA when
    available) picks the device; under a launcher, `cuda` means GPU `LOCAL_RANK`."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    local = int(os.environ.get("LOCAL_RANK", "0"))
    device = _pick_device(device_name, local, world)
    cuda = device.type == "cuda"
    if cuda:
        torch.cuda.set_device(device)
    if world > 1 and not tdist.is_initialized():
        if cuda:  # naming the device binds NCCL to it (no guessing from the rank)
            tdist.init_process_group(backend="nccl", device_id=device)
        else:
            tdist.init_process_group(backend="gloo")
    return Dist(rank=rank, world=world, local_rank=local, device=device)


def _pick_device(name: str | None, local: int, world: int) -> torch.device:
    if name is None:
        return torch.device(f"cuda:{local}" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(name)
    except RuntimeError:
        raise UsageError(f"device must be cpu, cuda or cuda:N, got {name!r}") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise UsageError(f"device {name!r} asks for CUDA, but torch sees no CUDA device; pass --device cpu")
    if device.type == "cuda" and device.index is None:
        return torch.device(f"cuda:{local}")
    if world > 1 and device.type == "cuda":
        raise UsageError(
            f"device {name!r} names one GPU, but {world} processes run: pass --device cuda (each takes its own)"
        )
    return device
