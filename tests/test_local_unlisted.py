"""`LocalModel.draw_unlisted` (`rlvr.clients.local_unlisted`): replies outside an enumerated list,
drawn directly, follow the sampler's law given that they are not listed, checked against every
two-token sequence's exact probability on a tiny model (float64, CPU)."""

from __future__ import annotations

import asyncio
import math
from collections import Counter

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from test_local_enumerate import MESSAGES, load, sampler_probs, text_of, tiny_dir  # noqa: F401 (a fixture)

from rlvr.types import SamplingArgs

pytestmark = pytest.mark.usefixtures("one_thread")

T = 1.3
SAMPLING = SamplingArgs(temperature=T, max_tokens=2)


def sequences(lm) -> dict[tuple[int, ...], float]:
    """Every token sequence of at most 2 tokens (a final EOS included, as `chat`'s token_ids)
    and its exact probability."""
    prompt = lm.render(MESSAGES)
    vocab = lm.model.config.vocab_size
    with torch.no_grad():
        first = sampler_probs(lm.model(torch.tensor([prompt])).logits[0, -1], T)
        second = sampler_probs(lm.model(torch.tensor([[*prompt, t] for t in range(vocab)])).logits[:, -1], T)
    out: dict[tuple[int, ...], float] = {}
    for t1 in range(vocab):
        if t1 in lm.eos_ids:
            out[(t1,)] = float(first[t1])
            continue
        for t2 in range(vocab):
            out[(t1, t2)] = float(first[t1] * second[t1, t2])
    return out


@pytest.fixture(scope="module")
def listed_model(tiny_dir, scramble):  # noqa: F811
    """The tiny model (float64) after a distribution with a floor that leaves a few % unlisted,
    the exact probability of each sequence, and the listed ids."""
    lm = load(tiny_dir, scramble, dtype=torch.float64, seed=3)
    asyncio.run(lm.reply_distribution(MESSAGES, SAMPLING, floor=3e-4))
    return lm, sequences(lm), lm.listed_ids(MESSAGES)


def test_the_exits_hold_exactly_the_mass_left_unlisted(listed_model) -> None:
    lm, exact, listed = listed_model
    record = lm._enumerator.listed[tuple(lm.render(MESSAGES))]
    unlisted = 1.0 - sum(exact[ids] for ids in listed)
    assert 0.02 < unlisted < 0.5
    assert math.isclose(sum(m for m, _, _ in record.exits), unlisted, rel_tol=1e-9)
    by_first: dict[int, list[tuple[int, ...]]] = {}
    for ids in exact:
        if ids not in listed:
            by_first.setdefault(ids[0], []).append(ids)
    assert {len(prefix) for _, prefix, _ in record.exits} == {0, 1}  # the root's children left out, and others'
    for mass, prefix, kept in record.exits:  # each exit's mass is that of the unlisted sequences through it
        through = [ids for t, group in by_first.items() for ids in group] if not prefix else by_first[prefix[0]]
        if kept is not None:
            through = [ids for ids in through if len(ids) > len(prefix) and ids[len(prefix)] not in kept]
        assert math.isclose(sum(exact[ids] for ids in through), mass, rel_tol=1e-9, abs_tol=1e-15)


def test_draws_follow_the_law_of_the_unlisted_sequences(listed_model) -> None:
    """1,500 draws: none listed, each one token or two as often as the unlisted law says (4
    standard errors), and their first tokens a chi-square fit to that law (bins of expected
    count >= 5, the rest pooled; the statistic below df + 6 sqrt(2 df))."""
    lm, exact, listed = listed_model
    unlisted = {ids: p for ids, p in exact.items() if ids not in listed}
    total = sum(unlisted.values())
    n = 1500

    async def go():
        return await asyncio.gather(*(lm.draw_unlisted(MESSAGES, SAMPLING, seed=s) for s in range(n)))

    drawn = [tuple(c.token_ids) for c in asyncio.run(go())]
    assert not set(drawn) & listed
    assert all(ids in unlisted for ids in drawn)
    short = sum(p for ids, p in unlisted.items() if len(ids) == 1) / total
    sigma = math.sqrt(short * (1 - short) / n)
    assert abs(sum(len(ids) == 1 for ids in drawn) / n - short) <= 4 * sigma + 1 / n
    law: Counter[int] = Counter()
    for ids, p in unlisted.items():
        law[ids[0]] += p / total
    seen = Counter(ids[0] for ids in drawn)
    big = [t for t, q in law.items() if q * n >= 5]
    bins = [(seen[t], law[t] * n) for t in big]
    bins.append((n - sum(seen[t] for t in big), n - sum(e for _, e in bins)))
    stat = sum((o - e) ** 2 / e for o, e in bins if e > 0)
    df = len(bins) - 1
    assert df >= 10 and stat < df + 6 * math.sqrt(2 * df), (stat, df)


def test_a_draw_is_seeded_and_only_for_the_settings_listed(listed_model) -> None:
    lm, _, _ = listed_model

    def draw(sampling, messages=MESSAGES, seed=5):
        return asyncio.run(lm.draw_unlisted(messages, sampling, seed=seed))

    assert draw(SAMPLING).token_ids == draw(SAMPLING).token_ids
    assert len({tuple(draw(SAMPLING, seed=s).token_ids) for s in range(20)}) > 10
    assert draw(SAMPLING.replace(temperature=1.0)) is None  # listed at another temperature
    assert draw(SAMPLING.replace(max_tokens=3)) is None
    assert draw(SAMPLING, messages=[{"role": "user", "content": "never asked"}]) is None
    for s in range(20):
        c = draw(SAMPLING, seed=s)
        body = [t for t in c.token_ids if t not in lm.eos_ids]
        assert c.text == text_of(lm.tokenizer.decode(body, skip_special_tokens=True))
        assert c.finish_reason == ("length" if len(body) == 2 else "stop") or c.tool_calls


def test_draws_end_at_a_stop_string_as_the_listed_replies_do(tiny_dir, scramble) -> None:  # noqa: F811
    """With a stop string: no draw is listed, a draw's text is cut before the stop string it
    hit, and where both a stop string and max_tokens end a reply, the stop string wins (as in
    the enumeration and in `chat`)."""
    lm = load(tiny_dir, scramble, dtype=torch.float64, seed=3)
    sampling = SamplingArgs(temperature=1.3, max_tokens=3, stop=["e"])
    asyncio.run(lm.reply_distribution(MESSAGES, sampling, floor=1e-3))
    listed = lm.listed_ids(MESSAGES)

    async def go():
        return await asyncio.gather(*(lm.draw_unlisted(MESSAGES, sampling, seed=s) for s in range(200)))

    drawn = asyncio.run(go())
    assert not {tuple(c.token_ids) for c in drawn} & listed
    stopped = [c for c in drawn if "e" in lm.tokenizer.decode(c.token_ids, skip_special_tokens=True)]
    assert len(stopped) > 20 and all("e" not in c.text and c.finish_reason == "stop" for c in stopped)
