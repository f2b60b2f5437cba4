"""The batched decoder behind `LocalModel`: rows that share one KV cache, one token a step.

`Batch.admit` prefills newly arrived requests (left padded) and merges their KV cache into the
running batch; `Batch.step` decodes one token for every row; finished rows leave the cache
once they are an eighth of the batch (each removal copies the cache). Positions are tracked per
row, so a row's tokens see exactly the positions they would see alone. The cache surgery
(merge, select, trim of all-padding columns) needs plain `DynamicLayer`s; for other caches
(sliding-window, hybrid) `mergeable` is False and `LocalModel` only admits into an empty batch.

A batch sees its model only through a `Decoding` (the model, tokenizer, device, pad and EOS ids,
and how this transformers version's forward is called), its `PrefixCache` and the
`GenerationStats` it counts into: `LocalModel` builds the three when its worker thread starts.

With `LocalModel(reuse_cache=True)` a finished row's keys and values are kept, and a joiner whose
prompt extends a kept sequence prefills only the rest; joiners with a long common prefix and
nothing kept prefill that prefix once (see `rlvr.clients.local_prefix`).

Each row's token comes from `rlvr.clients.local_sampling.sample_tokens`: a seeded request gets
the same tokens whatever else shares its batch.

`rlvr.clients.local_slots.SlotBatch` extends this class (same lookups, sampling and answers) with
static per-row KV slots, a prefill straight into them and a graph-captured decode step.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

import torch
from transformers import DynamicCache, PreTrainedTokenizerBase

from rlvr.clients.local_load import base_model
from rlvr.clients.local_prefix import (
    KV,
    Hashes,
    PrefixCache,
    common_prefix_len,
    extend_hashes,
    past_cache,
    prefix_hashes,
    row_kv,
)
from rlvr.clients.local_sampling import row_key, sample_tokens
from rlvr.types import Completion

MIN_SHARED = 32
"""Joiners with no kept prefix but this many leading tokens in common prefill them once."""


@dataclass(frozen=True)
class Decoding:
    """What a batch needs from its model; nothing else of `LocalModel` reaches it."""

    model: Any  # the transformers causal LM, or a peft model around one
    tokenizer: PreTrainedTokenizerBase  # decodes the tail of a reply to find stop strings
    device: torch.device  # of the model's parameters
    pad_id: int  # fills the left padding of a prefill
    eos_ids: frozenset[int]  # tokens that end a reply
    cache_kw: str  # the forward's cache argument: "cache" or "past_key_values", by version
    keep_last: bool  # the forward takes `logits_to_keep` (logits of the last position only)


@dataclass
class GenerationStats:
    """Counters of the batched generator (for tests, benchmarks and logs)."""

    requests: int = 0
    """Requests answered."""
    prefills: int = 0
    """Forward passes that admitted new requests (one per group of joiners)."""
    decode_steps: int = 0
    """Batched one-token forward passes."""
    tokens: int = 0
    """Completion tokens sampled."""
    max_batch: int = 0
    """Most requests decoded together."""
    prompt_tokens: int = 0
    """Prompt tokens run through prefills (reused ones not counted)."""
    reused_tokens: int = 0
    """Prompt tokens whose keys and values came from the reuse cache."""
    shared_tokens: int = 0
    """Tokens of prompt prefixes that joiners had in common, prefilled once for all of them."""


@dataclass(eq=False)
class Request:
    """One `chat()` call on its way through the batch (written by the worker thread only)."""

    prompt_ids: list[int]
    max_tokens: int
    temperature: float
    top_p: float
    seed: int
    stop: tuple[str, ...]
    loop: asyncio.AbstractEventLoop
    future: asyncio.Future[Completion]
    arrival_step: int
    cancelled: bool = False
    ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    finish: str | None = None
    stop_hit: str | None = None
    delivered: bool = False
    hashes: Hashes | None = None  # prefix hashes of prompt_ids (with cache reuse)
    cache_version: int = -1  # the prefix cache's version when the request was admitted
    slot: int = -1  # its slot in a `SlotBatch`

    @property
    def seq_len(self) -> int:
        """Tokens with keys and values in the cache: the prompt and the sampled ids but the last
        (the next step's input); also the position of that last sampled id."""
        return len(self.prompt_ids) + len(self.ids) - 1


class Batch:
    """The rows being decoded together, with their KV cache (left padded)."""

    def __init__(self, dec: Decoding, prefix: PrefixCache | None, stats: GenerationStats) -> None:
        self.dec, self.prefix, self.stats = dec, prefix, stats
        self.rows: list[Request] = []
        self.cache: Any = None
        self.mask: torch.Tensor | None = None  # (B, T) 1 = real token, 0 = padding
        self.next_pos: torch.Tensor | None = None  # (B,) position of the next token
        self.last: torch.Tensor | None = None  # (B,) last sampled token
        self.mergeable = True

    @property
    def live(self) -> int:
        return sum(1 for r in self.rows if r.finish is None and not r.cancelled)

    def admit(self, joiners: list[Request]) -> None:
        """Prefill the joiners' prompts, sample their first token, merge them into the batch."""
        self.prune()
        cache, mask, next_pos, tokens = self._prefill(joiners)
        if not self.rows:
            self.cache, self.mask, self.rows = cache, mask, list(joiners)
            self.next_pos, self.last = next_pos, tokens
            self.mergeable = _plain(cache)
        else:
            self._merge(cache, mask, next_pos, tokens, joiners)
        self.stats.max_batch = max(self.stats.max_batch, len(self.rows))

    def _prefill(self, joiners: list[Request]) -> tuple[Any, torch.Tensor, torch.Tensor, torch.Tensor]:
        """Run the joiners' prompts (left padded, after their kept or shared prefix) through the
        model and sample their first tokens. Returns the new cache, its (B, T) mask, each row's
        next position and its first token."""
        dec, device = self.dec, self.dec.device
        cache = new_cache(dec.model)
        hits = self._lookup(joiners)
        suffixes = [r.prompt_ids[m:] for r, (_, m) in zip(joiners, hits)]
        width = max(map(len, suffixes))
        ids = torch.full((len(joiners), width), dec.pad_id, dtype=torch.long)
        mask = torch.zeros((len(joiners), width), dtype=torch.long)
        for i, suffix in enumerate(suffixes):
            ids[i, width - len(suffix) :] = torch.tensor(suffix)
            mask[i, width - len(suffix) :] = 1
        ids, mask = ids.to(device), mask.to(device)
        start = torch.tensor([m for _, m in hits], device=device)
        positions = (mask.cumsum(-1) - 1).clamp(min=0) + start[:, None]
        if any(m for _, m in hits):  # the kept keys and values go first, with their mask
            mask = torch.cat([past_cache(cache, hits, device), mask], dim=1)
        logits = self._forward(ids, mask, positions, cache)
        self.stats.prefills += 1
        self.stats.prompt_tokens += sum(map(len, suffixes))
        self.stats.reused_tokens += sum(m for _, m in hits)
        tokens = self._sample(logits, joiners)
        self._learn_layout(cache)
        return cache, mask, positions[:, -1] + 1, tokens

    def step(self) -> None:
        """One decode step for every row."""
        assert self.mask is not None and self.next_pos is not None and self.last is not None
        self.mask = torch.cat([self.mask, self.mask.new_ones((len(self.rows), 1))], dim=1)
        logits = self._forward(self.last[:, None], self.mask, self.next_pos[:, None], self.cache)
        self.stats.decode_steps += 1
        self.next_pos = self.next_pos + 1
        self.last = self._sample(logits, self.rows)

    def pop_finished(self) -> list[Request]:
        """Rows that finished since the last call (to answer now). Finished rows leave the
        batch once they are an eighth of it: each removal copies the KV cache."""
        fresh = [r for r in self.rows if r.finish is not None and not r.delivered and not r.cancelled]
        for r in fresh:
            r.delivered = True
        if fresh and self._keeps():
            self._keep(fresh)
        self._prune_finished()
        return fresh

    def _keep(self, rows: list[Request]) -> None:
        """Keep finished rows' keys and values for reuse (now: the cache is about to change)."""
        self._store(rows)

    def _prune_finished(self) -> None:
        dead = sum(1 for r in self.rows if r.finish is not None or r.cancelled)
        if dead and dead >= max(1, len(self.rows) // 8):
            self.prune()

    def prune(self) -> None:
        """Drop finished and cancelled rows from the batch."""
        keep = [i for i, r in enumerate(self.rows) if r.finish is None and not r.cancelled]
        if not keep:
            self.reset()
        elif len(keep) < len(self.rows):
            self._select(keep)

    def reset(self) -> None:
        self.rows, self.cache, self.mask, self.next_pos, self.last = [], None, None, None, None
        self.mergeable = True

    # ---- internals ------------------------------------------------------------------------

    def _learn_layout(self, cache: Any) -> None:
        """The first prefill shows whether this model's caches can be kept (plain layers)."""
        prefix = self.prefix
        if prefix is not None and prefix.usable is None:
            prefix.usable = bool(_layers(cache)) and _plain(cache)

    def _keeps(self) -> bool:
        prefix = self.prefix
        return prefix is not None and bool(prefix.usable) and self.mergeable

    def _lookup(self, joiners: list[Request]) -> list[tuple[KV | None, int]]:
        """`_hits`, cut so that every row prefills as many tokens as the longest new part (padding
        would cost the same): the rows stay contiguous and the batch no wider than without reuse."""
        hits = self._hits(joiners)
        width = max(len(r.prompt_ids) - m for r, (_, m) in zip(joiners, hits))
        out: list[tuple[KV | None, int]] = []
        for r, (kv, m) in zip(joiners, hits):
            m = max(0, len(r.prompt_ids) - width)  # <= the kept length, as width >= len - m
            out.append(((kv[0][:, :, :m], kv[1][:, :, :m]), m) if kv is not None and m else (None, 0))
        return out

    def _hits(self, joiners: list[Request]) -> list[tuple[KV | None, int]]:
        """Per joiner: the longest kept prefix of its prompt (its keys and values, or None) and
        its length, or the prefix the joiners without one have in common (`_share_prefix`)."""
        prefix = self.prefix
        if prefix is None or prefix.usable is False:
            return [(None, 0)] * len(joiners)
        prefix.check_weights(self.dec.model)
        looked = [(r.prompt_ids, prefix_hashes(r.prompt_ids)) for r in joiners]
        for r, (_, hashes) in zip(joiners, looked):
            r.hashes, r.cache_version = hashes, prefix.version
        hits: list[tuple[KV | None, int]] = prefix.lookup_many(looked) if prefix.usable else [(None, 0)] * len(joiners)
        shared = self._share_prefix([r for r, (_, m) in zip(joiners, hits) if m == 0])
        if shared is not None:  # every joiner without a kept prefix starts from the shared one
            hits = [(kv, m) if m else shared for kv, m in hits]
        return hits

    def _share_prefix(self, cold: list[Request]) -> tuple[KV, int] | None:
        """Prefill once the prefix that joiners without a kept one have in common (when it is
        at least `MIN_SHARED` tokens), keep it as a shared entry for later joiners, and return
        its keys and values and length (None when there is none)."""
        prefix = self.prefix
        if len(cold) < 2 or prefix is None:
            return None
        n = min(common_prefix_len([r.prompt_ids for r in cold]), min(len(r.prompt_ids) for r in cold) - 1)
        if n < MIN_SHARED:
            return None
        kv = self._prefill_shared(cold[0].prompt_ids[:n])
        self.stats.prefills += 1
        self.stats.shared_tokens += n
        if kv is None:
            return None
        assert cold[0].hashes is not None
        prefix.store(cold[0].prompt_ids[:n], cold[0].hashes[: n + 1], n, kv, cold[0].cache_version, shared=True)
        return kv, n

    def _prefill_shared(self, ids: list[int]) -> KV | None:
        """The keys and values of `ids` (layers, kv, n, d) by a forward (None: cannot be kept)."""
        cache, t = new_cache(self.dec.model), torch.tensor([ids], device=self.dec.device)
        self._forward(t, torch.ones_like(t), torch.arange(len(ids), device=t.device)[None], cache)
        self._learn_layout(cache)
        if self.prefix is None or not self.prefix.usable:
            return None
        layers = _layers(cache)
        return torch.cat([layer.keys for layer in layers]), torch.cat([layer.values for layer in layers])

    def _store(self, rows: list[Request]) -> None:
        """Keep the keys and values of finished rows: prompt + sampled ids but the last."""
        prefix = self.prefix
        assert prefix is not None
        prefix.check_weights(self.dec.model)
        keep = [r for r in rows if r.hashes is not None and r.cache_version == prefix.version and r.finish is not None]
        for r, kv in zip(keep, self._copy_kv(keep) if keep else []):
            if kv is not None:
                assert r.hashes is not None
                prefix.store(
                    r.prompt_ids + r.ids[:-1],
                    extend_hashes(r.hashes, r.ids[:-1]),
                    len(r.prompt_ids),
                    kv,
                    r.cache_version,
                )

    def _copy_kv(self, rows: list[Request]) -> list[KV | None]:
        """Copies of the rows' first `seq_len` keys and values (None: not all in the cache)."""
        assert self.mask is not None
        layers = _layers(self.cache)
        index = {id(r): i for i, r in enumerate(self.rows)}
        # the rows' mask, brought to the CPU at once (one wait for the GPU, not one each)
        at = torch.tensor([index[id(r)] for r in rows], device=self.mask.device)
        masks = self.mask.index_select(0, at).cpu()
        return [row_kv(layers, m, index[id(r)], r.seq_len) for r, m in zip(rows, masks)]

    def _forward(self, ids: torch.Tensor, mask: torch.Tensor, positions: torch.Tensor, cache: Any) -> torch.Tensor:
        dec = self.dec
        kwargs: dict[str, Any] = {dec.cache_kw: cache, "use_cache": True}
        if dec.keep_last:
            kwargs["logits_to_keep"] = 1
        out = dec.model(input_ids=ids, attention_mask=mask, position_ids=positions, **kwargs)
        return out.logits[:, -1, :].float()

    def _sample(self, logits: torch.Tensor, rows: list[Request]) -> torch.Tensor:
        """Pick one token per row; record it, its logprob and whether the row is done."""
        tokens, logprobs = sample_tokens(
            logits,
            temperatures=[r.temperature for r in rows],
            top_ps=[r.top_p for r in rows],
            keys=[row_key(r.seed, len(r.ids)) for r in rows],
        )
        self._record(rows, tokens.tolist(), logprobs.tolist())
        return tokens

    def _record(self, rows: list[Request], tokens: list[int], logprobs: list[float]) -> None:
        """Append each row's token and logprob; mark the rows that are done."""
        for r, token, logprob in zip(rows, tokens, logprobs):
            if r.finish is not None or r.cancelled:
                continue
            r.ids.append(token)
            r.logprobs.append(logprob)
            if token in self.dec.eos_ids:
                r.finish = "stop"
            elif r.stop and (hit := stop_hit(self.dec.tokenizer, r.ids, r.stop)) is not None:
                r.finish, r.stop_hit = "stop", hit
            elif len(r.ids) >= r.max_tokens:
                r.finish = "length"

    def _select(self, keep: list[int]) -> None:
        """Keep rows `keep`; drop left columns that are padding for every remaining row."""
        assert self.mask is not None and self.next_pos is not None and self.last is not None
        index = torch.tensor(keep, device=self.mask.device)
        mask = self.mask.index_select(0, index)
        if not self.mergeable:  # sliding-window or hybrid layers: transformers' own selection
            self.cache.batch_select_indices(index)
            self.mask = mask
        else:
            lead = int((mask.cumsum(1) == 0).sum(1).min())
            self.mask = mask[:, lead:]
            for layer in _layers(self.cache):
                if layer.keys is not None and layer.keys.numel():
                    layer.keys = layer.keys.index_select(0, index)[:, :, lead:]
                    layer.values = layer.values.index_select(0, index)[:, :, lead:]
        self.next_pos, self.last = self.next_pos[index], self.last[index]
        self.rows = [self.rows[i] for i in keep]

    def _merge(
        self, cache: Any, mask: torch.Tensor, next_pos: torch.Tensor, last: torch.Tensor, joiners: list[Request]
    ) -> None:
        assert self.mask is not None and self.next_pos is not None and self.last is not None
        width = max(self.mask.shape[1], mask.shape[1])

        def pad(t: torch.Tensor, dim: int) -> torch.Tensor:  # zeros on the left, to `width`
            shape = list(t.shape)
            shape[dim] = width - t.shape[dim]
            return torch.cat([t.new_zeros(shape), t], dim=dim) if shape[dim] else t

        for mine, theirs in zip(_layers(self.cache), _layers(cache)):
            mine.keys = torch.cat([pad(mine.keys, 2), pad(theirs.keys, 2)], dim=0)
            mine.values = torch.cat([pad(mine.values, 2), pad(theirs.values, 2)], dim=0)
        self.mask = torch.cat([pad(self.mask, 1), pad(mask, 1)], dim=0)
        self.next_pos = torch.cat([self.next_pos, next_pos])
        self.last = torch.cat([self.last, last])
        self.rows.extend(joiners)


def stop_hit(tokenizer: Any, ids: list[int], stop: tuple[str, ...]) -> str | None:
    """The first of `stop` in the decoded tail of `ids` (as many last ids as the longest stop
    string has characters, and one more), or None."""
    tail = tokenizer.decode(ids[-(max(map(len, stop)) + 1) :], skip_special_tokens=True)
    return next((s for s in stop if s in tail), None)


def new_cache(model: Any) -> Any:
    try:
        return DynamicCache(config=base_model(model).config)
    except TypeError:  # older transformers
        return DynamicCache()


def _layers(cache: Any) -> list[Any]:
    return list(getattr(cache, "layers", ()))


def _plain(cache: Any) -> bool:
    """Every layer a plain `DynamicLayer` (the cache surgery here needs them)."""
    return all(type(layer).__name__ == "DynamicLayer" for layer in _layers(cache))
