"""Admission over static KV slots (`rlvr.clients.local_prefill`): the prefill through the decode
step's layer functions gives the transformers forward's logits, keys and values (prompts of
different lengths, after a prefix already in the slot or one copied from the reuse cache), runs
no transformers forward, reuses each row's whole kept prefix, and the replies it starts are the
transformers path's: a few hundred prompts of a tiny generic model and of the shipped
tic-tac-toe model, greedy and seeded sampling. CPU, float32."""

from __future__ import annotations

import asyncio
import random

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from completions import same_completions

from rlvr.clients.local import LocalModel
from rlvr.clients.local_decode import SlotDecoder
from rlvr.clients.local_prefill import copy_prefixes, prefill
from rlvr.clients.local_prefix import common_prefix_len
from rlvr.clients.local_sampling import row_key
from rlvr.types import SamplingArgs

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def shipped():
    """The shipped tic-tac-toe model (17.6M parameters), float32 on the CPU."""
    lm = LocalModel("models/tictactoe-tiny", device="cpu", dtype="float32")
    return lm.model, lm.tokenizer


def _reference(model, ids: list[int]) -> tuple[torch.Tensor, list[tuple[torch.Tensor, torch.Tensor]]]:
    """The transformers forward of one prompt, alone: its last logits and each layer's keys and
    values (kv heads, tokens, head dim)."""
    out = model(input_ids=torch.tensor([ids]), use_cache=True)
    layers = out.past_key_values.layers
    return out.logits[0, -1].float(), [(layer.keys[0], layer.values[0]) for layer in layers]


@pytest.mark.parametrize("which", ["scrambled_chat", "shipped"])
def test_prefill_gives_the_transformers_logits_keys_and_values(which, request) -> None:
    """Twelve prompts of 3-90 tokens admitted together into scattered slots: four start after a
    prefix already in their slot (prefilled by an earlier admission), four after a prefix
    copied in from kept keys and values (`copy_prefixes`), four from nothing. Every row's last
    logits, and its keys and values at every position of every layer, are the transformers
    forward's of the whole prompt alone."""
    model, tokenizer = request.getfixturevalue(which)
    gen = random.Random(7)
    vocab = min(len(tokenizer), model.config.vocab_size)
    prompts = [[gen.randrange(vocab) for _ in range(gen.randrange(3, 91))] for _ in range(12)]
    slots = [9, 2, 0, 5, 11, 3, 7, 1, 4, 10, 6, 8]
    cut = [gen.randrange(1, len(p)) if i < 8 else 0 for i, p in enumerate(prompts)]
    with torch.inference_mode():
        want = [_reference(model, p) for p in prompts]
        decoder = SlotDecoder(model, graphs=False, max_length=4096)
        decoder.reserve(12, 96)
        decoder.keys.normal_()  # stale rows: nothing may be read past a row's own positions
        decoder.values.normal_()
        prefill(decoder, slots[:4], [p[:c] for p, c in zip(prompts[:4], cut[:4])], [0] * 4)
        kept = [(k[:, :, :c], v[:, :, :c]) for k, v, c in ((*_stacked(w), c) for w, c in zip(want[4:8], cut[4:8]))]
        copy_prefixes(decoder, slots[4:8], kept)
        logits = prefill(decoder, slots, [p[c:] for p, c in zip(prompts, cut)], cut)
    for i, (p, s) in enumerate(zip(prompts, slots)):
        torch.testing.assert_close(logits[i], want[i][0], atol=2e-4, rtol=1e-4)
        assert int(logits[i].argmax()) == int(want[i][0].argmax())
        for layer, (k, v) in enumerate(want[i][1]):
            torch.testing.assert_close(decoder.keys[layer, s, :, : len(p)], k, atol=1e-4, rtol=1e-4)
            torch.testing.assert_close(decoder.values[layer, s, :, : len(p)], v, atol=1e-4, rtol=1e-4)


def _stacked(want: tuple[torch.Tensor, list[tuple[torch.Tensor, torch.Tensor]]]) -> tuple[torch.Tensor, torch.Tensor]:
    """A reference's keys and values as the reuse cache keeps them: (layers, kv heads, tokens, d)."""
    return torch.stack([k for k, _ in want[1]]), torch.stack([v for _, v in want[1]])


def _sampling(i: int, t: int, seed: int) -> SamplingArgs:
    """Conversation `i`'s turn `t`: greedy every third conversation, else seeded at T = 1."""
    return SamplingArgs(
        max_tokens=8 + (5 * i + t) % 30, temperature=0.0 if i % 3 == 0 else 1.0, seed=seed + 100 * i + t
    )


def _chats(client: LocalModel, n: int, turns: int, seed: int) -> list[list]:
    """`n` conversations of `turns` turns (user messages of 1-60 words), started 2 ms apart:
    later turns extend kept prefixes and join batches that are decoding, first turns with a
    common prefix share it."""

    async def one(i: int) -> list:
        await asyncio.sleep(0.002 * i)
        words = random.Random(seed + i)
        messages = [{"role": "user", "content": "play a long game with me please " * 4 + f"game {i}"}]
        out = []
        for t in range(turns):
            c = await client.chat(messages, _sampling(i, t, seed))
            out.append(c)
            text = " ".join(
                words.choice(["go", "stop", "left", "x", "o", "board"]) for _ in range(words.randrange(1, 61))
            )
            messages = [*messages, {"role": "assistant", "content": c.text}, {"role": "user", "content": text}]
        return out

    async def main() -> list[list]:
        return await asyncio.wait_for(asyncio.gather(*(one(i) for i in range(n))), 300)

    return asyncio.run(main())


def _same_but_knife_edges(model, got: list[list], want: list[list], seed: int) -> int:
    """The same replies, logprobs within 2e-4, except where a conversation parts on a knife edge,
    checked against the model's own distribution there (a transformers forward, float64
    softmax): greedy, two tokens within 2e-3 in logit; sampled, the row's uniform within 1e-4
    of the border between the two tokens' intervals of the inverse cdf (the scrambled model
    puts mass of 1e-7 on some tokens, so the two may not be neighbours). Returns the parts."""
    parted = 0
    for i, (g, w) in enumerate(zip(got, want, strict=True)):
        for t, (a, b) in enumerate(zip(g, w, strict=True)):
            assert a.prompt_token_ids == b.prompt_token_ids, (i, t)
            k = next((k for k, (x, y) in enumerate(zip(a.token_ids, b.token_ids)) if x != y), None)
            assert a.logprobs[:k] == pytest.approx(b.logprobs[:k], abs=2e-4), (i, t)
            if k is None:
                assert a.token_ids == b.token_ids and a.finish_reason == b.finish_reason, (i, t)
                continue
            with torch.inference_mode():
                logits = model(input_ids=torch.tensor([a.prompt_token_ids + a.token_ids[:k]])).logits[0, -1].double()
            x, y = sorted((a.token_ids[k], b.token_ids[k]))
            if _sampling(i, t, seed).temperature == 0:
                assert abs(float(logits[x] - logits[y])) < 2e-3, (i, t, k, x, y)
            else:
                cdf = logits.softmax(-1).cumsum(-1)
                u = (row_key(_sampling(i, t, seed).seed, k) + 0.5) / 2**32
                assert float(cdf[x]) > u - 1e-4 and float(cdf[y - 1]) < u + 1e-4, (i, t, k, x, y, u)
            parted += 1
            break  # its later turns have other prompts
    return parted


def test_replies_are_the_transformers_paths_on_hundreds_of_prompts(scrambled_chat) -> None:
    """60 conversations of 4 turns (240 prompts of 10-300 tokens, greedy and seeded at T = 1)
    over slots, against the transformers prefill and decode (`static_cache=False`): the same
    replies, token for token, logprobs to float rounding (kept and shared prefixes among them),
    but for conversations that part on a knife edge (a few a run: the logits differ in their
    last bits, and a uniform of 5,000 draws falls within 1e-5 of a border now and then)."""
    model, tokenizer = scrambled_chat
    slots = LocalModel("tiny", model=model, tokenizer=tokenizer, static_cache=True, max_batch_size=64)
    plain = LocalModel("tiny", model=model, tokenizer=tokenizer, static_cache=False, max_batch_size=64)
    got, want = _chats(slots, 60, 4, seed=3), _chats(plain, 60, 4, seed=3)
    assert _same_but_knife_edges(model, got, want, seed=3) <= 5
    assert slots.stats.requests == 240 and slots.stats.reused_tokens > 0 and slots.stats.shared_tokens > 0


@pytest.mark.parametrize("temperature", [pytest.param(0.0, marks=pytest.mark.heavy), 1.0])  # greedy: make test-heavy
def test_tictactoe_rollouts_are_the_transformers_paths(shipped, temperature) -> None:
    """The shipped model plays 24 tic-tac-toe games in groups of 8 (about 100 prompts, first
    turns sharing their system prompt, later turns extending kept ones), greedy and seeded at
    T = 1, over slots and through the transformers path: the same replies."""
    from rlvr_tictactoe.env import load_environment

    from rlvr.engine import run_rollouts

    model, tokenizer = shipped
    env = load_environment(num_tasks=64, trap_prob=1.0, random_replies=4, max_random_move_prob=0.0)
    sampling = SamplingArgs(temperature=temperature, max_tokens=48)

    def play(static: bool) -> list[list]:
        client = LocalModel("t", model=model, tokenizer=tokenizer, static_cache=static, max_batch_size=64)
        rollouts = asyncio.run(
            run_rollouts(env, client, env.tasks("train")[:3], rollouts_per_task=8, concurrency=24, sampling=sampling)
        )
        return [[t.completion for t in r.turns] for r in rollouts]

    got, want = play(True), play(False)
    assert sum(map(len, got)) >= 80
    same_completions(got, want, abs_tol=2e-4)


def test_admission_runs_no_transformers_forward_and_reuses_whole_prefixes(scrambled_chat, monkeypatch) -> None:
    """Over slots, admitting (shared prefixes and kept ones included) never calls the model's
    transformers forward; and a conversation's next turn admitted together with a longer fresh
    prompt starts from all of its kept prefix (the transformers path cuts every row's kept
    prefix to prefill as many tokens as the longest new part: here, none of it)."""
    model, tokenizer = scrambled_chat
    client = LocalModel("t", model=model, tokenizer=tokenizer, static_cache=True)

    def no_forward(*args, **kwargs):
        raise AssertionError("the transformers forward ran")

    monkeypatch.setattr(type(model), "forward", no_forward)
    greedy = SamplingArgs(max_tokens=6, temperature=0.0)
    first = [{"role": "user", "content": "hello there"}]
    reply = asyncio.run(client.chat(first, greedy))
    nxt = [*first, {"role": "assistant", "content": reply.text}, {"role": "user", "content": "and"}]
    fresh = [{"role": "user", "content": "a long fresh question " * 12}]
    asyncio.run(client.chat([{"role": "user", "content": "x"}], greedy))  # its admission keeps the first reply

    async def together():
        return await asyncio.gather(client.chat(nxt, greedy), client.chat(fresh, greedy))

    before = client.stats.reused_tokens, client.stats.prompt_tokens, client.stats.prefills
    a, b = asyncio.run(together())
    assert client.stats.prefills == before[2] + 1  # admitted together
    kept = common_prefix_len([reply.prompt_token_ids + reply.token_ids[:-1], a.prompt_token_ids])
    assert kept > len(reply.prompt_token_ids)
    assert len(b.prompt_token_ids) > len(a.prompt_token_ids) - kept  # the fresh prompt is the longer new part
    assert client.stats.reused_tokens - before[0] == kept
    assert client.stats.prompt_tokens - before[1] == len(a.prompt_token_ids) - kept + len(b.prompt_token_ids)
