"""The prefix cache's lookup (rlvr.clients.local_prefix): every entry checked at once by its prefix
hashes, against a brute-force reading of the same rule on the ids themselves."""

from __future__ import annotations

import random

import pytest

torch = pytest.importorskip("torch")
np = pytest.importorskip("numpy")

from rlvr.clients import local_prefix
from rlvr.clients.local_prefix import PrefixCache, extend_hashes, prefix_hashes


def _kv(n: int) -> tuple:
    return torch.zeros(1, 1, n, 1), torch.ones(1, 1, n, 1)


def _common(a: list[int], b: list[int], n: int) -> int:
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


def brute_force(entries: list[tuple[list[int], int]], ids: list[int]) -> int:
    """The longest usable match, read on the ids: an entry (ids, prompt length) matches when the
    request agrees with it up to min(prompt length, top), top = min(its length, len(ids) - 1),
    and then as far as they agree up to top; 0 when none does."""
    best = 0
    for kept, prompt_len in entries:
        top = min(len(kept), len(ids) - 1)
        lo = min(prompt_len, top)
        if lo >= 1 and kept[:lo] == ids[:lo]:
            best = max(best, _common(kept, ids, top))
    return best


def test_hashes_extend_as_they_would_be_computed_whole_and_differ_where_the_ids_do() -> None:
    rng = random.Random(0)
    ids = [rng.randrange(50_000) for _ in range(3_000)]  # past the first 1,024 multipliers
    whole = prefix_hashes(ids)
    assert whole.dtype == np.uint64 and len(whole) == len(ids) + 1 and int(whole[0]) == 0
    assert (extend_hashes(prefix_hashes(ids[:700]), ids[700:]) == whole).all()
    other = ids[:1_500] + [ids[1_500] + 1] + ids[1_501:]
    differ = np.flatnonzero(prefix_hashes(other) != whole)
    assert differ[0] == 1_501 and len(differ) == len(ids) - 1_500  # equal up to the change, then never again
    assert len(set(whole.tolist())) == len(whole)


@pytest.mark.parametrize("seed", range(6))
def test_lookup_finds_the_longest_usable_prefix_as_the_ids_say(seed: int) -> None:
    """Random conversations that branch (shared openings, re-rendered replies, shorter and longer
    requests than the kept prompts, the same prompt again): the matched length is always the
    brute force's, and the kept keys and values handed back are that many positions."""
    rng = random.Random(seed)
    cache = PrefixCache(max_entries=40)
    kept: list[tuple[list[int], int]] = []
    stems = [[rng.randrange(20) for _ in range(rng.randrange(2, 40))] for _ in range(4)]
    stores = 0
    for _ in range(300):
        if kept and rng.random() < 0.6:  # grow from a kept sequence: cut it, then add new ids
            base, _ = rng.choice(kept)
            prompt = base[: rng.randrange(1, len(base) + 1)] + [rng.randrange(20) for _ in range(rng.randrange(0, 12))]
        else:
            prompt = rng.choice(stems) + [rng.randrange(20) for _ in range(rng.randrange(0, 12))]
        if len(prompt) < 2:
            continue
        hashes = prefix_hashes(prompt)
        kv, m = cache.lookup(prompt, hashes)
        assert m == brute_force(kept, prompt), (prompt, m)
        assert (kv is None) == (m == 0) and (kv is None or kv[0].shape[2] == m)
        kept = [(e.ids, e.prompt_len) for e in cache.entries.values()]  # a whole extended entry is dropped
        reply = [rng.randrange(20) for _ in range(rng.randrange(1, 10))]
        ids = prompt + reply[:-1]
        cache.store(ids, extend_hashes(hashes, reply[:-1]), len(prompt), _kv(len(ids)), cache.version)
        kept = [(e.ids, e.prompt_len) for e in cache.entries.values()]
        stores += 1
    assert len(cache._table.entries) < stores - 40  # dropped rows were compacted away (the table built again)


def test_among_entries_that_match_as_far_the_first_stored_wins_whatever_reaches_further() -> None:
    """A sharp policy's group leaves identical entries (all pass the first check); the walk stops at
    the first whole match, and must still hand back the lowest row's, not one reaching further."""
    cache = PrefixCache()
    cache.drop_extended = False
    ids = list(range(1, 30))
    longer = ids[:12] + [99] * 40  # reaches past the request but agrees for 12 ids only
    cache.store(longer, prefix_hashes(longer), 10, (torch.full((1, 1, len(longer), 1), 9.0),) * 2, cache.version)
    for fill in (1.0, 2.0, 3.0):
        cache.store(ids, prefix_hashes(ids), 10, (torch.full((1, 1, len(ids), 1), fill),) * 2, cache.version)
    request = ids + [7, 8]
    kv, m = cache.lookup(request, prefix_hashes(request))
    assert m == len(ids) and kv is not None and float(kv[0][0, 0, 0, 0]) == 1.0
    kv, m = cache.lookup(ids[:20] + [5, 5], prefix_hashes(ids[:20] + [5, 5]))
    assert m == 20 and kv is not None and float(kv[0][0, 0, 0, 0]) == 1.0
    kv, m = cache.lookup(ids[:12] + [5, 5], prefix_hashes(ids[:12] + [5, 5]))  # all match 12: the first row
    assert m == 12 and kv is not None and float(kv[0][0, 0, 0, 0]) == 9.0


def test_a_hash_collision_is_caught_on_the_ids() -> None:
    """An entry whose hashes equal the request's but whose ids do not is no match."""
    cache = PrefixCache()
    prompt = [1, 2, 3, 4, 5]
    cache.store([9, 9, 9, 9], prefix_hashes(prompt)[:5], 3, _kv(4), cache.version)  # forged: prompt's hashes
    assert cache.lookup(prompt, prefix_hashes(prompt)) == (None, 0)
    cache = PrefixCache()
    cache.store([1, 2, 3, 4], prefix_hashes(prompt)[:5], 3, _kv(4), cache.version)
    kv, m = cache.lookup(prompt, prefix_hashes(prompt))
    assert m == 4 and kv is not None


def test_entries_extended_whole_go_after_all_have_looked_and_shared_ones_stay() -> None:
    cache = PrefixCache()
    cache.store([1, 2, 3], prefix_hashes([1, 2, 3]), 2, _kv(3), cache.version)
    cache.store([7, 8, 9], prefix_hashes([7, 8, 9]), 3, _kv(3), cache.version, shared=True)
    a, b, c = [1, 2, 3, 4], [1, 2, 3, 5, 6], [7, 8, 9, 1]
    hits = cache.lookup_many([(a, prefix_hashes(a)), (b, prefix_hashes(b)), (c, prefix_hashes(c))])
    assert [m for _, m in hits] == [3, 3, 3]
    assert [e.ids for e in cache.entries.values()] == [[7, 8, 9]]  # both branches found [1, 2, 3]
    assert cache.lookup(a, prefix_hashes(a)) == (None, 0)


def test_without_drop_extended_a_later_sibling_still_finds_its_parent() -> None:
    """A tree walk's siblings in two admissions: the second finds the entry the first extended
    whole (dropped by default), and the bounds still hold."""
    for drop in (True, False):
        cache = PrefixCache(max_entries=2)
        cache.drop_extended = drop
        cache.store([1, 2, 3], prefix_hashes([1, 2, 3]), 2, _kv(3), cache.version)
        a, b = [1, 2, 3, 4], [1, 2, 3, 5]
        assert cache.lookup(a, prefix_hashes(a))[1] == 3
        assert cache.lookup(b, prefix_hashes(b))[1] == (0 if drop else 3)
    for ids in ([5, 6, 7], [8, 9, 10]):  # the count bound still evicts it, least recently used first
        cache.store(ids, prefix_hashes(ids), 2, _kv(3), cache.version)
    assert [e.ids for e in cache.entries.values()] == [[5, 6, 7], [8, 9, 10]]


def test_the_multipliers_are_the_same_stream_however_they_grew(monkeypatch) -> None:
    """Hashes do not depend on which lengths were asked for first (a process that saw a long
    prompt early and one that did not compute the same hashes)."""
    fresh = np.random.Generator(np.random.PCG64(0x5EED))
    want = np.asarray(fresh.bit_generator.random_raw(5_000), dtype=np.uint64) | np.uint64(1)
    monkeypatch.setattr(local_prefix, "_STEP", np.random.Generator(np.random.PCG64(0x5EED)))
    monkeypatch.setattr(local_prefix, "_MULTIPLIERS", np.zeros(0, dtype=np.uint64))
    local_prefix._multipliers(10)
    local_prefix._multipliers(3_000)
    assert (local_prefix._multipliers(5_000)[:5_000] == want).all()


def test_prompts_too_short_to_reuse_anything_find_nothing_and_raise_nothing() -> None:
    """A match must leave one prompt token to prefill: an empty or one-token prompt matches
    nothing, against an empty cache or one holding its prefix."""
    cache = PrefixCache()
    for ids in ([], [3]):
        assert cache.lookup(ids, prefix_hashes(ids)) == (None, 0)
    cache.store([3, 4, 5], prefix_hashes([3, 4, 5]), 1, _kv(3), cache.version)
    for ids in ([], [3]):
        assert cache.lookup(ids, prefix_hashes(ids)) == (None, 0)
    assert cache.lookup([3, 4], prefix_hashes([3, 4]))[1] == 1
