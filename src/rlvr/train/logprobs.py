"""The training forward: per-token log-probs (and entropy) of a micro-batch under the policy.

    logp, ent = micro_batch_logprobs(policy, mb, temperature, entropy=True)   # (B, T-1) each

- Log-probs divide the logits by the sampling temperature: the policy trained is the one the
  rollouts were sampled from (LocalModel reports logprobs of `log_softmax(logits / T)` too).
- The output head runs only where the loss looks (targets with loss mask 1), in chunks of about
  `CHUNK_ELEMENTS` logits, each recomputed in the backward pass instead of kept: float32
  (B, T, V) logits never exist at once. With Qwen's vocabulary (151,936) a chunk is 441
  tokens, 256 MiB; full logits of 8 x 1,024 tokens would be 5 GiB, more in the backward.
  The hidden states come from the model's own forward (a hook on its output head hands them
  over and gives the head nothing to do), so DDP and LoRA wrappers work unchanged. Elsewhere
  (mask 0) log-probs and entropy are 0: no loss or statistic reads them.
- Models whose logits are not just the head's output (`LOGIT_KNOBS`: Gemma's soft-capping,
  Cohere's scale, Granite's divisor) take the full-logits path, as do models without an
  output embedding and models sharded by FSDP2 (the head's weight is a shard outside the
  model's own forward).
- A packed micro-batch (`MicroBatch.positions`) is one row of several sequences, positions
  restarting at each; the attention kernel keeps them apart (`packing_unsupported` says where
  the installed transformers cannot). On CUDA with torch >= 2.10, a model with sdpa or eager
  attention runs packed rows through torch's varlen kernel instead of a block mask
  (`rlvr.train.varlen`).
- `activation_checkpointing` recomputes each transformer block in the backward pass instead of
  keeping its activations, whatever the model's train/eval mode (rlvr keeps it in eval mode).
- `compiled_blocks` runs each transformer block through `torch.compile` (dynamic shapes), which
  fuses the many small elementwise kernels of an eager block (norms, rotary embeddings, the
  MLP's gate, autocast's casts): at 1.7B on an H200 they were half the update's device time
  and kept the GPU waiting on the host (docs/benchmarks.md). Compiled once per block class (the
  blocks share one graph) and kept for the next updates; generation never sees it.
"""

from __future__ import annotations

import contextlib
import functools
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch import nn
from torch.distributed.tensor import DTensor
from torch.utils.checkpoint import checkpoint

from rlvr.errors import UsageError
from rlvr.train.sequences import MicroBatch
from rlvr.train.varlen import attention_implementation, packed_attention, unavailable, varlen_kwargs

CHUNK_ELEMENTS = 2**26
"""Logits per chunk of the output head (float32: 256 MiB); 0 = no chunks (full logits)."""

VARLEN_ATTENTION = ("flash_attention_2", "flash_attention_3", "flash_paged")
"""Attention implementations that run packed rows as separate sequences (cu_seqlens), no mask."""

LOGIT_KNOBS = ("final_logit_softcapping", "logit_scale", "logits_scaling", "output_multiplier_scale")
"""Config fields of architectures that change the logits after the head (Gemma 2/3, Cohere,
Granite...): those models take the full-logits path."""

MASK_ATTENTION = ("sdpa", "eager", "flex_attention")
"""Attention implementations that keep packed sequences apart with a block-diagonal mask."""


# ---- log-probs -------------------------------------------------------------------------------


def micro_batch_logprobs(
    model: Any, mb: MicroBatch, temperature: float, *, entropy: bool = False, chunk_elements: int | None = None
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """log pi(target | context) for each target of `mb` (B, T-1), 0 where its mask is 0; and
    the entropy there (B, T-1), without gradient, when asked."""
    rows, cols = mb.mask.shape
    flat = (mb.cpu_mask.reshape(-1) > 0).nonzero().squeeze(1)  # on the host: no device wait
    empty = flat.numel() == 0
    if empty:  # still use every weight (zero gradient), so that DDP sees all of them
        flat = torch.zeros(1, dtype=torch.long)
    flat = flat.to(mb.mask.device, non_blocking=True)
    if mb.positions is None:  # right-padded rows: target t of row b follows input b * T + t
        at = flat // cols * (cols + 1) + flat % cols
    else:
        at = mb.positions.reshape(-1)[flat]
    targets = mb.ids.reshape(-1)[at + 1]
    size = CHUNK_ELEMENTS if chunk_elements is None else chunk_elements
    head = _head(model) if size > 0 else None
    varlen = mb.cu_seqlens is not None and unavailable(model) is None  # packed, through torch's varlen kernel
    if head is not None:
        with packed_attention(model, varlen):
            hidden = _hidden_states(model, mb, head, varlen)
        weight: torch.Tensor = head.weight  # type: ignore[assignment]  # (V, H)
        chunk = max(1, size // weight.shape[0])
        logp, ent = _chunked(head, hidden.reshape(-1, hidden.shape[-1])[at], targets, temperature, entropy, chunk)
    else:
        with packed_attention(model, varlen):
            logits = model(**_inputs(mb, varlen)).logits[:, : mb.ids.shape[1]]
        logp, ent = _logprobs(logits.reshape(-1, logits.shape[-1])[at], targets, temperature, entropy)
    if empty:
        logp, ent = logp * 0, None if ent is None else ent * 0
    out = logp.new_zeros(rows * cols).index_put((flat,), logp).view(rows, cols)
    if ent is None:
        return out, None
    return out, ent.new_zeros(rows * cols).index_put((flat,), ent).view(rows, cols)


def _inputs(mb: MicroBatch, varlen: bool = False) -> dict[str, Any]:
    """The model's inputs; with `varlen`, a packed row's boundaries too (`rlvr.train.varlen`).
    Inside `compiled_blocks`, a padded micro-batch without padding gets one pad column after its
    last (attention 0, after every real token, so no token sees it; callers cut its outputs
    off): transformers gives the blocks no mask at all where nothing is padded, and a compiled
    block would compile a second graph for that, in whichever step first has such a micro-batch."""
    if mb.positions is not None:
        extra = varlen_kwargs(mb.cu_seqlens, mb.max_length) if varlen and mb.cu_seqlens is not None else {}
        return {"input_ids": mb.ids, "position_ids": mb.position_ids, "use_cache": False, **extra}
    ids, attention = mb.ids, mb.attention
    if _ALWAYS_MASKED and mb.n_tokens == ids.numel():  # counted on the host: no device wait
        ids = torch.nn.functional.pad(ids, (0, 1), value=0)
        attention = torch.nn.functional.pad(attention, (0, 1), value=0)
    return {"input_ids": ids, "attention_mask": attention, "use_cache": False}


def _head(model: Any) -> nn.Module | None:
    """The output head, when the logits are its output and nothing more."""
    inner = getattr(model, "module", model)  # DDP
    config = getattr(inner, "config", None)
    if any(getattr(config, knob, None) not in (None, 1.0, 0.0) for knob in LOGIT_KNOBS):
        return None
    get = getattr(inner, "get_output_embeddings", None)
    head = get() if get is not None else None
    weight = getattr(head, "weight", None)
    if not isinstance(head, nn.Module) or not isinstance(weight, torch.Tensor):
        return None
    # FSDP2 (`sharding = fsdp`): the head's weight is a shard, whole only inside the model's own
    # forward; calling the head outside it would mix shards and tensors, so take full logits
    return None if isinstance(weight, DTensor) else head


def _hidden_states(model: Any, mb: MicroBatch, head: nn.Module, varlen: bool = False) -> torch.Tensor:
    """The final hidden states (R, S, H): the model's forward, with its output head handed
    zero positions (the hook keeps what it was given)."""
    seen: list[torch.Tensor] = []

    def take(module: nn.Module, args: tuple[Any, ...]) -> tuple[Any, ...]:
        seen.append(args[0])
        return (args[0][..., :0, :], *args[1:])

    hook = head.register_forward_pre_hook(take)
    inputs = _inputs(mb, varlen)
    try:
        model(**inputs)
    finally:
        hook.remove()
    if len(seen) != 1 or seen[0].shape[:-1] != inputs["input_ids"].shape:
        raise RuntimeError(
            f"the output head saw {[tuple(s.shape) for s in seen]}, not the hidden states of every input"
        )
    return seen[0][:, : mb.ids.shape[1]]


def _chunked(
    head: nn.Module, hidden: torch.Tensor, targets: torch.Tensor, temperature: float, entropy: bool, chunk: int
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Log-probs (M,) of `targets` after `hidden` (M, H), `chunk` rows of logits at a time;
    with gradient, each chunk's logits are recomputed in the backward pass, not kept."""
    keep = torch.is_grad_enabled() and hidden.requires_grad
    logps, ents = [], []
    for start in range(0, hidden.shape[0], chunk):
        h, t = hidden[start : start + chunk], targets[start : start + chunk]
        if keep:
            lp, en = checkpoint(_head_logprobs, head, h, t, temperature, entropy, use_reentrant=False)
        else:
            lp, en = _head_logprobs(head, h, t, temperature, entropy)
        logps.append(lp)
        ents.append(en)
    if len(logps) == 1:
        return logps[0], ents[0] if entropy else None
    return torch.cat(logps), torch.cat(ents) if entropy else None


def _head_logprobs(
    head: nn.Module, hidden: torch.Tensor, targets: torch.Tensor, temperature: float, entropy: bool
) -> tuple[torch.Tensor, torch.Tensor]:
    lp, en = _logprobs(head(hidden), targets, temperature, entropy)
    return lp, lp.new_zeros(0) if en is None else en


def _logprobs(
    logits: torch.Tensor, targets: torch.Tensor, temperature: float, entropy: bool
) -> tuple[torch.Tensor, torch.Tensor | None]:
    logits = logits.float()  # (M, V)
    if temperature != 1.0:
        logits = logits / temperature
    logz = torch.logsumexp(logits, dim=-1)  # (M,)
    logp = logits.gather(-1, targets[:, None]).squeeze(-1) - logz  # (M,)
    ent = None
    if entropy:
        with torch.no_grad():
            ent = logz - (logits.softmax(-1) * logits).sum(-1)  # (M,)
    return logp, ent


# ---- packing ---------------------------------------------------------------------------------


def packing_unsupported(model: Any) -> str | None:
    """Why packed rows would not keep their sequences apart in this model (None: they would)."""
    attn = attention_implementation(model)
    if attn in VARLEN_ATTENTION or "flash" in attn or unavailable(model) is None:
        return None
    if attn not in MASK_ATTENTION:
        return f"attention implementation {attn!r} has no packed-sequence support"
    try:
        from transformers.masking_utils import find_packed_sequence_indices  # noqa: F401
    except ImportError:
        import transformers

        return (
            f"transformers {transformers.__version__} builds no block mask from position_ids for {attn!r} "
            "attention (it needs transformers >= 4.53, or flash_attention_2)"
        )
    return None


def packs_by_default(model: Any) -> bool:
    """`pack_sequences = None`: pack only where attention runs varlen (no mask). A mask over a
    packed row costs (sum of lengths)^2 attention, against sum(length^2) padded."""
    attn = attention_implementation(model)
    return attn in VARLEN_ATTENTION or ("flash" in attn and packing_unsupported(model) is None)


_WARNED: set[str] = set()


def should_pack(model: Any, pack_sequences: bool | None) -> bool:
    """Whether micro-batches are packed: `pack_sequences`, or by the attention kernel when None;
    padded rows, with a warning once, where packing was asked for but cannot work."""
    if pack_sequences is None:
        return packs_by_default(model)
    why = packing_unsupported(model) if pack_sequences else None
    if why is not None and why not in _WARNED:
        _WARNED.add(why)
        warnings.warn(f"pack_sequences: {why}; training on padded micro-batches instead", RuntimeWarning, stacklevel=3)
    return pack_sequences and why is None


# ---- activation checkpointing ----------------------------------------------------------------


@contextlib.contextmanager
def activation_checkpointing(model: Any, on: bool = True) -> Iterator[None]:
    """Within the block, every transformer block of `model` (the longest `nn.ModuleList`)
    keeps only its inputs for the backward pass and recomputes the rest there."""
    found = blocks(model, "gradient_checkpointing") if on else []
    with _forwards_replaced(found, lambda b: functools.partial(_checkpointed, b.forward)):
        yield


def _checkpointed(forward: Any, *args: Any, **kwargs: Any) -> Any:
    if not torch.is_grad_enabled():
        return forward(*args, **kwargs)
    return checkpoint(forward, *args, use_reentrant=False, **kwargs)


# ---- compiled blocks -------------------------------------------------------------------------

_ALWAYS_MASKED = False
"""Inside `compiled_blocks`: every padded micro-batch reaches the blocks with a mask (`_inputs`)."""

_COMPILED: dict[type, Any] = {}
"""Each block class's forward through torch.compile, kept across updates (compiling again would
cost each step). Per class, not per block: the blocks of a model share one graph (their weights
are its inputs), and nothing here refers to a block, so a deep copy of a model runs its own
weights and a discarded model is freed."""


@contextlib.contextmanager
def compiled_blocks(model: Any, on: bool = True) -> Iterator[None]:
    """Within the block, every transformer block of `model` (the longest `nn.ModuleList`) runs
    its class's forward through `torch.compile(dynamic=True)`; outside it, eagerly as before.
    Enter it before `activation_checkpointing`, which then recomputes the compiled forward.
    Micro-batches without padding get one pad column inside it (`_inputs`), so that the blocks
    compile once, not once more for a call without an attention mask."""
    global _ALWAYS_MASKED
    with _forwards_replaced(blocks(model, "compile_blocks") if on else [], _compiled):
        saved, _ALWAYS_MASKED = _ALWAYS_MASKED, on
        try:
            yield
        finally:
            _ALWAYS_MASKED = saved


def _compiled(block: nn.Module) -> Any:
    kind = type(block)
    if kind not in _COMPILED:
        _COMPILED[kind] = torch.compile(kind.forward, dynamic=True)
    return functools.partial(_COMPILED[kind], block)


# ---- the blocks ------------------------------------------------------------------------------


@contextlib.contextmanager
def _forwards_replaced(blocks: list[nn.Module], make: Callable[[nn.Module], Any]) -> Iterator[None]:
    """Within the block, each of `blocks` runs `make(block)` as its forward; after it, what
    it ran before (its class's forward, or an earlier replacement)."""
    saved = [(block, block.__dict__.get("forward")) for block in blocks]
    for block, _ in saved:
        block.forward = make(block)
    try:
        yield
    finally:
        for block, forward in saved:
            if forward is None:
                del block.forward
            else:
                block.forward = forward


def blocks(model: Any, option: str) -> list[nn.Module]:
    """The transformer blocks: the longest `nn.ModuleList` of `model`; a UsageError naming
    `option` where there is none (the option would otherwise do nothing, silently)."""
    lists: list[nn.ModuleList] = [m for m in model.modules() if isinstance(m, nn.ModuleList)]
    found = list(max(lists, key=lambda m: len(list(m)))) if lists else []
    if not found:
        raise UsageError(
            f"{option}: {type(model).__name__} has no transformer blocks (no non-empty nn.ModuleList) to apply it to; "
            f"turn {option} off"
        )
    return found
