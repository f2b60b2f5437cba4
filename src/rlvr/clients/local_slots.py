"""Decoding over static KV slots: `SlotBatch` keeps the batch's rows in a `SlotDecoder`'s slots.

`Batch` (rlvr.clients.local_batch) keeps the rows' keys and values in a transformers
`DynamicCache`: every decode step concatenates a column onto every layer, and every admission or
removal copies the whole cache, so on a GPU with a small model the loop is bound by kernel
launches. `SlotBatch` keeps them in preallocated slots (`rlvr.clients.local_decode`):

- joiners take the lowest free slots; the kept (or shared) prefix of each prompt is copied into
  its slot, and the rest of every prompt is prefilled at once through the decode step's own
  layer functions, writing straight into the slots (`rlvr.clients.local_prefill`: no
  transformers forward, cache object or mask per admission, the new tokens packed unpadded);
- a finished row leaves the batch at once; with KV reuse on, its slot is held until the next
  admission copies its keys and values into the reuse cache (one copy for all such rows, and
  none when the cache was cleared meanwhile, as the trainer does after each update);
- each step decodes one token per slot in use and books it; rows with top-p < 1 are sampled
  again outside the step.

The decode forward covers decoder-only models with rotary embeddings, full attention and no
extra scaling: the llama, mistral (without sliding window), qwen2 and qwen3 families
(`supported`). Others use `Batch`. Headline: ~12 ms a step with `Batch` against 1.6-1.8 ms
over slots (H200, the 17.6M model, 256 rows); the measurements are in docs/benchmarks.md.
"""

from __future__ import annotations

import itertools
from typing import Any

import torch

from rlvr.clients.local_batch import Batch, Decoding, GenerationStats, Request
from rlvr.clients.local_decode import SlotDecoder
from rlvr.clients.local_load import base_model
from rlvr.clients.local_prefill import copy_prefixes, prefill
from rlvr.clients.local_prefix import KV, PrefixCache
from rlvr.errors import UsageError

FAMILIES = frozenset({"llama", "mistral", "qwen2", "qwen3"})
_ROPE = frozenset({None, "default", "linear", "llama3", "yarn"})  # no data-dependent rescaling


def supported(model: Any) -> bool:
    """Whether `SlotDecoder`'s forward reproduces this model's (see the module docstring)."""
    causal = base_model(model)
    config = causal.config
    core = getattr(causal, "model", None)
    if getattr(config, "model_type", None) not in FAMILIES or core is None:
        return False
    if not all(hasattr(core, a) for a in ("embed_tokens", "layers", "norm", "rotary_emb")):
        return False
    if not all(hasattr(layer.self_attn, "head_dim") for layer in core.layers):
        return False
    if any(t != "full_attention" for t in getattr(config, "layer_types", None) or ()):
        return False
    if getattr(config, "use_sliding_window", False) or (
        config.model_type == "mistral" and getattr(config, "sliding_window", None)
    ):
        return False
    rope = getattr(core.rotary_emb, "rope_type", None)
    return rope in _ROPE and not getattr(config, "pretraining_tp", 1) > 1


def use_static_cache(model: Any, requested: bool | None, name: str) -> bool:
    """Whether `LocalModel(static_cache=requested)` decodes over slots: None = wherever the
    family is supported (CUDA or CPU; on a 2-core CPU slots give 1.06-1.54x the tokens/s, see
    docs/benchmarks.md); True for an unsupported model is an error."""
    ok = supported(model)
    if requested and not ok:
        raise UsageError(
            f"static_cache needs a model of the {sorted(FAMILIES)} families with full attention; {name} is not one"
        )
    return ok and (requested is None or requested)


class SlotBatch(Batch):
    """`Batch` over a `SlotDecoder`: same admission (kept and shared prefixes), sampling and
    answers; rows live in slots instead of one padded cache."""

    def __init__(self, dec: Decoding, prefix: PrefixCache | None, stats: GenerationStats, decoder: SlotDecoder) -> None:
        super().__init__(dec, prefix, stats)
        self.decoder = decoder
        self.index: torch.Tensor | None = None  # (rows,) each row's slot, on the device
        self.admitting: list[int] = []  # the slots of the joiners being admitted
        if prefix is not None and prefix.usable is None:
            prefix.usable = True  # a slot's keys and values can always be kept

    def admit(self, joiners: list[Request]) -> None:
        self.prune()
        decoder, device = self.decoder, self.dec.device
        if decoder.held:  # kept now, before the lookup that may use them, and their slots freed
            held, decoder.held = decoder.held, []
            self._store(held)
        used = {r.slot for r in self.rows}  # the lowest free slots: fewer to decode each step
        slots = list(itertools.islice((s for s in itertools.count() if s not in used), len(joiners)))
        decoder.reserve(max(slots) + 1, max(r.seq_len for r in (*self.rows, *joiners)) + 1)
        decoder.check_weights()
        self.admitting = slots
        hits = self._hits(joiners)  # each row's whole kept prefix: the new tokens go unpadded
        copy_prefixes(decoder, slots, [kv for kv, _ in hits])
        suffixes = [r.prompt_ids[m:] for r, (_, m) in zip(joiners, hits)]
        logits = prefill(decoder, slots, suffixes, [m for _, m in hits])
        self.stats.prefills += 1
        self.stats.prompt_tokens += sum(map(len, suffixes))
        self.stats.reused_tokens += sum(m for _, m in hits)
        at = torch.tensor(slots, device=device)
        decoder.tokens[at] = self._sample(logits, joiners)
        state = [(len(r.prompt_ids), r.seed & 0xFFFFFFFF, len(r.ids)) for r in joiners]
        decoder.pos[at], decoder.seeds[at], decoder.counts[at] = torch.tensor(state, device=device).T
        decoder.temps[at] = torch.tensor([r.temperature for r in joiners], device=device)
        for r, s in zip(joiners, slots):
            r.slot = s
        self.rows.extend(joiners)
        self.index = None
        self.stats.max_batch = max(self.stats.max_batch, len(self.rows))

    def _prefill_shared(self, ids: list[int]) -> KV:
        """`ids` prefilled into the first admitting slot (its row copies them back from the
        shared entry), and a copy of their keys and values."""
        slot = self.admitting[0]
        prefill(self.decoder, [slot], [ids], [0])
        return self._copy_kv_of([(slot, len(ids))])[0]

    def step(self) -> None:
        decoder = self.decoder
        need = max(r.seq_len for r in self.rows) + 1  # the highest position this step writes, + 1
        decoder.reserve(0, need)
        if self.index is None:
            self.index = torch.tensor([r.slot for r in self.rows], device=self.dec.device)
        logits, choice, logprob = decoder.step(max(r.slot for r in self.rows) + 1, need)
        self.stats.decode_steps += 1
        if all(r.top_p >= 1.0 or r.temperature == 0 for r in self.rows):  # drawn in the step
            tokens, logprobs = choice.tolist(), logprob.tolist()
            self._record(self.rows, [tokens[r.slot] for r in self.rows], [logprobs[r.slot] for r in self.rows])
        else:  # top-p: sample again outside the step, and overwrite its tokens
            decoder.tokens[self.index] = self._sample(logits.index_select(0, self.index), self.rows)

    def _keep(self, rows: list[Request]) -> None:
        """Hold the rows' slots: the next admission copies their keys and values (one copy for
        all; none when the trainer cleared the cache meanwhile). Until then the decode step
        writes only past their kept positions."""
        self.decoder.held.extend(rows)

    def _prune_finished(self) -> None:
        self.prune()  # leaving costs nothing here

    def prune(self) -> None:
        keep = [r for r in self.rows if r.finish is None and not r.cancelled]
        if len(keep) < len(self.rows):
            self.rows, self.index = keep, None

    def _copy_kv(self, rows: list[Request]) -> list[KV | None]:
        """A copy of each row's first `seq_len` positions."""
        return list(self._copy_kv_of([(r.slot, r.seq_len) for r in rows]))

    def _copy_kv_of(self, spans: list[tuple[int, int]]) -> list[KV]:
        """A copy of positions [0, n) of each (slot, n), one per row: a view of one copy of all
        would keep the whole copy alive while any entry of it stays in the reuse cache."""
        keys, values = self.decoder.keys, self.decoder.values
        return [(keys[:, s, :, :n].clone(), values[:, s, :, :n].clone()) for s, n in spans]
