"""Admission over static KV slots: requests prefilled through the slot decode step's own layer
functions, their keys and values written straight into their slots.

`SlotBatch.admit` (rlvr.clients.local_slots) gives each joiner a slot, copies the kept keys and
values of its prompt's reused prefix into it (`copy_prefixes`: one copy for all joiners), then
`prefill` runs the rest of every joiner's prompt through the model at once:

- the projections, norms and MLPs run on the new tokens packed end to end (no padding: a row
  with 5 new tokens costs 5 tokens, whatever the longest has), with `rlvr.clients.local_step`'s
  `layer_first` and `layer_second`, each token as one row of the decode step;
- each layer writes its new keys and values at their positions in their slots (one indexed
  write for all tokens), then attends, row by row padded to the longest new part, over its
  slot's positions up to each token's own: the reused prefix and the new tokens before it,
  with scaled-dot-product attention under a boolean mask built once per admission;
- the logits of each row's last token give its first sampled token.

No transformers forward, cache object or mask is built per request, and nothing is copied out
of a cache afterwards: what the step will read is what the prefill wrote. The tokens are the
transformers forward's to float rounding (tests/test_local_prefill.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from rlvr.clients.local_prefix import KV
from rlvr.clients.local_step import layer_first, layer_second, logits_of

if TYPE_CHECKING:
    from rlvr.clients.local_decode import SlotDecoder


def copy_prefixes(decoder: SlotDecoder, slots: list[int], kept: list[KV | None]) -> None:
    """Copy each row's kept keys and values (layers, kv heads, m, head dim) to positions
    [0, m) of its slot: one concatenation and one indexed write for all rows, keys and values each."""
    rows = [(s, kv) for s, kv in zip(slots, kept) if kv is not None and kv[0].shape[2]]
    if not rows:
        return
    lengths = torch.tensor([kv[0].shape[2] for _, kv in rows])
    at, pos = _spread(torch.tensor([s for s, _ in rows]), lengths, torch.zeros_like(lengths))
    at, pos = at.to(decoder.device), pos.to(decoder.device)
    for buffers, part in ((decoder.keys, 0), (decoder.values, 1)):
        source = torch.cat([kv[part] for _, kv in rows], dim=2)  # (layers, kv, sum m, d)
        buffers[:, at, :, pos] = source.permute(2, 0, 1, 3).to(decoder.dtype)


def prefill(decoder: SlotDecoder, slots: list[int], suffixes: list[list[int]], starts: list[int]) -> torch.Tensor:
    """Run each row's `suffixes[i]` (at positions starts[i] onward, after the keys and values
    already in positions [0, starts[i]) of slot `slots[i]`) through the model, writing every
    layer's keys and values into the slots. Returns the float32 logits (rows, V) of each row's
    last token. Every suffix holds at least one token."""
    device, core = decoder.device, decoder.core
    rows, lengths = len(suffixes), torch.tensor([len(s) for s in suffixes])
    width, total = int(lengths.max()), int(lengths.sum())
    span = max(a + len(s) for a, s in zip(starts, suffixes))  # the positions attended over
    # per packed token (each one a row of the decode step): its id, its place in the (rows, width)
    # padding of the attention, its slot and its position; one copy to the device
    slots_t, starts_t = torch.tensor(slots), torch.tensor(starts)
    slot_of, pos = _spread(slots_t, lengths, starts_t)
    flat = torch.repeat_interleave(torch.arange(rows) * width - starts_t, lengths) + pos
    tokens = torch.tensor([t for s in suffixes for t in s])
    ids, flat, slot_of, pos = torch.stack([tokens, flat, slot_of, pos]).to(device)
    at, first, last = torch.stack([slots_t, starts_t, lengths.cumsum(0) - 1]).to(device)  # per row
    query_pos = first[:, None] + torch.arange(width, device=device)[None, :]  # (the padding's are unused)
    allowed = (torch.arange(span, device=device)[None, None, :] <= query_pos[:, :, None])[:, None]
    x = core.embed_tokens(ids[:, None])  # (total, 1, hidden): each token a row of the decode step
    cos, sin = core.rotary_emb(x, pos[:, None])
    heads, kv_heads, d = decoder.q_heads, decoder.kv_heads, decoder.head_dim
    groups = heads // kv_heads
    for i, layer in enumerate(core.layers):
        q, k, v = layer_first(layer, x, cos, sin, decoder.rope, decoder.dtype)
        keys, values = decoder.keys[i], decoder.values[i]
        keys[slot_of, :, pos] = k
        values[slot_of, :, pos] = v
        padded = q.new_zeros(rows * width, heads, d).index_copy_(0, flat, q[:, :, 0])
        padded = padded.view(rows, width, heads, d).transpose(1, 2).to(keys.dtype)  # (rows, heads, width, d)
        k_rows = _repeat(keys[:, :, :span].index_select(0, at), groups)
        v_rows = _repeat(values[:, :, :span].index_select(0, at), groups)
        out = torch.nn.functional.scaled_dot_product_attention(
            padded, k_rows, v_rows, attn_mask=allowed, scale=layer.self_attn.scaling
        )  # (rows, heads, width, d)
        out = out.transpose(1, 2).reshape(rows * width, heads * d).index_select(0, flat)
        x = layer_second(layer, x, out.view(total, 1, heads * d))
    return logits_of(core.norm, decoder.head, x.index_select(0, last))


def _repeat(t: torch.Tensor, groups: int) -> torch.Tensor:
    """(rows, kv, L, d) -> (rows, kv * groups, L, d): kv head j serves query heads j*groups ...
    (j+1)*groups - 1, as in the decode step."""
    if groups == 1:
        return t
    rows, kv, length, d = t.shape
    return t[:, :, None].expand(rows, kv, groups, length, d).reshape(rows, kv * groups, length, d)


def _spread(values: torch.Tensor, counts: torch.Tensor, starts: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """`values[i]` repeated `counts[i]` times, and beside each the positions starts[i],
    starts[i] + 1, ... (all rows end to end).

    >>> [t.tolist() for t in _spread(torch.tensor([7, 3]), torch.tensor([2, 3]), torch.tensor([0, 5]))]
    [[7, 7, 3, 3, 3], [0, 1, 5, 6, 7]]
    """
    first = torch.repeat_interleave(counts.cumsum(0) - counts, counts)  # each token's row's first index
    return values.repeat_interleave(counts), torch.arange(int(counts.sum())) - first + starts.repeat_interleave(counts)
