"""Static KV slots (`rlvr.clients.local_slots`): same tokens as the transformers forward, buffer
growth, the family check, the sampling and norm pieces it uses, and attention over the rows'
span (same tokens as over the whole buffer). CPU (no CUDA graphs here; the
graph-captured path is checked in tests/test_gpu.py)."""

from __future__ import annotations

import asyncio
import copy

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from completions import same_completions

from rlvr.clients.local import LocalModel
from rlvr.clients.local_decode import MIN_LENGTH, MIN_SLOTS, SlotDecoder
from rlvr.clients.local_sampling import draw, inverse_cdf, row_key, sample_tokens
from rlvr.clients.local_slots import supported
from rlvr.clients.local_step import _rms_norm
from rlvr.errors import UsageError
from rlvr.types import SamplingArgs

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def tiny(scrambled_chat):
    return scrambled_chat


def _games(client: LocalModel, n: int, turns: int, nucleus: bool = True) -> list[list]:
    """`n` conversations: greedy, sampled and (with `nucleus`) top-p rows mixed, replies of 20-70
    tokens, so the slots outgrow their first size and the sequences pass MIN_LENGTH positions.
    Later turns arrive while other games' replies are being decoded."""

    def sampling(i: int, t: int) -> SamplingArgs:
        return SamplingArgs(
            max_tokens=20 + (7 * i + t) % 50,
            temperature=0.0 if i % 3 == 0 else 1.0,
            top_p=0.9 if nucleus and i % 4 == 1 else 1.0,
            seed=100 * i + t,
        )

    async def one(i: int) -> list:
        messages = [{"role": "user", "content": f"game {i}: " + "go " * (i % 5)}]
        out = []
        for t in range(turns):
            c = await client.chat(messages, sampling(i, t))
            out.append(c)
            messages = messages + [
                {"role": "assistant", "content": c.text},
                {"role": "user", "content": "next " * (1 + t)},
            ]
        return out

    async def main() -> list[list]:  # a reply never answered fails here, not at pytest's timeout
        return await asyncio.wait_for(asyncio.gather(*(one(i) for i in range(n))), 120)

    return asyncio.run(main())


@pytest.mark.parametrize("reuse", [False, True])
def test_static_slots_give_the_transformers_tokens_and_grow(tiny, reuse) -> None:
    model, tokenizer = tiny
    dynamic = LocalModel("tiny", model=model, tokenizer=tokenizer, static_cache=False, reuse_cache=reuse)
    static = LocalModel("tiny", model=model, tokenizer=tokenizer, static_cache=True, reuse_cache=reuse)
    want, got = _games(dynamic, 20, 3), _games(static, 20, 3)
    same_completions(got, want, abs_tol=2e-4)
    decoder = static._decoder
    assert decoder is not None and not decoder.graphs  # no CUDA graphs on the CPU
    assert decoder.slots > MIN_SLOTS and decoder.length > MIN_LENGTH  # both grew
    assert max(len(c.prompt_token_ids) + len(c.token_ids) for g in got for c in g) > MIN_LENGTH
    if reuse:
        assert static.stats.reused_tokens > 0
        assert static.stats.reused_tokens == pytest.approx(dynamic.stats.reused_tokens, rel=0.3)


def test_static_slots_need_a_supported_family(tiny) -> None:
    model, tokenizer = tiny
    assert supported(model)
    config = transformers.MistralConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        sliding_window=12,
    )
    windowed = transformers.MistralForCausalLM(config).eval()
    assert not supported(windowed)
    with pytest.raises(UsageError, match="static_cache needs"):
        LocalModel("sw", model=windowed, tokenizer=tokenizer, static_cache=True)
    # by default a supported model decodes over slots, on the CPU too; a windowed model never
    assert LocalModel("t", model=model, tokenizer=tokenizer).static_cache
    assert not LocalModel("sw", model=windowed, tokenizer=tokenizer).static_cache


def test_autocast_is_checked_and_runs(tiny) -> None:
    model, tokenizer = tiny
    with pytest.raises(UsageError, match="autocast"):
        LocalModel("t", model=model, tokenizer=tokenizer, autocast="float64")
    client = LocalModel("t", model=model, tokenizer=tokenizer, static_cache=True, autocast="bfloat16")
    c = asyncio.run(
        client.chat([{"role": "user", "content": "hi"}], SamplingArgs(max_tokens=5, temperature=1.0, seed=0))
    )
    assert len(c.token_ids) == len(c.logprobs) == 5 and all(lp <= 0 for lp in c.logprobs)
    assert client._decoder is not None and client._decoder.keys.dtype == torch.bfloat16


def test_draw_inverts_each_rows_cdf_at_its_hashed_uniform() -> None:
    """`draw`, the sampler inside the CUDA graph, by hand: the first token whose cumulative
    softmax(logits / T) reaches the row's uniform (argmax of the logits for T = 0), logprob
    under log_softmax(logits / T)."""
    logits = torch.randn(7, 50, generator=torch.Generator().manual_seed(0))
    temps = torch.tensor([0.0, 1.0, 0.7, 1.3, 0.0, 1.0, 2.0])
    keys = row_key(torch.arange(1000, 1007), torch.arange(7))
    assert keys.tolist() == [row_key(1000 + i, i) for i in range(7)]  # ints hash the same
    choice, logp = draw(logits, temps, keys)
    scaled = logits / torch.where(temps > 0, temps, 1.0)[:, None]
    cdf = scaled.double().softmax(-1).cumsum(-1)
    u = (keys.double() + 0.5) / 2**32
    by_hand = [int((cdf[r] < u[r] * cdf[r, -1]).sum()) for r in range(7)]
    want = torch.where(temps > 0, torch.tensor(by_hand), logits.argmax(-1))
    assert choice.tolist() == want.tolist()
    assert torch.allclose(logp, scaled.log_softmax(-1).gather(1, want[:, None]).squeeze(1))
    # the list front end gives the same tokens, and top-p restricts them
    same, _ = sample_tokens(logits, temperatures=temps.tolist(), top_ps=[1.0] * 7, keys=keys.tolist())
    assert same.tolist() == want.tolist()
    tight, _ = sample_tokens(logits, temperatures=temps.tolist(), top_ps=[1e-6] * 7, keys=keys.tolist())
    assert tight.tolist() == scaled.argmax(-1).tolist()  # the top token only


def test_draw_follows_the_distribution_and_never_draws_a_masked_token() -> None:
    """20,000 rows of one distribution, each with its own key: the counts match the
    probabilities within 5 standard deviations, a token of probability 1e-3 included, and a
    -inf token (what top-p masks) is never drawn."""
    probs = torch.tensor([0.5, 0.3, 0.149, 0.001, 0.05, 0.0])
    rows = 20_000
    logits = probs.log().expand(rows, -1).contiguous()
    keys = row_key(torch.arange(rows), torch.zeros(rows, dtype=torch.long))
    choice, _ = draw(logits, torch.ones(rows), keys)
    counts = torch.bincount(choice, minlength=6).double()
    expected = probs.double() * rows
    sd = (expected * (1 - probs.double())).sqrt()
    assert counts[5] == 0 and ((counts - expected).abs()[:5] <= 5 * sd[:5]).all(), counts.tolist()
    assert counts[3] > 0


def test_inverse_cdf_gives_each_token_exactly_its_share_of_the_uniforms() -> None:
    """No sampling: 20,000 evenly spaced uniforms over one distribution; each token gets its
    probability's share of them to within one, and a token of 1e-7 at the end of a 151,936-token
    vocabulary owns the uniforms of its own interval (the float64 running sum)."""
    probs = torch.tensor([0.5, 0.001, 0.2, 0.0, 0.299])
    n = 20_000
    u = (torch.arange(n, dtype=torch.float64) + 0.5) / n
    index, total = inverse_cdf(probs.log().expand(n, -1), u)
    counts = torch.bincount(index, minlength=5).double()
    assert ((counts - probs.double() * n).abs() <= 1).all(), counts.tolist()
    assert torch.allclose(total, torch.full((n,), 2.0, dtype=torch.float64))  # exp(scores - max), max 0.5
    vocab, rare = 151_936, 1e-7
    big = torch.full((1, vocab), (1 - rare) / (vocab - 1), dtype=torch.float64)
    big[0, -1] = rare
    for at, want in ((1 - rare / 2, vocab - 1), (1 - 3 * rare / 2, vocab - 2)):
        assert inverse_cdf(big.log().float(), torch.tensor([at]))[0].item() == want


def test_block_sums_find_the_token_of_one_running_sum() -> None:
    """The two-level search (block sums, then one block) against one float64 running sum of the
    whole row: the same token for 64 rows x 300 uniforms over a vocabulary of 5 blocks and a
    tail, with -inf tokens (top-p's mask) in whole blocks, at block edges and in the tail; and
    uniforms at the very ends of (0, 1) stay on tokens of positive weight."""
    from rlvr.clients.local_sampling import BLOCK

    vocab = 5 * BLOCK + 37
    gen = torch.Generator().manual_seed(3)
    logits = 4 * torch.randn(64, vocab, generator=gen)
    logits[::2, BLOCK : 2 * BLOCK] = float("-inf")  # a whole block masked
    logits[1::3, BLOCK - 1] = float("-inf")  # the last token of a block
    logits[::4, 5 * BLOCK :] = float("-inf")  # the tail
    logits[5, :] = float("-inf")
    logits[5, 3 * BLOCK] = 0.0  # one token only
    u = torch.rand(300, generator=gen, dtype=torch.float64)
    u[:2] = torch.tensor([2.0**-33, 1 - 2.0**-33])
    for scores in (logits, logits * 1e-3):  # peaked and nearly flat rows
        cdf = (scores - scores.amax(-1, keepdim=True)).exp().double().cumsum(-1)  # float32 terms
        for j in range(len(u)):
            uj = u[j].expand(64)
            want = torch.searchsorted(cdf, uj[:, None] * cdf[:, -1:]).squeeze(1)
            got, total = inverse_cdf(scores, uj)
            assert got.tolist() == want.tolist()
            assert torch.allclose(total, cdf[:, -1], rtol=1e-12)
            assert torch.isfinite(scores[torch.arange(64), got]).all()


def test_draw_survives_nan_and_infinite_logits() -> None:
    """A NaN or +inf logit (a diverged or overflowing model) or a row masked down to one token:
    the draw stays a valid index, the argmax (the +inf token takes all the weight)."""
    logits = torch.randn(4, 10, generator=torch.Generator().manual_seed(1))
    logits[0, 3] = float("nan")
    logits[1] = float("nan")
    logits[2, 5] = float("inf")
    logits[3] = float("-inf")
    logits[3, 2] = 0.0
    keys = row_key(torch.arange(4), torch.zeros(4, dtype=torch.long))
    choice, logp = draw(logits, torch.ones(4), keys)
    assert choice.tolist() == [3, 0, 5, 2] and logp[3].item() == 0.0


def test_fused_rms_norm_matches_the_module(tiny) -> None:
    model, _ = tiny
    norm = copy.deepcopy(model.model.layers[0].input_layernorm)
    with torch.no_grad():
        norm.weight.normal_()
        x = torch.randn(3, 1, norm.weight.shape[0])
        assert torch.allclose(_rms_norm(norm, x), norm(x), atol=1e-5)


def test_finished_rows_are_kept_at_the_next_admission_or_never(tiny) -> None:
    """A finished row's keys and values stay in its slot until the next admission copies them
    into the reuse cache; after `clear_cache()` (the trainer's optimizer step) they are dropped
    without a copy."""
    model, tokenizer = tiny
    client = LocalModel("t", model=model, tokenizer=tokenizer, static_cache=True)
    sampling = SamplingArgs(max_tokens=4, temperature=0.0)

    def ask(i: int):
        return asyncio.run(client.chat([{"role": "user", "content": f"q {i}"}], sampling))

    ask(0)
    assert len(client.prefix.entries) == 0 and len(client._decoder.held) == 1
    ask(1)  # its admission kept row 0
    assert len(client.prefix.entries) == 1 and len(client._decoder.held) == 1
    client.clear_cache()
    ask(2)  # row 1 belonged to the old weights: dropped
    assert len(client.prefix.entries) == 0 and len(client._decoder.held) == 1


def test_a_failed_graph_capture_falls_back_to_plain_decoding(tiny, monkeypatch) -> None:
    model, tokenizer = tiny
    client = LocalModel("t", model=model, tokenizer=tokenizer, static_cache=True)
    plain = LocalModel("t", model=model, tokenizer=tokenizer, static_cache=True)
    decoder = client.slot_decoder()
    decoder.graphs = True  # as on CUDA; the capture fails the way an uncapturable op does

    def fail(n, span):
        raise RuntimeError("operation not permitted when stream is capturing\nmore detail")

    monkeypatch.setattr(decoder, "_capture", fail)
    sampling = SamplingArgs(max_tokens=6, temperature=1.0, seed=4)
    with pytest.warns(RuntimeWarning, match="CUDA graph capture failed .operation not permitted"):
        c = asyncio.run(client.chat([{"role": "user", "content": "hi"}], sampling))
    assert not decoder.graphs
    assert c.token_ids == asyncio.run(plain.chat([{"role": "user", "content": "hi"}], sampling)).token_ids


# ---- span: a step attends over the rows' positions, not the whole buffer -----------------------


def _ask_all(client: LocalModel, sampling: list[SamplingArgs], gap_s: float = 0.002) -> list:
    """One request per sampling, each started `gap_s` after the one before (most join a batch
    that is decoding), within 60 s (a row left unanswered fails here, not at pytest's timeout)."""

    async def one(i: int, s: SamplingArgs):
        await asyncio.sleep(gap_s * i)
        return await client.chat([{"role": "user", "content": f"q {i} " + "x " * (i % 7)}], s)

    async def main() -> list:
        return await asyncio.wait_for(asyncio.gather(*(one(i, s) for i, s in enumerate(sampling))), 60)

    return asyncio.run(main())


def test_a_step_attends_over_the_rows_span_not_the_whole_buffer(tiny, monkeypatch) -> None:
    """After long games grew the buffers, short replies attend over the first span (with graphs,
    an eighth of the buffer rounded up from the longest row; without, the longest row's) instead
    of every position: the same tokens and logprobs as attending over the whole buffer (the
    positions left out are masked anyway; a sum over another length may round differently)."""
    model, tokenizer = tiny
    short = [SamplingArgs(max_tokens=12, temperature=float(i % 2), seed=i) for i in range(6)]
    spans: list[tuple[int | None, int]] = []
    forward, span_of = SlotDecoder.forward, SlotDecoder.span

    def spy(self: SlotDecoder, n: int, span: int | None = None) -> torch.Tensor:
        spans.append((span, self.length))
        return forward(self, n, span)

    monkeypatch.setattr(SlotDecoder, "forward", spy)
    got = {}
    for whole in (False, True):
        client = LocalModel("t", model=model, tokenizer=tokenizer, static_cache=True)
        if whole:
            monkeypatch.setattr(SlotDecoder, "span", lambda self, need: self.length)
        _games(client, 6, 3, nucleus=False)  # the buffers grow past MIN_LENGTH positions
        assert client._decoder is not None and client._decoder.length >= 2 * MIN_LENGTH
        spans.clear()
        got[whole] = _ask_all(client, short)
        if not whole:
            assert any(span is not None and span < length for span, length in spans)
    same_completions(got[False], got[True])
    monkeypatch.setattr(SlotDecoder, "span", span_of)
    decoder = client._decoder  # one step straight at a span's edge: a row whose own key is at 128
    n = 8
    with torch.inference_mode():  # the buffers are inference tensors
        decoder.reserve(n, 4 * MIN_LENGTH)  # span(129) = 129 (CPU, no graphs) < 512 positions
        decoder.pos[:n] = torch.tensor([128, 5, 64, 127, 100, 0, 90, 128])
        need = int(decoder.pos[:n].max()) + 1
        edge, whole = decoder.forward(n, decoder.span(need)), decoder.forward(n, None)
    assert decoder.span(need) == need < decoder.length
    torch.testing.assert_close(edge, whole, atol=1e-4, rtol=1e-4)
    assert torch.equal(edge.argmax(-1), whole.argmax(-1))
    decoder = SlotDecoder.__new__(SlotDecoder)  # the rounding alone: graphs replay per span
    decoder.length, decoder.graphs = 1024, True
    assert [span_of(decoder, k) for k in (1, 128, 129, 1000, 1024)] == [128, 128, 256, 1024, 1024]
    decoder.length = 4096
    assert [span_of(decoder, k) for k in (1, 513, 4096)] == [512, 1024, 4096]
    decoder.graphs = False  # no graphs: the need itself
    assert [span_of(decoder, k) for k in (1, 128, 129, 1000, 4096)] == [1, 128, 129, 1000, 4096]


def test_without_graphs_the_buffers_grow_to_the_need_and_a_quarter(tiny) -> None:
    """On the CPU the slot buffers grow by quarters in multiples of GRAIN positions (a walk's
    rows need about 640: doubling made 1024), with graphs by doubling; contents are kept."""
    model, _ = tiny
    cpu, graphs = (SlotDecoder(model, graphs=g, max_length=4096) for g in (False, True))
    with torch.inference_mode():
        for decoder in (cpu, graphs):
            decoder.reserve(3, 300)
            decoder.keys[:, 2, :, 299] = 7.0
            decoder.reserve(17, 601)
        assert (cpu.slots, cpu.length) == (24, 640) and (graphs.slots, graphs.length) == (32, 1024)
        assert bool((cpu.keys[:, 2, :, 299] == 7.0).all()) and int(cpu.keys.shape[3]) == 640
        cpu.reserve(17, 641)  # a quarter more than 640, not one position
        assert cpu.length == 832


def test_the_step_keeps_the_matmul_attention_where_cudnn_cannot_run(tiny) -> None:
    """cuDNN's sdpa is used only where a probe runs it and it agrees with `attend`: never on CPU
    or in float32, and a probe that fails says no rather than raising (the GPU side, where the
    probe says yes for bf16: tests/test_gpu.py)."""
    from rlvr.clients import local_decode, local_step

    model, _ = tiny
    decoder = SlotDecoder(model, graphs=False, max_length=64)
    assert decoder.attention is local_step.attend  # CPU
    assert not local_decode.cudnn_attention_works(decoder)
    decoder.device, decoder.dtype = torch.device("cuda"), torch.bfloat16  # claims a GPU this machine lacks
    assert not local_decode.cudnn_attention_works(decoder)


# ---- compile_decode: the step's layers through torch.compile ------------------------------------


@pytest.fixture
def compiling(monkeypatch):
    """`compiled_parts` made afresh with the aot_eager backend (Inductor's C++ build takes about a
    minute on 2 cores; tests/test_gpu.py compiles with Inductor on CUDA), and Dynamo's counters."""
    import torch._dynamo.utils

    from rlvr.clients import local_step

    monkeypatch.setattr(local_step, "COMPILE_BACKEND", "aot_eager")
    monkeypatch.setattr(local_step, "_COMPILED", [])
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    yield torch._dynamo.utils.counters
    torch._dynamo.reset()


@pytest.mark.heavy
@pytest.mark.filterwarnings("ignore:.*script_method.*:DeprecationWarning")
def test_a_compiled_step_gives_the_eager_tokens_with_one_graph_per_part(tiny, compiling) -> None:
    """20 conversations of 3 turns (slot counts 8-32, buffers growing past MIN_LENGTH) decode the
    same tokens compiled as eagerly, and every layer and slot count shares one graph per part."""
    from rlvr.clients import local_step

    model, tokenizer = tiny
    eager = LocalModel("t", model=model, tokenizer=tokenizer, static_cache=True)
    compiled = LocalModel("t", model=model, tokenizer=tokenizer, static_cache=True, compile_decode=True)
    want, got = _games(eager, 20, 3, nucleus=False), _games(compiled, 20, 3, nucleus=False)
    same_completions(got, want)
    decoder = compiled._decoder
    assert decoder is not None and decoder.slots > MIN_SLOTS
    assert decoder.parts is not local_step.EAGER
    # the 3 layer parts and the sampler once each, not once per slot count or layer
    assert compiling["stats"]["unique_graphs"] == 4, dict(compiling["stats"])


def test_a_failed_compile_falls_back_to_the_eager_step(tiny, compiling, monkeypatch) -> None:
    """A part that torch.compile cannot build (here: a backend that raises) costs a warning, not
    the request: the step runs eagerly from then on, with the same tokens."""
    from rlvr.clients import local_step

    def broken(gm, example_inputs):
        raise RuntimeError("no C++ compiler found")

    monkeypatch.setattr(local_step, "COMPILE_BACKEND", broken)
    model, tokenizer = tiny
    client = LocalModel("t", model=model, tokenizer=tokenizer, static_cache=True, compile_decode=True)
    plain = LocalModel("t", model=model, tokenizer=tokenizer, static_cache=True)
    sampling = SamplingArgs(max_tokens=6, temperature=1.0, seed=4)
    with pytest.warns(RuntimeWarning, match="compiling the decode step failed .*no C.. compiler"):
        c = asyncio.run(client.chat([{"role": "user", "content": "hi"}], sampling))
    assert client._decoder is not None and client._decoder.parts is local_step.EAGER
    assert c.token_ids == asyncio.run(plain.chat([{"role": "user", "content": "hi"}], sampling)).token_ids
    with pytest.raises(UsageError, match="compile_decode compiles the static-slot decode step"):
        LocalModel("t", model=model, tokenizer=tokenizer, static_cache=False, compile_decode=True)
