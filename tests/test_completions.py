"""`same_completions` (tests/completions.py), the comparison of two decoders' completions."""

from __future__ import annotations

from types import SimpleNamespace as C

import pytest
from completions import same_completions


def test_same_lets_a_conversation_part_only_on_a_knife_edge() -> None:
    """`same_completions` can fail: a token off by more than one id at unequal logprobs, a
    logprob off before the parting, or three conversations parting."""

    def c(ids: list[int], lps: list[float]) -> C:
        return C(token_ids=ids, logprobs=lps, text=str(ids), finish_reason="length")

    base = [[c([5, 6, 7], [-1.0, -2.0, -3.0])] for _ in range(4)]
    same_completions(base, base)
    same_completions([[c([5, 8, 1], [-1.0, -2.0, -3.0])]] + base[1:], base)  # a greedy tie at 1: 6 vs 8
    same_completions([[c([5, 7, 1], [-1.0, -0.5, -3.0])]] + base[1:], base)  # a sampled border: 6 vs 7
    for wrong in (
        [[c([5, 9, 7], [-1.0, -1.0, -3.0])]] + base[1:],  # neither a tie nor neighbours
        [[c([5, 7, 7], [-1.5, -0.5, -3.0])]] + base[1:],  # a logprob off before the parting
        [[c([5, 7, 7], [-1.0, -2.0, -3.0])] for _ in range(3)] + base[3:],  # three part
        [[c([5, 6], [-1.0, -2.0])]] + base[1:],  # shorter
        [[C(**vars(c([5, 6, 7], [-1.0, -2.0, -3.0])), prompt_token_ids=[1])]] + base[1:],  # another prompt
    ):
        with pytest.raises(AssertionError):
            same_completions(wrong, base)
