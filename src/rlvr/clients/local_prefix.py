"""KV cache reuse across the turns of a conversation (`LocalModel(..., reuse_cache=True)`).

In a multi-turn game, turn k's prompt starts with turn k-1's prompt and (usually) the ids sampled
for it. When a request finishes, `PrefixCache.store` keeps the keys and values of its sequence
(prompt + sampled ids but the last, which never went through the model); when a new request's
prompt shares a prefix with a kept sequence, `Batch.admit` starts from those keys and values
and prefills only the rest. A match needs the kept request's whole prompt to be a prefix of the
new prompt (or the new prompt, but its last token, a prefix of the kept one) and then extends as
far as the ids agree (a re-rendered reply may tokenize differently near its end); the longest
such match wins, and at least one prompt token is always left to prefill (its logits give the
first sampled token). Matching compares prefix hashes of the ids (a numpy cumulative sum of
position-keyed odd multipliers, mod 2^64), every kept entry at once through one table of their
hashes, and confirms the match on the ids themselves: 3.1-3.5x less host time a request than a
Python scan of every entry (docs/benchmarks.md, `bench_prefix_cache.py`).

Requests that join together with no kept prefix but a long common one (a shared system prompt,
the rollouts of one GRPO group) have that prefix prefilled once, as one batch row, and kept as a
*shared* entry: every joiner starts from it, and a later one with the same prefix does too. A
shared entry is not dropped when a request extends all of it.

Entries are bounded by count and by bytes (least recently used go first); an entry whose whole
sequence was extended is dropped (the new request keeps a longer one), unless `drop_extended` is
off: a tree walk's siblings (the replies to one position) can reach the model in several
admissions, and the later ones then still find their parent (a tic-tac-toe walk prefilled
63,000 tokens so in two runs, against 62,000-100,000 in four that dropped it).

Entries belong to one version of the weights: `clear()` drops them all and bumps `version`
(requests admitted before it are not kept); the trainer calls `LocalModel.clear_cache()` after
each optimizer step. As a safety net `check_weights` also clears when a parameter was changed in
place or replaced (its version counter or storage moved). Only plain `DynamicLayer` caches are
kept: sliding-window and hybrid caches are never reused.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

Hashes = np.ndarray
"""Prefix hashes of a sequence of ids: uint64, `hashes[n]` of the first n ids (`prefix_hashes`)."""

_STEP = np.random.Generator(np.random.PCG64(0x5EED))
_MULTIPLIERS = np.zeros(0, dtype=np.uint64)
_GROW = threading.Lock()


def _multipliers(n: int) -> np.ndarray:
    """At least `n` per-position multipliers: odd pseudo-random uint64, the same in every process
    (one seeded stream, drawn further as longer sequences come)."""
    global _MULTIPLIERS
    table = _MULTIPLIERS
    if len(table) < n:
        with _GROW:
            if len(_MULTIPLIERS) < n:
                more = _STEP.bit_generator.random_raw(max(n, 2 * len(_MULTIPLIERS), 1024) - len(_MULTIPLIERS))
                _MULTIPLIERS = np.concatenate([_MULTIPLIERS, np.asarray(more, dtype=np.uint64) | np.uint64(1)])
            table = _MULTIPLIERS
    return table


def extend_hashes(hashes: Hashes, ids: list[int]) -> Hashes:
    """`hashes` (prefix hashes, `hashes[n]` of the first n ids) extended by `ids`: hashes[n] is
    the sum of (id_i + 1) * multiplier_i over i < n, mod 2^64 (a cumulative sum, in numpy)."""
    n, k = len(hashes) - 1, len(ids)
    out = np.empty(n + 1 + k, dtype=np.uint64)
    out[: n + 1] = hashes
    if k:
        terms = (np.asarray(ids, dtype=np.uint64) + np.uint64(1)) * _multipliers(n + k)[n : n + k]
        np.cumsum(terms, out=out[n + 1 :])
        out[n + 1 :] += out[n]
    return out


_EMPTY = np.zeros(1, dtype=np.uint64)


def prefix_hashes(ids: list[int]) -> Hashes:
    """The prefix hashes of `ids` (len(ids) + 1 of them; `hashes[0]` = 0).

    >>> h = prefix_hashes([5, 6, 7])
    >>> len(h), int(h[0]), bool((prefix_hashes([5, 6, 9])[:3] == h[:3]).all()), int(prefix_hashes([5, 6, 9])[3]) == int(h[3])
    (4, 0, True, False)
    """
    return extend_hashes(_EMPTY, ids)


KV = tuple[torch.Tensor, torch.Tensor]
"""Kept keys and values: two tensors of (layers, kv heads, tokens, head dim)."""


@dataclass(eq=False)
class Entry:
    ids: list[int]  # the tokens whose keys and values are kept
    hashes: Hashes  # prefix hashes of `ids` (len(ids) + 1)
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
        self._table = _Table()  # the entries' hashes side by side, for `_best`
        self.drop_extended = True
        """Drop an entry once a request extends all of it (off: leave it to the bounds)."""

    def clear(self) -> None:
        with self._lock:
            self.entries.clear()
            self.nbytes = 0
            self.version += 1
            self._table = _Table()

    def check_weights(self, model: Any) -> None:
        """Clear when any parameter was updated in place or swapped since the last check."""
        sig = hash(tuple((p._version, p.data_ptr()) for p in model.parameters()))
        if sig != self._weights:
            if self._weights is not None:
                self.clear()
            self._weights = sig

    def lookup(self, ids: list[int], hashes: Hashes) -> tuple[KV | None, int]:
        """The kept keys and values for the longest usable prefix of `ids`, and its length."""
        return self.lookup_many([(ids, hashes)])[0]

    def lookup_many(self, requests: list[tuple[list[int], Hashes]]) -> list[tuple[KV | None, int]]:
        """`lookup` for requests admitted together. An entry that one of them extends whole is
        dropped only after all have looked: the branches of one conversation (a game tree's
        replies to one position) all start from it."""
        out: list[tuple[KV | None, int]] = []
        extended: set[int] = set()
        with self._lock:
            for ids, hashes in requests:
                best, best_m = self._best(self._table, ids, hashes)
                if best is None:
                    out.append((None, 0))
                    continue
                if best_m == len(best.ids) and not best.shared and self.drop_extended:
                    extended.add(best.key)
                self.entries.move_to_end(best.key)
                keys, values = best.kv
                out.append(((keys[:, :, :best_m], values[:, :, :best_m]), best_m))
            for key in extended:
                self._drop(self.entries.pop(key))
        return out

    @staticmethod
    def _best(table: _Table, ids: list[int], hashes: Hashes) -> tuple[Entry | None, int]:
        """The entry sharing the longest usable prefix with `ids` (confirmed on the ids): the
        longest m <= len(ids) - 1 with equal prefix hashes, where the match covers the entry's
        prompt or ends where the entry or `ids` does (the lowest row among equals). All entries
        are checked at once at their first position that must match; those that pass are
        measured longest reach first (then by row), each first at its end, and the walk stops at
        the first whole match or once no entry left can reach as far: where a GRPO group's
        rollouts played alike (a sharp policy), every one of their entries passes, and measuring
        each cost a scan."""
        n = len(table.entries)
        if not n:
            return None, 0
        top = np.minimum(table.lengths[:n], len(ids) - 1)
        lo = np.minimum(table.prompt_lens[:n], top)  # a dropped entry's prompt length is 0
        passed = np.flatnonzero((lo >= 1) & (table.flat[table.offsets[:n] + lo] == hashes[lo]))
        best, best_i, best_m = None, n, 0
        for i in passed[np.argsort(-top[passed], kind="stable")].tolist():
            first, last, at = int(lo[i]), int(top[i]), int(table.offsets[i])
            if last < best_m:
                break  # (sorted by reach: no entry left matches as far)
            if table.flat[at + last] == hashes[last]:
                m = last  # prefix hashes: equal, then not
            else:
                m = first + int(np.argmin(table.flat[at + first : at + last + 1] == hashes[first : last + 1])) - 1
            if m > best_m or (m == best_m and i < best_i):
                best, best_i, best_m = table.entries[i], i, m
            if m == last:
                break  # whole: those left reach less far, or as far from a later row
        if best is None or ids[:best_m] != best.ids[:best_m]:  # a hash collision
            return None, 0
        return best, best_m

    def store(
        self,
        ids: list[int],
        hashes: Hashes,
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
            entry = self.entries[key] = Entry(ids, hashes, prompt_len, kv, nbytes, key, shared)
            self._next_key += 1
            self.nbytes += nbytes
            self._table.add(entry)
            while len(self.entries) > self.max_entries or self.nbytes > self.max_bytes:
                self._drop(self.entries.popitem(last=False)[1])

    def _drop(self, entry: Entry) -> None:
        """Forget `entry` (already out of `entries`): its bytes and its row of the table."""
        self.nbytes -= entry.nbytes
        self._table.remove(entry)
        if self._table.wasted():
            self._table = _Table(list(self.entries.values()))


class _Table:
    """Every entry's prefix hashes in one flat array (row i at offsets[i] ...), with its length
    and prompt length: what `PrefixCache._best` reads for all entries at once. Rows are appended
    as entries are stored; a dropped entry's row stays, with prompt length 0 (never matched),
    until dropped rows are most of the table and it is built again from the live entries."""

    def __init__(self, entries: Iterable[Entry] = ()) -> None:
        self.used = self.dead = 0  # hashes written; hashes of dropped rows
        self.entries: list[Entry | None] = []  # by row; None once dropped
        self.row: dict[int, int] = {}  # entry key -> row
        self.lengths = np.zeros(64, dtype=np.int64)
        self.prompt_lens = np.zeros(64, dtype=np.int64)
        self.offsets = np.zeros(64, dtype=np.int64)
        self.flat = np.zeros(4096, dtype=np.uint64)
        for entry in entries:
            self.add(entry)

    def add(self, entry: Entry) -> None:
        i, k = len(self.entries), len(entry.hashes)
        if i == len(self.lengths):
            self.lengths, self.prompt_lens, self.offsets = (_grown(a, i + 1) for a in (self.lengths, self.prompt_lens, self.offsets))  # fmt: skip
        if self.used + k > len(self.flat):
            self.flat = _grown(self.flat, self.used + k)
        self.flat[self.used : self.used + k] = entry.hashes
        self.lengths[i], self.prompt_lens[i], self.offsets[i] = len(entry.ids), entry.prompt_len, self.used
        self.entries.append(entry)
        self.row[entry.key] = i
        self.used += k

    def remove(self, entry: Entry) -> None:
        i = self.row.pop(entry.key)
        self.prompt_lens[i] = self.lengths[i] = 0  # top = lo = 0: never passes
        self.entries[i] = None
        self.dead += len(entry.hashes)

    def wasted(self) -> bool:
        """Whether dropped rows hold most of the hashes (then build the table again)."""
        return self.dead > max(self.used - self.dead, 4096)


def _grown(a: np.ndarray, need: int) -> np.ndarray:
    """`a` in an array at least twice as long (and at least `need`), zeros after."""
    out = np.zeros(max(need, 2 * len(a)), dtype=a.dtype)
    out[: len(a)] = a
    return out


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
