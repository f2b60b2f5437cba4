"""How the trained model is spread over the processes of a job: whole on each (DDP) or
sharded (FSDP2), and what that changes for generation, gradients and checkpoints.

    policy = wrap(model, dist, sharding="fsdp", bf16=True)   # before the optimizer is built
    with full_weights(model):                                # around every generation
        rollouts = ...

- `ddp` (the default): every process holds the whole model, its gradients and its AdamW state
  (16 bytes a parameter in float32); DDP all-reduces the gradients after the last micro-batch.
- `fsdp`: torch.distributed's `fully_shard` (FSDP2) on every decoder layer and on the root, so
  each of N processes keeps 1/N of the float32 weights, gradients and AdamW state (16/N bytes a
  parameter). A layer's weights are all-gathered for its forward and again for its backward;
  its gradients are reduce-scattered after every micro-batch, so they stay sharded (no
  full-size accumulation as DDP's `no_sync` would need). With `bf16`, the all-gathered weights
  are bfloat16 (`MixedPrecisionPolicy`; the sharded master weights stay float32) and gradients
  are reduced in float32.
- One process: `wrap` returns the model itself whatever `sharding` says (nothing to shard).
- Generation under FSDP (`full_weights`): each process plays its own rollouts, so processes run
  different numbers of forward passes, and the per-layer all-gathers of a sharded forward would
  wait for each other forever. So before generating, every process all-gathers the whole model
  once and keeps it (`unshard`, `set_reshard_after_forward(False)`): forward passes then make no
  collective call, and LocalModel (its KV cache, its static slots and CUDA graphs) sees ordinary
  tensors. Afterwards the full copy is freed. Cost: the whole model at the gathered dtype
  (bf16: 2 bytes a parameter) on each GPU while generating.
- Saving under FSDP: the full state dict is gathered to rank 0's CPU and written with
  `save_pretrained` (an ordinary model folder, `from_pretrained` loads it); the optimizer state
  is written sharded by torch.distributed.checkpoint, each process its own part, and read back
  the same way (`save_optimizer`, `load_optimizer`), so no process ever holds all of it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn

from rlvr.errors import UsageError
from rlvr.train.distributed import Dist


def wrap(model: nn.Module, dist: Dist, sharding: str, *, bf16: bool = False, trainable: bool = True) -> Any:
    """What the update runs forward and backward: `model` under DDP, or `model` itself sharded in
    place with FSDP2 (`sharding = "fsdp"`), or `model` alone in a single process. A frozen model
    (`trainable=False`, the KL reference) is only sharded, never wrapped in DDP."""
    if not dist.active:
        return model
    if sharding == "fsdp":
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

        policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32) if bf16 else None
        kwargs: dict[str, Any] = {"mp_policy": policy} if policy is not None else {}
        for layer in decoder_layers(model):
            fully_shard(layer, **kwargs)
        fully_shard(model, **kwargs)  # the rest: embeddings, final norm, output head
        return model
    if not trainable:
        return model
    from torch.nn.parallel import DistributedDataParallel

    return DistributedDataParallel(model, device_ids=[dist.device.index] if dist.device.type == "cuda" else None)


def decoder_layers(model: nn.Module) -> list[nn.Module]:
    """The repeated blocks of a transformers causal LM (`model.model.layers` for Llama, Qwen,
    Mistral ...), each sharded on its own so that one is gathered at a time."""
    layers = getattr(getattr(model, "model", None), "layers", None)
    if not isinstance(layers, nn.ModuleList) or not len(layers):
        raise UsageError(
            f"sharding = fsdp found no decoder layers in {type(model).__name__} (expected model.model.layers); "
            "use sharding = ddp"
        )
    return list(layers)


def is_sharded(model: Any) -> bool:
    from torch.distributed.fsdp import FSDPModule

    return isinstance(model, FSDPModule)


@contextlib.contextmanager
def full_weights(model: Any) -> Iterator[None]:
    """Every weight whole on this process for the duration (generation); nothing to do unless
    `model` is sharded. Every process must enter together (it all-gathers); leaving is local."""
    if not is_sharded(model):
        yield
        return
    from torch.distributed.fsdp import FSDPModule

    parts = [m for m in model.modules() if isinstance(m, FSDPModule)]
    model.set_reshard_after_forward(False)  # recursive: no part frees its weights after a forward
    for part in parts:
        part.unshard()
    try:
        yield
    finally:
        for part in parts:
            part.reshard()
        model.set_reshard_after_forward(True)


def no_sync(policy: Any) -> contextlib.AbstractContextManager[Any]:
    """Accumulate this micro-batch's gradient without communicating: DDP's `no_sync`. FSDP2
    reduce-scatters every micro-batch instead (its gradients stay sharded), so: nothing."""
    return policy.no_sync() if hasattr(policy, "no_sync") else contextlib.nullcontext()


def clip_grad_norm(params: Sequence[torch.Tensor], max_norm: float) -> torch.Tensor:
    """`clip_grad_norm_`, its total norm as a plain tensor (sharded parameters give a DTensor)."""
    norm = torch.nn.utils.clip_grad_norm_(params, max_norm)
    full = getattr(norm, "full_tensor", None)
    return full() if full is not None else norm


# ---- checkpoints -----------------------------------------------------------------------------


def full_state_dict(model: Any) -> dict[str, Any] | None:
    """The whole model's weights on rank 0's CPU, for `save_pretrained(state_dict=...)` (every
    process must call it; the others get an empty dict); None when `model` is not sharded (its
    own `state_dict` is whole)."""
    if not is_sharded(model):
        return None
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    return get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))


def save_optimizer(model: Any, optimizer: torch.optim.Optimizer, path: Path) -> None:
    """Write the sharded optimizer state to the folder `path` (every process writes its part)."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict

    dcp.save({"optimizer": get_optimizer_state_dict(model, optimizer)}, checkpoint_id=str(path))


def load_optimizer(model: Any, optimizer: torch.optim.Optimizer, path: Path) -> None:
    """Read back what `save_optimizer` wrote (every process reads its part; the number of
    processes may differ from the run that wrote it)."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict, set_optimizer_state_dict

    state = {"optimizer": get_optimizer_state_dict(model, optimizer)}  # the layout to fill
    dcp.load(state, checkpoint_id=str(path))
    set_optimizer_state_dict(model, optimizer, optim_state_dict=state["optimizer"])
