"""Pushing the trained weights to a vLLM server after every optimizer step (`weight_sync`).

- **lora**: the adapters are saved to `RUN_DIR/vllm_adapters/step_N` and loaded on the server
  under a new name, `rlvr-lora-stepN`; the client generates with that name from then on and the
  previous adapter is unloaded. A new name each step (not a reload under one name) means the
  server's prefix cache, keyed by adapter, never serves the KV of an old adapter. The server
  must see the folder (same machine or a shared file system).
- **ipc** and **nccl**: vLLM's weight-transfer protocol (vLLM 0.22, `--weight-transfer-config`).
  Once: `GET /get_world_size`, then `POST /init_weight_transfer_engine` with the transport's
  `init_info`. Each step: `POST /start_weight_update`, `POST /update_weights` with the names,
  dtypes and shapes of every parameter (while the transport sends the tensors), `POST
  /finish_weight_update`, `POST /reset_prefix_cache`.

The transports are the separate piece (`TRANSPORTS`):

- `IpcTransport` (CUDA IPC): torch's own `reduce_tensor` handles of the trainer's parameters,
  pickled and base64-encoded into `update_info.ipc_handles_pickled`, keyed by the GPU's UUID.
  The server must run on the trainer's GPU (one worker) with
  VLLM_ALLOW_INSECURE_SERIALIZATION=1 to accept pickled handles.
- `NcclTransport`: the `init_info` and `update_info` vLLM's NCCL backend reads, but no sender:
  vLLM forms its weight-transfer group with its own rendezvous and NCCL wrapper
  (`StatelessProcessGroup`, `PyNcclCommunicator`), and rlvr does not import vLLM. `open` says
  so before any request reaches the server, which would otherwise wait in the rendezvous.

Only rank 0 talks to the server; the trainer waits at a barrier after each push.
"""

from __future__ import annotations

import asyncio
import base64
import pickle
import shutil
from pathlib import Path
from typing import Any, Protocol

import torch
from torch import nn

from rlvr.clients.openai import OpenAIClient
from rlvr.clients.vllm import VLLMServer
from rlvr.errors import TrainingError

LORA_PREFIX = "rlvr-lora-step"
"""Adapter names on the server: this prefix and the step whose weights they hold."""

Params = list[tuple[str, torch.Tensor]]


def parameters(model: nn.Module) -> Params:
    """(name, tensor) of every parameter, named as in the model's checkpoint (what vLLM's
    `load_weights` reads with `is_checkpoint_format`)."""
    return [(name, p.detach()) for name, p in model.named_parameters()]


def describe(params: Params) -> dict[str, Any]:
    """The part of `update_info` every backend shares.

    >>> describe([("w", torch.zeros(2, 3, dtype=torch.bfloat16))])
    {'names': ['w'], 'dtype_names': ['bfloat16'], 'shapes': [[2, 3]]}
    """
    return {
        "names": [name for name, _ in params],
        "dtype_names": [str(t.dtype).removeprefix("torch.") for _, t in params],
        "shapes": [list(t.shape) for _, t in params],
    }


# ---- transports ------------------------------------------------------------------------------


class Transport(Protocol):
    """How tensors travel beside the HTTP handshake (`update_weights` names what they are)."""

    backend: str
    """The name of vLLM's backend this transport talks to (`--weight-transfer-config`)."""

    def open(self, world_size: int, device: torch.device) -> dict[str, Any]:
        """The `init_info` for a server of `world_size` workers; raises `TrainingError`, before
        any request is sent, when this transport cannot work here."""
        ...

    def connect(self) -> None:
        """The trainer's side of the rendezvous (runs while `/init_weight_transfer_engine` waits)."""
        ...

    def update_info(self, params: Params) -> dict[str, Any]: ...

    def send(self, params: Params) -> None:
        """Send the tensors (runs while `/update_weights` waits for them)."""
        ...


class IpcTransport:
    """CUDA IPC handles in the HTTP request itself (see the module docstring)."""

    backend = "ipc"

    def __init__(self) -> None:
        self._shared: list[torch.Tensor] = []  # alive until the server has copied them

    def open(self, world_size: int, device: torch.device) -> dict[str, Any]:
        if device.type != "cuda":
            raise TrainingError(
                f"weight_sync = ipc shares CUDA memory with a vLLM server on the trainer's GPU, but the "
                f"trainer runs on {device}; use weight_sync = lora, or train on the server's GPU"
            )
        if world_size != 1:
            raise TrainingError(
                f"weight_sync = ipc sends handles to the trainer's GPU only, but the vLLM server has "
                f"{world_size} workers; serve with one GPU or use weight_sync = lora"
            )
        return {}

    def connect(self) -> None:
        return None

    def update_info(self, params: Params) -> dict[str, Any]:
        from torch.multiprocessing.reductions import reduce_tensor

        self._shared = [t.contiguous() for _, t in params]
        handles = []
        for t in self._shared:
            uuid = str(torch.cuda.get_device_properties(t.device).uuid)
            handles.append({uuid: reduce_tensor(t)})
        pickled = base64.b64encode(pickle.dumps(handles)).decode("ascii")
        return {**describe(params), "ipc_handles_pickled": pickled}

    def send(self, params: Params) -> None:
        return None  # the handles travelled in update_info


class NcclTransport:
    """vLLM's NCCL backend: its `init_info` and `update_info`, and no sender (module docstring)."""

    backend = "nccl"

    def __init__(self, master_address: str = "127.0.0.1", master_port: int = 29600) -> None:
        self.master_address, self.master_port = master_address, master_port

    def init_info(self, world_size: int) -> dict[str, Any]:
        """The trainer is rank 0 of a group of itself and the server's workers.

        >>> NcclTransport("10.0.0.1", 29600).init_info(2)
        {'master_address': '10.0.0.1', 'master_port': 29600, 'rank_offset': 1, 'world_size': 3}
        """
        return {
            "master_address": self.master_address,
            "master_port": self.master_port,
            "rank_offset": 1,
            "world_size": world_size + 1,
        }

    def open(self, world_size: int, device: torch.device) -> dict[str, Any]:
        raise TrainingError(
            "weight_sync = nccl cannot be set up: vLLM's NCCL weight-transfer group is formed by vLLM's own "
            "rendezvous and NCCL wrapper, and rlvr does not import vLLM, so it has no NCCL sender; use "
            "weight_sync = lora (LoRA adapters through a shared folder) or ipc (trainer on the server's GPU)"
        )

    def connect(self) -> None:
        raise TrainingError("weight_sync = nccl: no NCCL sender (see NcclTransport.open)")

    def update_info(self, params: Params) -> dict[str, Any]:
        return {**describe(params), "packed": False}

    def send(self, params: Params) -> None:
        raise TrainingError("weight_sync = nccl: no NCCL sender (see NcclTransport.open)")


TRANSPORTS: dict[str, type[Transport]] = {"ipc": IpcTransport, "nccl": NcclTransport}
"""The full-weight transports by `weight_sync` value."""


# ---- the two ways to sync ----------------------------------------------------------------------


class LoraSync:
    """Adapters saved to a folder and loaded on the server under a new name each step."""

    def __init__(self, server: VLLMServer, client: OpenAIClient, folder: Path, *, main: bool) -> None:
        self.server, self.client, self.folder, self.main = server, client, folder, main
        self.loaded: str | None = None

    async def setup(self, model: nn.Module) -> None:
        """Unload adapters an earlier run of rlvr left on the server (a resumed run reuses names)."""
        if self.main:
            for m in await self.server.models():
                if str(m.get("id", "")).startswith(LORA_PREFIX):
                    await self.server.unload_lora(str(m["id"]))

    async def push(self, model: nn.Module, step: int) -> None:
        name = f"{LORA_PREFIX}{step}"
        if self.main:
            where = (self.folder / f"step_{step:06d}").resolve()
            model.save_pretrained(where)  # type: ignore[operator]  # a peft model: the adapters only
            await self.server.load_lora(name, where)
            if self.loaded is not None and self.loaded != name:
                await self.server.unload_lora(self.loaded)
                shutil.rmtree(self.folder / f"step_{int(self.loaded.removeprefix(LORA_PREFIX)):06d}", True)
        self.loaded = name
        self.client.name = name


class TransferSync:
    """Full weights through vLLM's weight-transfer routes and a `Transport` (module docstring)."""

    def __init__(self, server: VLLMServer, transport: Transport, *, main: bool) -> None:
        self.server, self.transport, self.main = server, transport, main

    async def setup(self, model: nn.Module) -> None:
        if not self.main:
            return
        size = await self.server.world_size(self.transport.backend)
        device = next(model.parameters()).device
        init_info = self.transport.open(size, device)
        await asyncio.gather(
            self.server.init_weight_transfer(init_info, self.transport.backend),
            asyncio.to_thread(self.transport.connect),
        )

    async def push(self, model: nn.Module, step: int) -> None:
        if not self.main:
            return
        params = parameters(model)
        await self.server.start_weight_update()
        await asyncio.gather(
            self.server.update_weights(self.transport.update_info(params)),
            asyncio.to_thread(self.transport.send, params),
        )
        await self.server.finish_weight_update()
        await self.server.reset_prefix_cache()


WeightSync = LoraSync | TransferSync
