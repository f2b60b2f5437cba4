"""LocalModel: batched generation on a tiny model (CPU), sampling, logprobs, tool calls, errors."""

from __future__ import annotations

import asyncio
import random
import subprocess
import sys
import time

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from completions import same_completions

from rlvr import ChatClient, MultiTurnEnv, Policy, Rubric
from rlvr.clients.local import LocalModel
from rlvr.clients.tool_calls import parse_tool_calls
from rlvr.engine import run_rollouts
from rlvr.errors import ClientClosedError, ModelError, PromptTooLongError
from rlvr.models import build_tiny_model
from rlvr.types import SamplingArgs

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    return build_tiny_model(tmp_path_factory.mktemp("tiny"), preset="tiny")


@pytest.fixture(scope="module", params=[False, True], ids=["dynamic", "static"])
def lm(tiny_dir, request, scramble) -> LocalModel:
    """A tiny model with large random weights: greedy replies vary with the prompt and never
    emit EOS, which makes batching mistakes show up as different token ids. Every test that
    takes it runs twice: decoding over transformers' DynamicCache, and over static KV slots
    (`rlvr.clients.local_slots`, without CUDA graphs on the CPU)."""
    model = transformers.AutoModelForCausalLM.from_pretrained(tiny_dir)
    tokenizer = transformers.AutoTokenizer.from_pretrained(tiny_dir)
    scramble(model)
    return LocalModel("tiny", model=model.eval(), tokenizer=tokenizer, max_batch_size=64, static_cache=request.param)


def like(lm: LocalModel, **kwargs) -> LocalModel:
    """Another client on `lm`'s model, with the same decoder."""
    return LocalModel("tiny", model=lm.model, tokenizer=lm.tokenizer, static_cache=lm.static_cache, **kwargs)


def ask(i: int) -> list[dict]:
    return [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": f"question {i}: " + "why " * (i % 9)},
    ]


def run(coro):
    return asyncio.run(coro)


def test_loads_a_saved_model_and_answers(tiny_dir) -> None:
    lm = LocalModel(str(tiny_dir), device="cpu")
    c = run(lm.chat(ask(1), SamplingArgs(max_tokens=7, temperature=1.0, seed=3)))
    expected_prompt = lm.tokenizer.apply_chat_template(ask(1), add_generation_prompt=True, tokenize=False)
    assert lm.tokenizer.decode(c.prompt_token_ids) == expected_prompt
    assert 1 <= len(c.token_ids) <= 7 and len(c.logprobs) == len(c.token_ids)
    assert c.usage.prompt_tokens == len(c.prompt_token_ids) and c.usage.completion_tokens == len(c.token_ids)
    assert c.finish_reason == ("length" if len(c.token_ids) == 7 else "stop")
    assert lm.name == str(tiny_dir) and lm.model.dtype == torch.float32


def test_batched_greedy_equals_one_at_a_time(lm) -> None:
    """Requests of different prompt lengths and max_tokens arrive staggered, so rows join a
    running batch (cache merge) and leave it early (cache pruning) at many points."""

    def sampling(i):
        return SamplingArgs(max_tokens=3 + (i * 7) % 29, temperature=0.0)

    async def staggered(i):
        await asyncio.sleep(random.Random(i).random() * 0.2)
        return await lm.chat(ask(i), sampling(i))

    async def main():
        batched = await asyncio.gather(*(staggered(i) for i in range(40)))
        alone = [await lm.chat(ask(i), sampling(i)) for i in range(40)]
        return batched, alone

    before = lm.stats.prefills
    batched, alone = run(main())
    same_completions(batched, alone)
    assert len({tuple(c.token_ids[:3]) for c in batched}) > 10  # replies really differ
    assert lm.stats.prefills - before < 80  # some requests joined together


def test_sliding_window_models_fall_back_to_waves_and_stay_exact(tiny_dir, scramble) -> None:
    """A sliding-window cache cannot be merged: new requests wait for an empty batch."""
    tokenizer = transformers.AutoTokenizer.from_pretrained(tiny_dir)
    config = transformers.MistralConfig(
        vocab_size=len(tokenizer),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        sliding_window=12,
        eos_token_id=2,
    )
    torch.manual_seed(0)
    model = scramble(transformers.MistralForCausalLM(config).eval())
    sw = LocalModel("mistral", model=model, tokenizer=tokenizer, max_batch_size=8)

    def sampling(i):
        return SamplingArgs(max_tokens=3 + (i * 7) % 29, temperature=0.0)

    async def main():
        async def staggered(i):
            await asyncio.sleep(random.Random(i).random() * 0.1)
            return await sw.chat(ask(i), sampling(i))

        batched = await asyncio.gather(*(staggered(i) for i in range(20)))
        return batched, [await sw.chat(ask(i), sampling(i)) for i in range(20)]

    batched, alone = run(main())
    same_completions(batched, alone)
    assert sw.stats.max_batch > 1


def _forward_logprobs(lm, c, temperature: float) -> list[float]:
    ids = torch.tensor([c.prompt_token_ids + c.token_ids])
    with torch.no_grad():
        logits = lm.model(ids).logits[0].float() / temperature
    logp = torch.log_softmax(logits, dim=-1)
    start = len(c.prompt_token_ids) - 1
    return [logp[start + k, t].item() for k, t in enumerate(c.token_ids)]


@pytest.mark.parametrize("temperature", [0.0, 0.7, 1.0])
def test_logprobs_match_a_forward_pass(lm, temperature) -> None:
    async def main():
        return await asyncio.gather(
            *(lm.chat(ask(i), SamplingArgs(max_tokens=12, temperature=temperature, seed=i)) for i in range(6))
        )

    for c in run(main()):
        expected = _forward_logprobs(lm, c, temperature or 1.0)  # greedy: logprobs at T = 1
        assert c.logprobs == pytest.approx(expected, abs=2e-4)


def test_64_concurrent_requests_share_few_batched_steps(lm) -> None:
    before = (lm.stats.prefills, lm.stats.decode_steps, lm.stats.requests)

    async def main():
        return await asyncio.gather(*(lm.chat(ask(i), SamplingArgs(max_tokens=16, temperature=1.0)) for i in range(64)))

    out = run(main())
    prefills = lm.stats.prefills - before[0]
    steps = lm.stats.decode_steps - before[1]
    assert lm.stats.requests - before[2] == 64 and all(1 <= len(c.token_ids) <= 16 for c in out)
    assert prefills <= 4, prefills  # 64 requests, at most a handful of admissions
    assert steps <= 4 * 15, steps  # one-at-a-time would take 64 * 15 steps
    assert lm.stats.max_batch >= 32


def test_seeded_sampling_is_reproducible_whatever_shares_the_batch(lm) -> None:
    def s(seed):
        return SamplingArgs(max_tokens=20, temperature=1.0, seed=seed)

    async def main():
        crowd = await asyncio.gather(*(lm.chat(ask(i % 3), s(i)) for i in range(12)))
        alone = await lm.chat(ask(1), s(4))
        return crowd, alone

    crowd, alone = run(main())
    same_completions([crowd[4]], [alone])
    assert len({tuple(c.token_ids) for c in crowd}) == 12  # different seeds, different samples
    assert crowd[1].token_ids != crowd[4].token_ids  # same prompt, other seed


def test_tiny_top_p_is_greedy(lm) -> None:
    async def main():
        greedy = await lm.chat(ask(5), SamplingArgs(max_tokens=10, temperature=0.0))
        nucleus = await lm.chat(ask(5), SamplingArgs(max_tokens=10, temperature=1.5, top_p=1e-6, seed=1))
        return greedy, nucleus

    greedy, nucleus = run(main())
    assert nucleus.token_ids == greedy.token_ids


def test_stop_strings_eos_and_max_tokens_end_a_reply(lm) -> None:
    greedy = SamplingArgs(max_tokens=20, temperature=0.0)
    prompt, full = next((ask(i), c) for i in range(50) if (c := run(lm.chat(ask(i), greedy))).finish_reason == "length")
    assert len(full.token_ids) == 20 and not set(full.token_ids) & lm.eos_ids
    cut = full.text[len(full.text) // 2 :][:3]
    stopped = run(lm.chat(prompt, greedy.replace(stop=[cut])))
    assert stopped.finish_reason == "stop" and stopped.text == full.text[: full.text.find(cut)]
    assert stopped.token_ids == full.token_ids[: len(stopped.token_ids)] and len(stopped.token_ids) < 20
    marked = like(lm)  # a new client: its worker reads eos_ids when it starts
    marked.eos_ids = frozenset({full.token_ids[4]})  # pretend the 5th token is the end-of-turn marker
    eos = run(marked.chat(prompt, greedy))
    first = full.token_ids.index(full.token_ids[4])
    assert eos.finish_reason == "stop" and eos.token_ids == full.token_ids[: first + 1]
    assert eos.text == lm.tokenizer.decode(full.token_ids[:first], skip_special_tokens=True)


def test_prompt_too_long_and_context_cap(lm) -> None:
    n = len(lm.render(ask(3)))
    saved = lm.context_length
    try:
        lm.context_length = n
        with pytest.raises(PromptTooLongError, match=f"prompt has {n} tokens"):
            run(lm.chat(ask(3), SamplingArgs(max_tokens=5)))
        lm.context_length = n + 3  # room for 3 tokens only
        c = run(lm.chat(ask(3), SamplingArgs(max_tokens=50, temperature=0.0)))
        assert len(c.token_ids) == 3 and c.finish_reason == "length"
    finally:
        lm.context_length = saved


def test_a_given_reply_is_the_ids_it_would_be_sampled_as_and_the_next_prompt_extends_them(lm) -> None:
    text = "<think>no threat</think>\n<move>4</move>"
    given = run(lm.give(ask(1), text))
    assert given.finish_reason == "given" and given.text == text and given.logprobs is None
    assert given.token_ids[-1] in lm.eos_ids and lm.tokenizer.decode(given.token_ids[:-1]) == text
    assert given.prompt_token_ids == lm.render(ask(1))
    after = lm.render([*ask(1), given.message(), {"role": "user", "content": "next"}])
    assert after[: len(given.prompt_token_ids) + len(given.token_ids)] == given.prompt_token_ids + given.token_ids
    hostile = "\ud800 lone surrogate <think> unclosed " + "x" * 2_000  # not what the template re-reads
    odd = run(lm.give(ask(1), hostile))
    assert odd.token_ids[-1] in lm.eos_ids and len(odd.token_ids) > 100 and odd.text == hostile
    saved = lm.context_length
    try:
        lm.context_length = len(given.prompt_token_ids) + len(given.token_ids) - 1  # one id short
        with pytest.raises(PromptTooLongError, match="given reply"):
            run(lm.give(ask(1), text))
    finally:
        lm.context_length = saved


def test_a_repeated_prompt_is_rendered_once(lm, monkeypatch) -> None:
    client = like(lm)
    calls = []
    template = client.tokenizer.apply_chat_template
    monkeypatch.setattr(client.tokenizer, "apply_chat_template", lambda *a, **k: calls.append(1) or template(*a, **k))
    first = client.render(ask(1))
    assert client.render(ask(1)) == first and len(calls) == 1  # a GRPO group: one render
    assert client.render(ask(2)) != first and len(calls) == 2
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
    assert client.render(ask(1), tools) != first and len(calls) == 3  # tools are part of the key


def test_a_later_turn_is_tokenized_from_the_previous_prompt(lm) -> None:
    client = like(lm)
    reply = {"role": "assistant", "content": "\n\n<move>4</move>"}  # blank lines first: no naive split
    later = [*ask(1), reply, {"role": "user", "content": " next"}]
    text = client.tokenizer.apply_chat_template(later, add_generation_prompt=True, tokenize=False)
    first = client.tokenizer.apply_chat_template(ask(1), add_generation_prompt=True, tokenize=False)
    client.render(ask(1))
    before = client.prompts.stats.chars
    assert client.render(later) == client.tokenizer(text, add_special_tokens=False)["input_ids"]
    # tokenized from the generation prompt's <|im_start|> on: what the turn added, and that marker
    assert client.prompts.stats.extended == 1
    assert client.prompts.stats.chars - before == len(text) - first.rindex("<|im_start|>")


def test_tools_reach_the_chat_template(lm) -> None:
    tool = {
        "type": "function",
        "function": {
            "name": "lookup_weather",
            "description": "d",
            "parameters": {"type": "object", "properties": {}},
        },
    }
    c = run(lm.chat(ask(0), SamplingArgs(max_tokens=2), tools=[tool]))
    assert "lookup_weather" in lm.tokenizer.decode(c.prompt_token_ids)


def test_a_lone_surrogate_in_a_prompt_is_read_as_the_replacement_character(lm) -> None:
    """A lone surrogate (JSON holds them: a saved reply, a tool's output) in a message or a tool
    description: the prompt of U+FFFD in its place, not the tokenizer's TypeError."""
    tool = {"type": "function", "function": {"name": "f\udc80", "description": "d", "parameters": {"type": "object"}}}
    for content in ("a\ud800b", "\udfff", "x" * 1000 + "\ud83d"):
        fixed = content.replace("\ud800", "\ufffd").replace("\udfff", "\ufffd").replace("\ud83d", "\ufffd")
        got = run(
            lm.chat([{"role": "user", "content": content}], SamplingArgs(max_tokens=3, temperature=0.0), tools=[tool])
        )
        fixed_tool = {**tool, "function": {**tool["function"], "name": "f\ufffd"}}
        want = run(
            lm.chat(
                [{"role": "user", "content": fixed}], SamplingArgs(max_tokens=3, temperature=0.0), tools=[fixed_tool]
            )
        )
        assert got.prompt_token_ids == want.prompt_token_ids and got.token_ids == want.token_ids


def test_parse_hermes_tool_calls() -> None:
    text = (
        'Checking.\n<tool_call>{"name": "add", "arguments": {"a": 1, "b": 2}}</tool_call>\n'
        '<tool_call>{"name": "neg", "arguments": {"a": }</tool_call><tool_call>{"oops"'
    )
    content, calls = parse_tool_calls(text, "call_x")
    assert content == "Checking."
    assert [(c.id, c.name) for c in calls] == [
        ("call_x_0", "add"),
        ("call_x_1", "neg"),
        ("call_x_2", ""),
    ]
    assert calls[0].arguments == '{"a": 1, "b": 2}'
    assert calls[1].arguments == '{"name": "neg", "arguments": {"a": }'  # malformed: raw, for the env to report
    assert calls[2].arguments == '{"oops"'  # unclosed at the end of the reply
    assert parse_tool_calls("no calls here ") == ("no calls here ", [])


def test_shared_model_uses_current_weights_and_keeps_train_mode(lm) -> None:
    greedy = SamplingArgs(max_tokens=8, temperature=0.0)
    before = run(lm.chat(ask(7), greedy))
    lm.model.train()
    head = lm.model.get_output_embeddings().weight
    saved = head.detach().clone()
    try:
        with torch.no_grad():
            head[before.token_ids[0]] -= 100.0  # the trainer "updated" the weights
        after = run(lm.chat(ask(7), greedy))
        assert after.token_ids[0] != before.token_ids[0]
        assert lm.model.training  # generation ran in eval mode and restored train mode
    finally:
        with torch.no_grad():
            head.copy_(saved)
        lm.model.eval()


def test_cancelled_requests_leave_the_batch(lm) -> None:
    async def main():
        slow = asyncio.create_task(lm.chat(ask(1), SamplingArgs(max_tokens=400, temperature=1.0, seed=0)))
        others = [
            asyncio.create_task(lm.chat(ask(i), SamplingArgs(max_tokens=8, temperature=1.0, seed=i))) for i in range(4)
        ]
        await asyncio.sleep(0.05)
        slow.cancel()
        done = await asyncio.gather(*others)
        for _ in range(100):  # the worker drops the cancelled row and, with nothing left, ends
            if lm._thread is None:
                break
            await asyncio.sleep(0.01)
        return done, lm._thread

    done, thread = run(main())
    assert all(1 <= len(c.token_ids) <= 8 for c in done) and thread is None


def test_a_closed_local_model_answers_what_it_took_then_raises(lm) -> None:
    client = like(lm)
    greedy = SamplingArgs(max_tokens=6, temperature=0.0)

    async def main():
        in_flight = [asyncio.create_task(client.chat(ask(i), greedy)) for i in range(4)]
        await asyncio.sleep(0)  # the four are queued
        await client.aclose()
        answered = await asyncio.gather(*in_flight)
        with pytest.raises(ClientClosedError, match="client of tiny has been closed"):
            await client.chat(ask(1), greedy)
        await client.aclose()  # again: nothing to do
        return answered

    answered = run(main())
    assert len(answered) == 4 and all(1 <= len(c.token_ids) <= 6 for c in answered)
    assert client._thread is None and client._decoder is None and not client.prefix.entries
    assert isinstance(client, ChatClient)


def test_a_policy_has_nothing_to_close() -> None:
    echo = Policy(lambda messages, rng: messages[-1]["content"], name="echo")

    async def main():
        await echo.aclose()
        return await echo.chat(ask(1), SamplingArgs())

    assert run(main()).text == ask(1)[-1]["content"] and isinstance(echo, ChatClient)


class Countdown(MultiTurnEnv):
    """Three model turns; the env answers each with a short user message."""

    def __init__(self):
        super().__init__([{"question": f"start {i}"} for i in range(16)], rubric=Rubric([]), max_turns=3)

    async def env_response(self, messages, state):
        return [{"role": "user", "content": f"{3 - state.turn} left"}]


def test_engine_plays_multi_turn_games_through_shared_batches(lm) -> None:
    env = Countdown()
    before = lm.stats.prefills
    rollouts = run(
        run_rollouts(
            env,
            lm,
            env.tasks(),
            rollouts_per_task=2,
            concurrency=32,
            sampling=SamplingArgs(max_tokens=6, temperature=1.0),
        )
    )
    assert len(rollouts) == 32 and all(r.error is None and len(r.turns) == 3 for r in rollouts)
    for r in rollouts:
        for turn in r.turns:
            c = turn.completion
            assert 1 <= len(c.token_ids) == len(c.logprobs) <= 6 and c.prompt_token_ids
        # the next turn's prompt extends this turn's prompt and sampled ids
        first, second = r.turns[0].completion, r.turns[1].completion
        assert second.prompt_token_ids[: len(first.prompt_token_ids)] == first.prompt_token_ids
    assert lm.stats.prefills - before <= 3 * 8  # 96 requests in a few admissions per turn


def test_bad_model_paths_are_one_line_model_errors(tmp_path, tiny_dir) -> None:
    with pytest.raises(ModelError, match="no model folder at"):
        LocalModel(str(tmp_path / "missing"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(ModelError, match="cannot load a causal language model") as info:
        LocalModel(str(tmp_path / "empty"))
    assert "\n" not in str(info.value)
    transformers.ViTConfig(
        hidden_size=8, num_hidden_layers=1, num_attention_heads=1, intermediate_size=8
    ).save_pretrained(tmp_path / "vit")
    with pytest.raises(ModelError, match="cannot load a causal language model"):
        LocalModel(str(tmp_path / "vit"))


# ---- KV cache reuse across turns ---------------------------------------------------------------


def _converse(client, n: int, turns: int, sampling, edit=None) -> list[list]:
    """`n` concurrent conversations of `turns` model turns; `edit(turn)` runs between turns."""

    async def one(i):
        messages = ask(i)
        out = []
        for t in range(turns):
            c = await client.chat(messages, sampling.replace(seed=100 * i + t))
            out.append(c)
            messages = messages + [
                {"role": "assistant", "content": c.text},
                {"role": "user", "content": f"turn {t}: " + "go " * ((i + t) % 4)},
            ]
        return out

    async def main():
        return await asyncio.gather(*(one(i) for i in range(n)))

    return run(main())


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_reused_kv_cache_gives_the_same_ids_and_logprobs(lm, temperature) -> None:
    plain = like(lm, reuse_cache=False)
    reuse = like(lm, max_batch_size=64)
    sampling = SamplingArgs(max_tokens=10, temperature=temperature)
    without = _converse(plain, 8, 4, sampling)
    with_ = _converse(reuse, 8, 4, sampling)
    same_completions(with_, without, abs_tol=2e-4)
    # every turn after the first starts from the previous turn's keys and values
    prompt_total = sum(len(c.prompt_token_ids) for conv in with_ for c in conv)
    assert plain.stats.prompt_tokens == prompt_total and plain.stats.reused_tokens == 0
    assert reuse.stats.prompt_tokens + reuse.stats.reused_tokens == prompt_total
    reusable = sum(
        _common_prefix(prev.prompt_token_ids + prev.token_ids[:-1], c.prompt_token_ids)
        for conv in with_
        for prev, c in zip(conv, conv[1:])
    )
    # rows admitted together prefill as many tokens as the longest new part among them
    assert 0.7 * reusable <= reuse.stats.reused_tokens <= reusable
    assert reuse.stats.prompt_tokens < 0.6 * prompt_total
    _wait_idle(plain, reuse)


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_a_common_prompt_prefix_is_prefilled_once(lm, temperature) -> None:
    system = "You play a game. " + " ".join(f"rule {k}: move well." for k in range(12))
    prompts = [
        [{"role": "system", "content": system}, {"role": "user", "content": f"board {i} " * (1 + i % 3)}]
        for i in range(12)
    ]
    plain = like(lm, reuse_cache=False)
    shared = like(lm)
    sampling = SamplingArgs(max_tokens=6, temperature=temperature)

    async def all_of(client):
        return await asyncio.gather(*(client.chat(p, sampling.replace(seed=i)) for i, p in enumerate(prompts)))

    without, with_ = run(all_of(plain)), run(all_of(shared))
    same_completions(with_, without, abs_tol=2e-4)
    ids = [c.prompt_token_ids for c in with_]
    common = next(n for n in range(len(ids[0])) if any(x[n] != ids[0][n] for x in ids))
    assert common >= 32  # long enough to share
    total = sum(map(len, ids))
    assert plain.stats.shared_tokens == 0 and plain.stats.prompt_tokens == total
    # one row prefilled the common part; each request prefilled at most its own rest plus the
    # padding up to the longest rest among those that joined with it
    assert shared.stats.shared_tokens == common
    assert shared.stats.prompt_tokens + shared.stats.reused_tokens == total
    assert shared.stats.reused_tokens >= 0.6 * common * len(prompts)
    assert shared.stats.prompt_tokens + shared.stats.shared_tokens < 0.6 * total
    _wait_idle(plain, shared)


def _wait_idle(*clients) -> None:
    """Let the worker threads end (a daemon thread inside torch at interpreter exit can abort)."""
    for client in clients:
        for _ in range(200):
            if client._thread is None:
                break
            time.sleep(0.01)


def _common_prefix(kept: list[int], prompt: list[int]) -> int:
    """How many prompt tokens a kept sequence can give (one is always left to prefill)."""
    n = 0
    while n < min(len(kept), len(prompt) - 1) and kept[n] == prompt[n]:
        n += 1
    return n


def test_changed_weights_never_use_a_kept_cache(lm) -> None:
    greedy = SamplingArgs(max_tokens=8, temperature=0.0)
    reuse = like(lm)
    fresh_clients = []
    head = lm.model.get_output_embeddings().weight
    saved = head.detach().clone()

    def next_turn(client, first):
        messages = ask(3) + [
            {"role": "assistant", "content": first.text},
            {"role": "user", "content": "again"},
        ]
        return run(client.chat(messages, greedy))

    try:
        for change in ("explicit", "in place"):
            first = run(reuse.chat(ask(3), greedy))
            if change == "explicit":  # .data updates are invisible: the trainer clears the cache
                head.data.add_(torch.randn(head.shape, generator=torch.Generator().manual_seed(1)))
                reuse.clear_cache()
            else:  # an in-place update under no_grad is detected by itself
                with torch.no_grad():
                    head.mul_(-1.0)
            before = reuse.stats.reused_tokens
            second = next_turn(reuse, first)
            assert reuse.stats.reused_tokens == before  # nothing stale was used
            fresh_clients.append(like(lm))
            fresh = next_turn(fresh_clients[-1], first)
            assert second.token_ids == fresh.token_ids
            assert second.logprobs == pytest.approx(fresh.logprobs, abs=2e-4)
        # with unchanged weights the same next turn does reuse the kept cache
        first = run(reuse.chat(ask(3), greedy))
        before = reuse.stats.reused_tokens
        next_turn(reuse, first)
        assert reuse.stats.reused_tokens > before
    finally:
        _wait_idle(reuse, *fresh_clients)
        with torch.no_grad():
            head.copy_(saved)


def test_a_failed_admission_fails_its_requests_instead_of_hanging_them(lm, monkeypatch) -> None:
    """A prefill that raises (e.g. out of GPU memory) must reach the requests it was admitting:
    they had left the queue and were not yet rows of the batch, and waited forever."""
    client = like(lm)
    greedy = SamplingArgs(max_tokens=4, temperature=0.0)
    calls = []

    def broken_prefill(*args):
        calls.append(len(args[-1]))
        raise RuntimeError("CUDA out of memory (simulated)")

    from rlvr.clients import local_slots
    from rlvr.clients.local_batch import Batch

    monkeypatch.setattr(Batch, "_prefill", broken_prefill)  # the transformers prefill
    monkeypatch.setattr(local_slots, "prefill", broken_prefill)  # the one over slots

    async def main():
        tasks = [asyncio.create_task(client.chat(ask(i), greedy)) for i in range(3)]
        return await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), timeout=30)

    results = run(main())
    assert calls and all(isinstance(r, RuntimeError) and "out of memory" in str(r) for r in results), results
    monkeypatch.undo()
    assert len(run(client.chat(ask(1), greedy)).token_ids) >= 1  # the next request starts a fresh worker


def test_a_model_passed_in_on_the_cpu_gets_the_heap_setting_too(tiny_dir, monkeypatch) -> None:
    """The trainer hands its policy to `LocalModel` already loaded: the malloc setting must not
    depend on `LocalModel` loading the folder itself."""
    import rlvr.clients.local as local

    calls: list[tuple] = []
    monkeypatch.setattr(local, "keep_freed_blocks", lambda *a: calls.append(a) or True)
    model = transformers.AutoModelForCausalLM.from_pretrained(tiny_dir)
    tokenizer = transformers.AutoTokenizer.from_pretrained(tiny_dir)
    LocalModel("tiny", model=model, tokenizer=tokenizer)
    LocalModel(str(tiny_dir))
    assert len(calls) == 2


@pytest.mark.heavy
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_keep_freed_blocks_stops_large_blocks_faulting_in_again() -> None:
    """Activation-sized blocks (40 and 200 MB) freed and allocated again: by default glibc maps
    each anew and every page faults in again; with `keep_freed_blocks` they come back from the
    heap. Counted as the process's minor page faults, in a fresh process each way. How many still
    fault depends on where glibc's heap puts them (none run alone here, 16% once in a full suite)."""
    code = (
        "import resource, sys, torch\n"
        "from rlvr.clients.local_load import keep_freed_blocks\n"
        "torch.set_num_threads(1)\n"
        "if sys.argv[1] == 'keep':\n"
        "    assert keep_freed_blocks()\n"
        "faults = 0\n"
        "for n in (1_000_000, 10_000_000, 50_000_000):\n"
        "    torch.empty(n).fill_(1.0)\n"
        "    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt\n"
        "    for _ in range(4):\n"
        "        x = torch.empty(n)\n"
        "        x.fill_(1.0)\n"
        "        del x\n"
        "    faults += resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before if n > 1_000_000 else 0\n"
        "print(faults)\n"
    )
    faults = {
        mode: int(subprocess.run([sys.executable, "-c", code, mode], capture_output=True, text=True, check=True).stdout)
        for mode in ("default", "keep")
    }
    pages = 4 * (10_000_000 + 50_000_000) * 4 // 4096  # every page of every block of the loop
    assert faults["default"] > pages // 2, faults  # (the pathology this fixes, as glibc does it here)
    assert faults["keep"] * 2 < faults["default"], faults  # (none alone here; a sixth once within a full suite)
