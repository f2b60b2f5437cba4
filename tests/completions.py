"""Comparing two decoders' completions where the last bits of a logit may differ."""

from __future__ import annotations

import pytest


def same_completions(got: list, want: list, abs_tol: float = 1e-4) -> None:
    """The same completions, conversation by conversation (a list of turns each, or one
    completion each); logprobs to float tolerance: a row's logits differ in the last bits with
    the number of slots a step decodes (which depends on when requests arrive) and with the
    kernels (compiled or not). Those bits can tip a token that sits on a knife edge, once in
    thousands: two greedy candidates within 1e-3 of each other, or a sampled uniform on the
    border of two neighbouring tokens of the inverse cdf (ids one apart). A conversation may
    part there, once or twice in a run; it is compared up to that token and dropped after it.
    Any other difference fails, a turn's prompt ids included where completions carry them."""
    parted = []
    for i, (g, w) in enumerate(zip(got, want, strict=True)):
        for a, b in zip(g if isinstance(g, list) else [g], w if isinstance(w, list) else [w], strict=True):
            assert getattr(a, "prompt_token_ids", None) == getattr(b, "prompt_token_ids", None), (i, "prompt")
            k = next((k for k, (x, y) in enumerate(zip(a.token_ids, b.token_ids)) if x != y), None)
            if k is None:
                assert a.token_ids == b.token_ids, (i, "lengths")
                assert a.logprobs == pytest.approx(b.logprobs, abs=abs_tol), i
                assert (a.text, a.finish_reason) == (b.text, b.finish_reason), i
                continue
            assert a.logprobs[:k] == pytest.approx(b.logprobs[:k], abs=abs_tol), i
            tie = abs(a.logprobs[k] - b.logprobs[k]) < 1e-3
            assert tie or abs(a.token_ids[k] - b.token_ids[k]) == 1, (i, k, a.token_ids[k], b.token_ids[k])
            parted.append((i, k))
            break
    assert len(parted) <= 2, parted
