"""`LocalModel.reply_distribution` (`rlvr.clients.local_enumerate`): the exact distribution of
the replies `chat` samples, on tiny models rlvr builds (CPU).

The expected numbers are computed here from full forward passes (no KV cache) and the
sampler's own formula (weights exp'd in float32 from the row's maximum, normalised in float64),
never from the enumerator: a brute-force product over every token sequence.
"""

from __future__ import annotations

import asyncio
import math
from collections import defaultdict
from typing import Any

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from rlvr.clients.local import LocalModel
from rlvr.clients.local_enumerate import Enumerator
from rlvr.clients.local_prefix import prefix_hashes
from rlvr.clients.tool_calls import parse_tool_calls
from rlvr.commands.turns import CountingClient
from rlvr.exact_sampled import ReplyDistribution, takes_floor
from rlvr.models import build_tiny_model
from rlvr.types import SamplingArgs

pytestmark = pytest.mark.usefixtures("one_thread")

MESSAGES = [{"role": "user", "content": "play"}]


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    return build_tiny_model(tmp_path_factory.mktemp("tiny"), preset="tiny", vocab_size=512)


def load(tiny_dir, scramble, *, dtype=torch.float32, seed=0) -> LocalModel:
    model = transformers.AutoModelForCausalLM.from_pretrained(tiny_dir)
    tokenizer = transformers.AutoTokenizer.from_pretrained(tiny_dir)
    scramble(model, seed)
    return LocalModel("tiny", model=model.to(dtype).eval(), tokenizer=tokenizer, static_cache=False)


def sampler_probs(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    """The sampler's distribution of each row (`local_sampling.pick` over `draw`'s weights)."""
    scaled = logits.float() / temperature
    weights = (scaled - scaled.amax(-1, keepdim=True)).exp()
    return weights.double() / weights.sum(-1, keepdim=True, dtype=torch.float64)


def brute_force(lm: LocalModel, temperature: float) -> dict[str, float]:
    """Every reply of at most 2 tokens and its probability: for each first token t1 (from one
    forward of the prompt) and each second token (from one forward of prompt + t1, all t1 in
    one batch), the product of the two steps' probabilities, summed by decoded text."""
    prompt = lm.render(MESSAGES)
    vocab = lm.model.config.vocab_size
    with torch.no_grad():
        first = sampler_probs(lm.model(torch.tensor([prompt])).logits[0, -1], temperature)
        rows = torch.tensor([[*prompt, t] for t in range(vocab)])
        second = sampler_probs(lm.model(rows).logits[:, -1], temperature)
    out: dict[str, float] = defaultdict(float)
    decode = lm.tokenizer.decode
    for t1 in range(vocab):
        if t1 in lm.eos_ids:
            out[""] += float(first[t1])
            continue
        for t2 in range(vocab):
            ids = [t1] if t2 in lm.eos_ids else [t1, t2]
            out[text_of(decode(ids, skip_special_tokens=True))] += float(first[t1] * second[t1, t2])
    return dict(out)


def text_of(decoded: str) -> str:
    """`chat`'s text of a decoded reply: tool-call blocks taken out (the tiny tokenizer has a
    `<tool_call>` token)."""
    return parse_tool_calls(decoded)[0] if "<tool_call>" in decoded else decoded


def test_the_distribution_is_the_product_of_the_sampler_steps_over_every_sequence(tiny_dir, scramble) -> None:
    """float64 weights (logits cast to float32 as the sampler reads them): the enumeration,
    with no floor and max_tokens 2, lists every reply with the brute-force probability to
    1e-9, and the probabilities sum to 1."""
    lm = load(tiny_dir, scramble, dtype=torch.float64)
    sampling = SamplingArgs(temperature=1.3, max_tokens=2)
    got = dict(asyncio.run(lm.reply_distribution(MESSAGES, sampling)))
    want = brute_force(lm, 1.3)
    assert set(got) == set(want)
    assert max(abs(got[t] - want[t]) for t in want) < 1e-9
    assert abs(sum(got.values()) - 1.0) < 1e-12
    assert len(got) > 1000  # many replies: the tree was enumerated, not one path
    assert lm._enumerator is not None and lm._enumerator.forwards == 1 + math.ceil(lm.model.config.vocab_size / 64)


class Recording(Enumerator):
    """The enumerator, keeping each listed token sequence's probability."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.sequences: dict[tuple[int, ...], float] = {}

    def _list(self, job, ids, hit, p) -> None:
        self.sequences[tuple(ids)] = p
        super()._list(job, ids, hit, p)


def listed_and_drawn(lm: LocalModel, floor: float, draws: int) -> tuple[dict[str, float], list[Any]]:
    """The reply distribution of MESSAGES at T = 1 above `floor`, and `draws` replies `chat` samples."""
    sampling = SamplingArgs(temperature=1.0, max_tokens=3)

    async def go():
        dist = dict(await lm.reply_distribution(MESSAGES, sampling, floor=floor))
        return dist, await asyncio.gather(*(lm.chat(MESSAGES, sampling.replace(seed=s)) for s in range(draws)))

    return asyncio.run(go())


def test_each_sampled_reply_is_listed_with_the_probability_of_its_logprobs(tiny_dir, scramble) -> None:
    """200 replies `chat` draws at T = 1 (its batched static-slot decoder), each one above the
    floor listed as a token sequence with probability exp(sum of its logprobs), relative 1e-4
    (two float32 forwards); its text's probability at least that (sequences merge by text)."""
    lm = load(tiny_dir, scramble, seed=3)
    lm.static_cache = True
    recording = lm._enumerator = Recording(lm._decoding(), None)
    dist, draws = listed_and_drawn(lm, floor=1e-7, draws=200)
    assert 0.95 < sum(dist.values()) <= 1.0 + 1e-9
    checked = 0
    for c in draws:
        ids = tuple(c.token_ids)
        p = math.exp(sum(c.logprobs))
        if p < 1e-6:  # a reply below the floor (with a margin for float32) need not be listed
            continue
        checked += 1
        assert ids in recording.sequences, c.text
        assert recording.sequences[ids] == pytest.approx(p, rel=1e-4)
        assert dist[c.text] >= p * (1 - 1e-4)
    assert checked >= 180


def test_listed_ids_tell_the_listed_part_of_draws_by_their_ids(tiny_dir, scramble) -> None:
    """`listed_ids` (what `rlvr.exact_tail` draws its unlisted replies against): the share of
    `chat` draws whose ids it lacks is the unlisted mass (4 standard errors), and every draw
    whose ids it has is a listed text. Judged by text instead, draws of a listed text through
    ids the enumeration never reached would be wrongly taken as listed."""
    lm = load(tiny_dir, scramble, seed=3)
    lm.static_cache = True
    dist, draws = listed_and_drawn(lm, floor=1e-3, draws=400)
    listed = lm.listed_ids(MESSAGES)
    assert listed and lm.listed_ids([{"role": "user", "content": "something else"}]) is None
    unlisted = 1.0 - sum(dist.values())
    outside = [c for c in draws if tuple(c.token_ids) not in listed]
    sigma = math.sqrt(unlisted * (1 - unlisted) / len(draws))
    assert 0.05 < unlisted and abs(len(outside) / len(draws) - unlisted) <= 4 * sigma + 1 / len(draws)
    assert all(c.text in dist for c in draws if tuple(c.token_ids) in listed)


def test_top_p_keeps_the_smallest_set_that_reaches_p(tiny_dir, scramble) -> None:
    """One-token replies at top_p 0.5: the tokens listed are the most probable ones whose mass
    first reaches 0.5, renormalised; every draw of `chat` at that top_p is one of them."""
    lm = load(tiny_dir, scramble, seed=5)
    sampling = SamplingArgs(temperature=1.0, top_p=0.5, max_tokens=1)
    with torch.no_grad():
        probs = sampler_probs(lm.model(torch.tensor([lm.render(MESSAGES)])).logits[0, -1], 1.0)
    order = probs.argsort(descending=True).tolist()
    kept, mass = [], 0.0
    for t in order:
        kept.append(t)
        mass += float(probs[t])
        if mass >= 0.5:
            break
    decode = lm.tokenizer.decode
    want: dict[str, float] = defaultdict(float)
    for t in kept:
        want["" if t in lm.eos_ids else text_of(decode([t], skip_special_tokens=True))] += float(probs[t]) / mass

    async def go():
        dist = dict(await lm.reply_distribution(MESSAGES, sampling))
        whole = await lm.reply_distribution(MESSAGES, sampling.replace(top_p=1.0))
        draws = await asyncio.gather(*(lm.chat(MESSAGES, sampling.replace(seed=s)) for s in range(100)))
        return dist, whole, draws

    dist, whole, draws = asyncio.run(go())
    assert 1 < len(kept) < len(whole)
    assert set(dist) == set(want)
    assert max(abs(dist[t] - want[t]) for t in want) < 1e-6
    assert abs(sum(dist.values()) - 1.0) < 1e-9
    assert {c.text for c in draws} <= set(dist)


def test_the_floor_and_the_budget_leave_mass_unlisted_and_greedy_is_one_reply(tiny_dir, scramble) -> None:
    lm = load(tiny_dir, scramble, seed=3)
    sampling = SamplingArgs(temperature=1.0, max_tokens=4)

    async def go():
        full = await lm.reply_distribution(MESSAGES, sampling, floor=1e-6)
        floored = await lm.reply_distribution(MESSAGES, sampling, floor=1e-2)
        budget = await lm.reply_distribution(MESSAGES, sampling, floor=1e-6, max_nodes=3)
        greedy = await lm.reply_distribution(MESSAGES, sampling.replace(temperature=0.0))
        chat = await lm.chat(MESSAGES, sampling.replace(temperature=0.0))
        return full, floored, budget, greedy, chat

    full, floored, budget, greedy, chat = asyncio.run(go())
    whole = dict(full)
    # (a probability varies by ~1e-5 relative with the rows it is batched with: float32 logits)
    assert all(p >= 1e-2 and p <= whole[t] * (1 + 1e-4) for t, p in floored)
    assert sum(p for _, p in floored) < sum(p for _, p in full) - 1e-3
    assert sum(p for _, p in budget) < sum(p for _, p in full)
    assert greedy == [(chat.text, 1.0)]


def test_a_counting_wrapper_passes_the_distribution_and_its_floor_through(tiny_dir, scramble) -> None:
    lm = load(tiny_dir, scramble)
    counted = CountingClient(lm)
    assert isinstance(counted, ReplyDistribution) and takes_floor(counted)
    sampling = SamplingArgs(temperature=1.0, max_tokens=2)
    got = asyncio.run(counted.reply_distribution(MESSAGES, sampling, floor=1e-3))
    assert got and all(p >= 1e-3 for _, p in got)


def test_a_prompt_that_extends_an_earlier_one_prefills_only_its_new_tokens(tiny_dir, scramble) -> None:
    """The next turn of a conversation starts from the kept keys and values of the last one's
    prompt, and its distribution is the one a fresh client computes (float32: 1e-4 relative)."""
    lm, fresh = load(tiny_dir, scramble, seed=3), load(tiny_dir, scramble, seed=3)
    sampling = SamplingArgs(temperature=1.0, max_tokens=3)
    later = [*MESSAGES, {"role": "assistant", "content": "x"}, {"role": "user", "content": "again"}]

    async def go():
        await lm.reply_distribution(MESSAGES, sampling, floor=1e-3)
        assert lm._enumerator is not None
        lm._enumerator.prefix.check_weights(lm.model)
        hit = lm._enumerator.prefix.lookup(lm.render(later), prefix_hashes(lm.render(later)))[1]
        return (
            hit,
            await lm.reply_distribution(later, sampling, floor=1e-3),
            await fresh.reply_distribution(later, sampling, floor=1e-3),
        )

    hit, kept, alone = asyncio.run(go())
    assert hit == len(lm.render(MESSAGES))
    assert [t for t, _ in kept] == [t for t, _ in alone] and len(kept) > 3
    assert all(p == pytest.approx(q, rel=1e-4) for (_, p), (_, q) in zip(kept, alone))


@pytest.mark.heavy  # minutes of CPU: the shipped model's walk, 200 tail games and 400 sampled games (make test-heavy)
@pytest.mark.timeout(900)
def test_the_walk_with_enumeration_bounds_a_large_sample_of_games() -> None:
    """`rlvr.exact_sampled` on the shipped tic-tac-toe model with its exact distributions (no
    draws), on the games where it moves first against the optimal opponent: a deterministic
    bound whose upper side holds the mass left unlisted or pruned, and that contains the rates
    of 400 such games it plays at T = 1 (4 standard errors); so does the narrower one that 200
    games drawn from the unplayed mass give (`rlvr.exact_tail`)."""
    from rlvr_tictactoe.env import load_environment

    from rlvr.exact_sampled import Settings, enumerate_sampled
    from rlvr.exact_tail import sample_tail, tighten
    from rlvr.report.exact_sampled import sampled_section

    lm = LocalModel("models/tictactoe-tiny", device="cpu", max_batch_size=256)
    env = load_environment()
    first = env.tree_roots(0)[0]  # X moves first (no opening by O)
    assert first.info["model_starts"]
    whole = env.tree_weights(first)["optimal"]
    env.tree_roots = lambda seed: [first]
    env.tree_opponents = ("optimal",)
    env.tree_weights = lambda task: {"optimal": task.info["line_weights"]["optimal"] / whole}
    sampling = env.sampling.replace(temperature=1.0)
    result = asyncio.run(enumerate_sampled(env, lm, sampling, Settings(min_reach=1e-3)))
    assert result.samples_drawn == 0 and result.decisions and not any(d.samples for d in result.decisions)
    table = result.bounds().table(result.opponents, ["win", "draw", "loss", "timeout"])["optimal"]
    missing = result.sampled_summary()["missing_pct"]["optimal"]
    assert missing["unlisted"] > 0 and missing["pruned"] < 1e-9  # the floor lists no reply below min_reach
    left = (missing["unlisted"] + missing["pruned"]) / 100
    assert table["covered"][0] == pytest.approx(1 - left, abs=1e-9)
    for name in ("draw", "loss"):
        est, lo, hi = table[name]
        assert lo == pytest.approx(est, abs=1e-12) and hi == pytest.approx(min(1.0, est + left), abs=1e-9)
    assert table["draw"][2] - table["draw"][1] < 0.2  # not a vacuous bound
    # the tail, sampled: 200 games from the unplayed mass narrow the interval around the same rates
    tails = asyncio.run(
        sample_tail(env, lm, sampling, result.decisions, result.contexts, result.opponents, ["draw", "loss"], 200)
    )
    assert tails["optimal"].games == 200 and tails["optimal"].unknown == 0
    assert tails["optimal"].tries <= 200  # each unlisted reply drawn directly (LocalModel.draw_unlisted)
    tight = tighten(result.bounds().table(result.opponents, ["draw", "loss"]), tails, 0.025)["optimal"]
    assert all(tight[n][2] - tight[n][1] < 0.75 * (table[n][2] - table[n][1]) for n in ("draw", "loss"))
    page = "".join(sampled_section({"exact": {"sampled": result.sampled_summary()}}))
    risky = result.sampled_summary()["risky"]["optimal"]
    assert risky and page.count("<pre>") == len(risky) and "unlisted" in page  # boards in the report

    games = load_environment(opponent="optimal", model_starts="always")
    tasks = games.tasks("eval")

    async def play():
        return await asyncio.gather(
            *(
                games.rollout(lm, task, sampling.replace(seed=1000 * k + i), 1000 * k + i)
                for k in range(2)
                for i, task in enumerate(tasks)
            )  # fmt: skip
        )

    outcomes = [s.outcome or "timeout" for s in asyncio.run(play())]
    n = len(outcomes)
    for name in ("draw", "loss"):
        rate = outcomes.count(name) / n
        sigma = math.sqrt(max(rate * (1 - rate), 1 / n) / n)
        for bounds in (table, tight):
            _, lo, hi = bounds[name]
            assert lo - 4 * sigma <= rate <= hi + 4 * sigma, (name, rate, lo, hi)
