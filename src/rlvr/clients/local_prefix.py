"""KV cache reuse across the turns of a conversation (`LocalModel(..., reuse_cache=True)`).

In a multi-turn game, turn k's prompt starts with turn k-1's prompt and (usually) the ids sampled
for it. When a request finishes, `PrefixCache.store` keeps the keys and values of its sequence
(prompt + sampled ids but the last, which never went through the model); when a new request's
prompt shares a prefix with a kept sequence, `Batch.admit` starts from those keys and values
and prefills only the rest. A match needs the kept request's whole prompt to be a prefix of the
new prompt and then extends as far as the ids agree (a re-rendered reply may tokenize
differently near its end); at least one prompt token is always left to prefill (its logits give
the first sampled token). Matching compares prefix hashes of the ids (polynomial, mod 2^61 - 1)
and confirms the match on the ids themselves.

Requests that join together with no kept prefix but a long common one (a shared system prompt,
the rollouts of one GRPO group) have that prefix prefilled once, as one batch row, and kept as a
*shared* entry: every joiner starts from it, and a later one with the same prefix does too. A
shared entry is not dropped when a request extends all of it.

Entries are bounded by count and by bytes (least recently used go first); an entry whose whole
sequence was extended is dropped (the new request keeps a longer one). Entries belong to one
version of the weights: `clear()` drops them all and bumps `version` (requests admitted before
it are not kept); the trainer calls `LocalModel.clear_cache()` after each optimizer step. As a
safety net `check_weights` also clears when a parameter was changed in place or replaced (its
version counter or storage moved). Only plain `DynamicLayer` caches are kept: sliding-window and
hybrid caches are never reused.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

import torch

_MOD = (1 << 61) - 1
_BASE = 1_000_003


def extend_hashes(hashes: list[int], ids: list[int]) -> list[int]:
    """`hashes` (prefix hashes, `hashes[n]` of the first n ids) extended by `ids`."""
    out = list(hashes)
    h = out[-1]
    for t in ids:
        h = (h * _BASE + t + 1) % _MOD
        out.append(h)
    return out


def prefix_hashes(ids: list[int]) -> list[int]:
    return extend_hashes([0], ids)


KV = tuple[torch.Tensor, torch.Tensor]
"""Kept keys and values: two tensors of (layers, kv heads, tokens, head dim)."""


@dataclass(eq=False)
class Entry:
    ids: list[int]  # the tokens whose keys and values are kept
    hashes: list[int]  # prefix hashes of `ids` (len(ids) + 1)
    prompt_len: int
    kv: KV  # of the len(ids) tokens (may be a view into a larger copy)
    nbytes: int
    key: int
    shared: bool = False  # a common prefix: kept when a request extends all of it


class PrefixCache:
    def __init__(self, max_entries: int = 512, max_bytes: int = 2 << 30) -> None:
        self.max_entries, self.max_bytes = max_entries, max_bytes
        self.entries: OrderedDict[int, Entry] = OrderedDict()
        self.nbytes = 0
        self.version = 0
        self.usable: bool | None = None  # None until the first prefill shows the cache layout
        self._next_key = 0
        self._weights: Any = None
        self._lock = threading.Lock()

    def clear(self) -> None:
        with self._lock:
            self.entries.clear()
            self.nbytes = 0
            self.version += 1

    def check_weights(self, model: Any) -> None:
        """Clear when any parameter was updated in place or swapped since the last check."""
        sig = hash(tuple((p._version, p.data_ptr()) for p in model.parameters()))
        if sig != self._weights:
            if self._weights is not None:
                self.clear()
            self._weights = sig

    def lookup(self, ids: list[int], hashes: list[int]) -> tuple[KV | None, int]:
        """The kept keys and values for the longest usable prefix of `ids`, and its length."""
        return self.lookup_many([(ids, hashes)])[0]

    def lookup_many(self, requests: list[tuple[list[int], list[int]]]) -> list[tuple[KV | None, int]]:
        """`lookup` for requests admitted together. An entry that one of them extends whole is
        dropped only after all have looked: the branches of one conversation (a game tree's
        replies to one position) all start from it."""
        out: list[tuple[KV | None, int]] = []
        extended: set[int] = set()
        with self._lock:
            for ids, hashes in requests:
                best, best_m = self._best(ids, hashes)
                if best is None:
                    out.append((None, 0))
                    continue
                if best_m == len(best.ids) and not best.shared:
                    extended.add(best.key)
                self.entries.move_to_end(best.key)
                keys, values = best.kv
                out.append(((keys[:, :, :best_m], values[:, :, :best_m]), best_m))
            for key in extended:
                self.nbytes -= self.entries.pop(key).nbytes
        return out

    def _best(self, ids: list[int], hashes: list[int]) -> tuple[Entry | None, int]:
        """The entry sharing the longest usable prefix with `ids` (confirmed on the ids)."""
        limit = len(ids) - 1
        best, best_m = None, 0
        for entry in self.entries.values():
            top = min(len(entry.ids), limit)
            lo = min(entry.prompt_len, top)
            if lo <= best_m or hashes[lo] != entry.hashes[lo]:
                continue
            hi = top  # the largest m with equal prefix hashes, by bisection
            while lo < hi:
                mid = (lo + hi + 1) // 2
                if hashes[mid] == entry.hashes[mid]:
                    lo = mid
                else:
                    hi = mid - 1
            if lo > best_m:
                best, best_m = entry, lo
        if best is None or ids[:best_m] != best.ids[:best_m]:  # a hash collision
            return None, 0
        return best, best_m

    def store(
        self,
        ids: list[int],
        hashes: list[int],
        prompt_len: int,
        kv: KV,
        version: int,
        shared: bool = False,
    ) -> None:
        nbytes = sum(t.numel() * t.element_size() for t in kv)
        with self._lock:
            if version != self.version or nbytes > self.max_bytes or self.max_entries < 1:
                return
            key = self._next_key
            self.entries[key] = Entry(ids, hashes, prompt_len, kv, nbytes, key, shared)
            self._next_key += 1
            self.nbytes += nbytes
            while len(self.entries) > self.max_entries or self.nbytes > self.max_bytes:
                _, old = self.entries.popitem(last=False)
                self.nbytes -= old.nbytes


def common_prefix_len(seqs: list[list[int]]) -> int:
    """How many leading ids all of `seqs` have in common."""
    first, n = seqs[0], min(map(len, seqs))
    for seq in seqs[1:]:
        i = 0
        while i < n and seq[i] == first[i]:
            i += 1
        n = i
    return n


def past_cache(cache: Any, hits: list[tuple[KV | None, int]], device: Any) -> torch.Tensor:
    """Fill the empty `cache` with the rows' kept keys and values (right aligned, zeros before)
    and return the (B, width) mask of those columns. Two kernels a row, whatever the depth."""
    width = max(m for _, m in hits)
    mask = torch.zeros((len(hits), width), dtype=torch.long)
    k0, v0 = next(kv for kv, _ in hits if kv is not None)
    keys = k0.new_zeros((k0.shape[0], len(hits), k0.shape[1], width, k0.shape[3]))
    values = v0.new_zeros((v0.shape[0], len(hits), v0.shape[1], width, v0.shape[3]))
    for i, (kv, m) in enumerate(hits):
        if kv is not None:
            keys[:, i, :, width - m :], values[:, i, :, width - m :] = kv
            mask[i, width - m :] = 1
    for layer in range(keys.shape[0]):
        cache.update(keys[layer], values[layer], layer)
    return mask.to(device)


def row_kv(layers: list[Any], mask_row: torch.Tensor, row: int, n: int) -> KV | None:
    """A copy of the first `n` real (unmasked) columns of `row` of the batch cache.

    `mask_row` is that row of the batch mask, on the CPU. The copy takes two kernels for all
    layers (four when the real columns are not contiguous), and no wait for the GPU."""
    cols = mask_row.nonzero().squeeze(1)[:n]
    if len(cols) < n:
        return None
    first = int(cols[0]) if n else 0
    if n == 0 or int(cols[-1]) - first == n - 1:  # contiguous: a slice of every layer
        keys = torch.stack([layer.keys[row, :, first : first + n] for layer in layers])
        values = torch.stack([layer.values[row, :, first : first + n] for layer in layers])
    else:
        index = cols.to(layers[0].keys.device, non_blocking=True)
        keys = torch.stack([layer.keys[row] for layer in layers]).index_select(2, index)
        values = torch.stack([layer.values[row] for layer in layers]).index_select(2, index)
    return keys, values
