"""Seeds derived from seeds: one stable mixing function for every random stream in rlvr.

A rollout's seed mixes its task's seed and its index; each model turn's sampling seed mixes the
rollout's seed and the turn; environments mix a base seed with a split and an index. No salted
`hash()`: the same inputs give the same seed in every process and on every machine.
"""

from __future__ import annotations


def mix_seed(*parts: int) -> int:
    """A stable 31-bit seed from integers (no salted hashing: same inputs, same seed).

    >>> mix_seed(0, 1) == mix_seed(0, 1) != mix_seed(1, 0)
    True
    >>> 0 <= mix_seed(2**60, -5) < 2**31
    True
    """
    h = 0x345678
    for p in parts:
        h = (h * 1_000_003) ^ (p & 0xFFFFFFFFFFFF)
        h &= 0xFFFFFFFFFFFFFFFF
    return (h ^ (h >> 29)) & 0x7FFFFFFF
