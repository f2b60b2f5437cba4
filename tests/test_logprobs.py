"""The training forward near the hardware (CPU, tiny model, float32): the chunked output head,
packed micro-batches and activation checkpointing give today's log-probs and gradients."""

from __future__ import annotations

import gc
import random
import warnings
import weakref

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from forward_checks import assert_same_gradients, grads, sequences, weighted

from rlvr.train import logprobs as lp
from rlvr.train import update
from rlvr.train.distributed import Dist
from rlvr.train.hardware import Peak, memory_metrics, training_flops_per_token
from rlvr.train.sequences import TrainSequence, micro_batches

pytestmark = pytest.mark.usefixtures("one_thread")
CPU = torch.device("cpu")


@pytest.fixture(scope="module")
def model(scrambled_tiny):
    return scrambled_tiny


def reference(model, mb, temperature: float):
    """The full-logits computation rlvr used before chunking (`token_logprobs` of model.py)."""
    logits = model(input_ids=mb.ids, attention_mask=mb.attention).logits[:, :-1].float() / temperature
    logz = torch.logsumexp(logits, dim=-1)
    logp = logits.gather(-1, mb.ids[:, 1:, None]).squeeze(-1) - logz
    with torch.no_grad():
        ent = logz - (logits.softmax(-1) * logits).sum(-1)
    return logp, ent


@pytest.mark.parametrize("chunk_tokens", [3, 1000])
def test_chunked_head_gives_the_full_logits_logprobs_entropy_and_gradients(model, chunk_tokens) -> None:
    vocab = model.config.vocab_size
    [mb] = micro_batches(sequences(vocab), 8, 0, CPU)
    on = mb.mask > 0
    ref_logp, ref_ent = reference(model, mb, 0.7)
    logp, ent = lp.micro_batch_logprobs(model, mb, 0.7, entropy=True, chunk_elements=chunk_tokens * vocab)
    torch.testing.assert_close(logp[on], ref_logp[on], rtol=2e-6, atol=1e-6)  # float32 rounding
    torch.testing.assert_close(ent[on], ref_ent[on], rtol=0, atol=1e-5)  # logz - E[logit]: logits ~10 cancel
    assert (logp[~on] == 0).all() and (ent[~on] == 0).all()  # nothing computed where no loss looks
    want = grads(model, lambda: weighted(reference(model, mb, 0.7)[0], mb))
    got = grads(
        model, lambda: weighted(lp.micro_batch_logprobs(model, mb, 0.7, chunk_elements=chunk_tokens * vocab)[0], mb)
    )
    assert_same_gradients(got, want, 1e-5)


def test_full_logits_path_matches_the_chunked_one(model) -> None:
    [mb] = micro_batches(sequences(model.config.vocab_size), 8, 0, CPU)
    chunked, _ = lp.micro_batch_logprobs(model, mb, 1.0)
    full, _ = lp.micro_batch_logprobs(model, mb, 1.0, chunk_elements=0)
    torch.testing.assert_close(chunked, full, rtol=2e-6, atol=1e-6)


def test_models_that_rescale_their_logits_take_the_full_logits_path(model, monkeypatch) -> None:
    assert lp._head(model) is model.lm_head
    monkeypatch.setattr(model.config, "final_logit_softcapping", 30.0, raising=False)
    assert lp._head(model) is None


def test_a_micro_batch_with_nothing_to_train_still_reaches_every_weight(model) -> None:
    """(DDP all-reduces every parameter's gradient: each must have one, here zero.)"""
    seqs = sequences(model.config.vocab_size, n=2)
    for s in seqs:
        s.mask = [0] * len(s.mask)
    [mb] = micro_batches(seqs, 8, 0, CPU)
    g = grads(model, lambda: lp.micro_batch_logprobs(model, mb, 1.0)[0].sum())
    assert all(x is not None and (x == 0).all() for x in g)


def test_packed_micro_batches_give_the_padded_logprobs_and_gradients(model) -> None:
    seqs = sequences(model.config.vocab_size, n=6, seed=3)
    [padded] = micro_batches(seqs, 8, 0, CPU)
    [packed] = micro_batches(seqs, 8, 0, CPU, pack=True)
    assert packed.ids.shape == (1, sum(len(s.ids) for s in seqs)) and packed.tokens == padded.tokens
    assert packed.position_ids[0, : len(max(seqs, key=lambda s: len(s.ids)).ids) + 1].tolist()[-1] == 0
    torch.testing.assert_close(packed.mask, padded.mask)
    a, ea = lp.micro_batch_logprobs(model, padded, 1.0, entropy=True)
    b, eb = lp.micro_batch_logprobs(model, packed, 1.0, entropy=True)
    torch.testing.assert_close(b, a, rtol=0, atol=1e-5)
    torch.testing.assert_close(eb, ea, rtol=0, atol=1e-5)
    want = grads(model, lambda: weighted(lp.micro_batch_logprobs(model, padded, 1.0)[0], padded))
    got = grads(model, lambda: weighted(lp.micro_batch_logprobs(model, packed, 1.0)[0], packed))
    assert_same_gradients(got, want, 1e-5)


def test_activation_checkpointing_gives_identical_gradients_and_undoes_itself(model) -> None:
    [mb] = micro_batches(sequences(model.config.vocab_size), 8, 0, CPU)
    want = grads(model, lambda: weighted(lp.micro_batch_logprobs(model, mb, 1.0)[0], mb))
    with lp.activation_checkpointing(model):
        assert all("forward" in block.__dict__ for block in model.model.layers)
        got = grads(model, lambda: weighted(lp.micro_batch_logprobs(model, mb, 1.0)[0], mb))
    assert not any("forward" in block.__dict__ for block in model.model.layers)
    for x, y in zip(got, want):
        assert torch.equal(x, y)


@pytest.mark.heavy
@pytest.mark.filterwarnings("ignore:The .grad attribute of a Tensor that is not a leaf:UserWarning")  # dynamo's probe
def test_compiled_blocks_give_the_eager_update_compile_once_and_undo_themselves(model, monkeypatch) -> None:
    """torch.compile through AOTAutograd (inductor's code generation aside: 45 s on 2 cores for
    this model; `tests/test_gpu.py` runs inductor): the update's result as eagerly, every block
    eager again after the block, one compiled forward kept for the next update, and a deep
    copy of a compiled model trains its own weights (a forward kept per block, bound to it, ran
    the original's)."""
    import copy

    real = torch.compile
    monkeypatch.setattr(torch, "compile", lambda fn, **kw: real(fn, backend="aot_eager", **kw))
    monkeypatch.setattr(lp, "_COMPILED", {})
    seqs = sequences(model.config.vocab_size, n=8, seed=7)
    dist = Dist(rank=0, world=1, device=CPU)

    def step(m, on: bool) -> torch.Tensor:
        how = update.UpdateSettings("cispo", update.LossConfig(), 1, 3, 1.0, False, 1.0, 0, compile_blocks=on)
        before = [p.detach().clone() for p in m.parameters()]
        update.update_policy(m, None, seqs, 8, how, torch.optim.SGD(m.parameters(), lr=0.1), dist)
        assert not any("forward" in block.__dict__ for block in m.model.layers)
        return torch.cat([(p.detach() - b).flatten() for p, b in zip(m.parameters(), before)])

    eager, compiled = copy.deepcopy(model), copy.deepcopy(model)
    want, got = step(eager, False), step(compiled, True)
    assert want.abs().max() > 0
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-6)
    [forward] = lp._COMPILED.values()  # one for the block class
    twin, twin_eager = copy.deepcopy(compiled), copy.deepcopy(compiled)
    with torch.no_grad():
        for a, b in zip(twin.parameters(), twin_eager.parameters()):
            a.mul_(1.5), b.mul_(1.5)  # the copy's own weights, far from the original's
    torch.testing.assert_close(step(twin, True), step(twin_eager, False), rtol=1e-4, atol=1e-6)
    assert list(lp._COMPILED.values()) == [forward]  # kept, not compiled again
    with lp.compiled_blocks(compiled), lp.activation_checkpointing(compiled):  # checkpointing recomputes it
        assert all(block.forward.args[0].func is forward for block in compiled.model.layers)
    held = weakref.ref(compiled.model.layers[0])
    del compiled, twin
    gc.collect()
    assert held() is None  # nothing compiled keeps a block alive once its model is gone


@pytest.mark.filterwarnings("ignore:The .grad attribute of a Tensor that is not a leaf:UserWarning")  # dynamo's probe
def test_compiled_blocks_compile_once_with_and_without_padding(model, monkeypatch) -> None:
    """Micro-batches of equal-length sequences have no padding, and transformers then gives the
    blocks no mask: inside `compiled_blocks` such a micro-batch gets one pad column, so that
    padded and unpadded micro-batches share one compiled graph (without it: two, the second in
    whichever step first met an unpadded micro-batch), with the same log-probs as without it."""
    import torch._dynamo.utils

    real = torch.compile
    monkeypatch.setattr(torch, "compile", lambda fn, **kw: real(fn, backend="aot_eager", **kw))
    monkeypatch.setattr(lp, "_COMPILED", {})
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    vocab = model.config.vocab_size
    rng = random.Random(5)
    same = [rng.randrange(vocab) for _ in range(12)]
    even = [TrainSequence([*same[:-1], i], [0] * 4 + [1] * 8, 0.5, [float("nan")] * 12, i) for i in range(4)]
    padded, unpadded = micro_batches(sequences(vocab, n=4, seed=3), 4, 0, CPU)[0], micro_batches(even, 4, 0, CPU)[0]
    assert padded.n_tokens < padded.ids.numel() and unpadded.n_tokens == unpadded.ids.numel()
    want = lp.micro_batch_logprobs(model, unpadded, 1.0)[0]
    with lp.compiled_blocks(model):
        assert lp._inputs(unpadded)["input_ids"].shape == (4, 13)  # one pad column
        assert lp._inputs(padded)["input_ids"].shape == padded.ids.shape  # padded already
        for mb in (padded, unpadded, padded):
            got = lp.micro_batch_logprobs(model, mb, 1.0)[0]
        full = lp.micro_batch_logprobs(model, unpadded, 1.0, chunk_elements=0)[0]  # the full-logits path
    torch.testing.assert_close(lp.micro_batch_logprobs(model, unpadded, 1.0)[0], want)  # eager again
    with lp.compiled_blocks(model):
        got = lp.micro_batch_logprobs(model, unpadded, 1.0)[0]
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(full, want, rtol=1e-4, atol=1e-5)
    assert lp._inputs(unpadded)["input_ids"].shape == unpadded.ids.shape  # no column outside the block
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] == 1, dict(torch._dynamo.utils.counters["stats"])


def test_block_options_refuse_a_model_without_blocks() -> None:
    from rlvr.errors import UsageError

    flat = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ModuleList())
    for option, context in (
        ("gradient_checkpointing", lp.activation_checkpointing),
        ("compile_blocks", lp.compiled_blocks),
    ):
        with pytest.raises(UsageError, match=f"{option}: Sequential has no transformer blocks"), context(flat):
            pass
        with context(flat, False):  # off: nothing to find, nothing said
            pass


def test_packing_falls_back_to_padding_with_one_warning_where_attention_cannot(model, monkeypatch) -> None:
    monkeypatch.setattr(model.config, "_attn_implementation", "some_kernel")
    assert "some_kernel" in lp.packing_unsupported(model)
    lp._WARNED.clear()
    with pytest.warns(RuntimeWarning, match="padded micro-batches instead"):
        assert lp.should_pack(model, True) is False
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert lp.should_pack(model, True) is False  # said once
    monkeypatch.setattr(model.config, "_attn_implementation", "sdpa")
    assert lp.should_pack(model, True) and not lp.should_pack(model, None)  # sdpa: a mask, so not by default
    monkeypatch.setattr(model.config, "_attn_implementation", "flash_attention_2")
    assert lp.should_pack(model, None)


def test_update_with_packing_and_checkpointing_equals_the_plain_update_and_reports_mfu(model, monkeypatch) -> None:
    import copy

    seqs = sequences(model.config.vocab_size, n=8, seed=5)
    dist = Dist(rank=0, world=1, device=CPU)
    after = []
    for pack, ckpt in ((False, False), (True, True)):
        m = copy.deepcopy(model)
        how = update.UpdateSettings(
            "cispo", update.LossConfig(), 1, 3, 1.0, False, 1.0, 0, pack_sequences=pack, gradient_checkpointing=ckpt
        )
        opt = torch.optim.SGD(m.parameters(), lr=0.1)
        monkeypatch.setattr(update, "device_peak", lambda device: Peak("test", 1e9, 1e9))
        stats = update.update_policy(m, None, seqs, 8, how, opt, dist)
        after.append(torch.cat([p.detach().flatten() for p in m.parameters()]))
        tokens = sum(len(s.ids) for s in seqs)
        assert stats["tokens/processed"] == tokens and 0 < stats["throughput/train_mfu"]
    torch.testing.assert_close(after[1], after[0], rtol=0, atol=1e-6)
    assert not torch.equal(after[0], torch.cat([p.detach().flatten() for p in model.parameters()]))


def test_training_flops_count_tied_embeddings_once(model) -> None:
    params = sum(p.numel() for p in model.parameters())  # tied: the head is the embedding
    assert training_flops_per_token(model) == 6 * params
    untied = type(model)(model.config.__class__(**{**model.config.to_dict(), "tie_word_embeddings": False}))
    embed = untied.get_input_embeddings().weight.numel()
    assert training_flops_per_token(untied) == 6 * (sum(p.numel() for p in untied.parameters()) - embed)


def test_the_step_line_shows_mfu_where_the_update_measured_it() -> None:
    from rlvr.train.metrics import step_line

    m = {"reward/mean": 0.5, "rollout/turn_tokens": 10, "time/step": 2.0, "time/rollouts": 1.0, "time/train": 1.0}
    assert step_line(1, 2, m).endswith("train 1.0s)")
    assert step_line(1, 2, {**m, "throughput/train_mfu": 0.412}).endswith("train 1.0s, MFU 41%)")


def test_the_config_fields_reach_the_update() -> None:
    from rlvr.train.config import TrainConfig

    cfg = TrainConfig(env="e", model="m", pack_sequences=True, gradient_checkpointing=True, compile_blocks=True)
    how = update.UpdateSettings.from_config(cfg, pad_id=0)
    assert how.pack_sequences is True and how.gradient_checkpointing is True and how.compile_blocks is True
    assert update.UpdateSettings.from_config(TrainConfig(env="e", model="m"), pad_id=0).pack_sequences is None


def test_memory_metrics_are_only_for_cuda_devices() -> None:
    # a CPU run logs no memory/* columns (tests/test_gpu.py checks them on a GPU)
    assert memory_metrics("cpu") == {} and memory_metrics(torch.device("cpu")) == {}
