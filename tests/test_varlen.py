"""Packed rows through torch's varlen attention (`rlvr.train.varlen`).

On the CPU the kernel (FlashAttention, CUDA only) is swapped for a reference that runs sdpa on
each sequence alone, so what is tested here is everything around it: the boundaries reach every
layer, the layouts and grouped-query heads are right, and the packed forward gives the padded
sdpa forward's log-probs and gradients. tests/test_gpu.py runs the real kernel."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from forward_checks import assert_same_gradients, grads, sequences, weighted

from rlvr.train import logprobs as lp
from rlvr.train import varlen
from rlvr.train.sequences import micro_batches

pytestmark = pytest.mark.usefixtures("one_thread")
CPU = torch.device("cpu")


@pytest.fixture(scope="module")
def model(scrambled_tiny, scramble):
    """The tiny test model with grouped-query attention (2 query heads a key/value head)."""
    config = scrambled_tiny.config.__class__(**{**scrambled_tiny.config.to_dict(), "num_key_value_heads": 2})
    torch.manual_seed(0)
    gqa = scramble(type(scrambled_tiny)(config), seed=1)
    gqa.config._attn_implementation = "sdpa"
    assert gqa.model.layers[0].self_attn.k_proj.out_features * 2 == gqa.model.layers[0].self_attn.q_proj.out_features
    return gqa.eval()


def reference_kernel(calls: list[int], *, gqa: bool = True):
    """varlen_attn's contract, by sdpa on each sequence alone (causal, scale, GQA)."""

    def kernel(q, k, v, cu_q, cu_k, max_q, max_k, *, scale=None, window_size=None, is_causal=None, enable_gqa=False):
        assert window_size == (-1, 0) or is_causal is True, "must be causal"
        assert torch.equal(cu_q, cu_k) and max_q == max_k == int((cu_q[1:] - cu_q[:-1]).max())
        assert q.dtype == k.dtype == v.dtype and q.dim() == 3
        if k.shape[1] != q.shape[1]:
            assert gqa and enable_gqa, "grouped-query heads given to a kernel that takes none"
        calls.append(q.shape[0])
        out = []
        for a, b in zip(cu_q.tolist(), cu_q[1:].tolist()):
            qs, ks, vs = (t[a:b].transpose(0, 1)[None] for t in (q, k, v))  # (1, H, L, D)
            o = torch.nn.functional.scaled_dot_product_attention(
                qs, ks, vs, is_causal=True, scale=scale, enable_gqa=k.shape[1] != q.shape[1]
            )
            out.append(o[0].transpose(0, 1))
        return torch.cat(out)

    return kernel


@pytest.mark.parametrize(
    "flags", [{}, {"window": False, "scale": False, "gqa": False}], ids=["torch-2.11", "torch-2.10"]
)
def test_packed_rows_through_the_varlen_interface_give_the_padded_sdpa_logprobs_and_gradients(
    model, monkeypatch, flags
) -> None:
    if varlen._kernel() is None:
        pytest.skip("this torch has no torch.nn.attention.varlen")
    varlen.register()
    calls: list[int] = []
    monkeypatch.setitem(varlen._KERNEL, "fn", reference_kernel(calls, gqa=flags.get("gqa", True)))
    monkeypatch.setitem(varlen._KERNEL, "float32", True)  # the reference runs the model's float32
    for key, value in flags.items():
        monkeypatch.setitem(varlen._KERNEL, key, value)
    monkeypatch.setattr(lp, "unavailable", lambda m: None)  # as on CUDA
    monkeypatch.setattr(model.config, "_attn_implementation", "sdpa")
    if not flags.get("scale", True):  # a kernel without `scale` uses D ** -0.5: the model's scaling must be folded in
        for layer in model.model.layers:
            monkeypatch.setattr(layer.self_attn, "scaling", layer.self_attn.scaling * 0.5)
    seqs = sequences(model.config.vocab_size, n=6, seed=3)
    [padded] = micro_batches(seqs, 8, 0, CPU)
    [packed] = micro_batches(seqs, 8, 0, CPU, pack=True)
    lengths = [len(s.ids) for s in sorted(seqs, key=lambda s: -len(s.ids))]
    assert packed.cu_seqlens.tolist() == [sum(lengths[:i]) for i in range(len(lengths) + 1)]
    assert packed.max_length == max(lengths) and packed.cu_seqlens.dtype == torch.int32

    a, ea = lp.micro_batch_logprobs(model, padded, 0.8, entropy=True)
    assert calls == []  # a padded micro-batch keeps the model's own attention
    b, eb = lp.micro_batch_logprobs(model, packed, 0.8, entropy=True)
    layers = model.config.num_hidden_layers
    assert calls == [sum(lengths)] * layers  # every layer, the whole row at once
    assert model.config._attn_implementation == "sdpa"  # switched for the packed forward only
    torch.testing.assert_close(b, a, rtol=2e-6, atol=1e-5)  # float32, sums in another order
    torch.testing.assert_close(eb, ea, rtol=2e-6, atol=1e-5)
    want = grads(model, lambda: weighted(lp.micro_batch_logprobs(model, padded, 0.8)[0], padded))
    got = grads(model, lambda: weighted(lp.micro_batch_logprobs(model, packed, 0.8)[0], packed))
    assert_same_gradients(got, want, 1e-5)


def test_the_attention_is_restored_when_the_forward_fails(model, monkeypatch) -> None:
    if varlen._kernel() is None:
        pytest.skip("this torch has no torch.nn.attention.varlen")

    def broken(*args, **kwargs):
        raise RuntimeError("kernel failed")

    varlen.register()
    monkeypatch.setitem(varlen._KERNEL, "fn", broken)
    monkeypatch.setattr(lp, "unavailable", lambda m: None)
    [packed] = micro_batches(sequences(model.config.vocab_size), 8, 0, CPU, pack=True)
    with pytest.raises(RuntimeError, match="kernel failed"):
        lp.micro_batch_logprobs(model, packed, 1.0)
    assert model.config._attn_implementation == "sdpa"


def test_the_interface_refuses_what_it_cannot_run() -> None:
    if varlen._kernel() is None:
        pytest.skip("this torch has no torch.nn.attention.varlen")
    varlen.register()
    q = torch.zeros(2, 4, 5, 8)  # two padded rows, no boundaries
    with pytest.raises(RuntimeError, match="packed rows only"):
        varlen.varlen_attention_forward(None, q, q, q, None)


def test_it_is_unavailable_off_cuda_and_for_other_attention(model, monkeypatch) -> None:
    why = varlen.unavailable(model)
    assert why is not None and ("CUDA only" in why or "torch.nn.attention.varlen" in why)
    monkeypatch.setattr(model.config, "_attn_implementation", "flex_attention")
    assert "flex_attention" in varlen.unavailable(model)

    class Wrapped(torch.nn.Module):  # DDP's shape: the model under .module
        def __init__(self, inner):
            super().__init__()
            self.module = inner

    assert "flex_attention" in varlen.unavailable(Wrapped(model))
    monkeypatch.setattr(model.config, "_attn_implementation", "sdpa")
    assert lp.packs_by_default(model) is False  # CPU: a block mask, so not by default


@pytest.mark.filterwarnings("ignore:`is_gradient_checkpointing` is deprecated:FutureWarning")  # peft asks
def test_a_lora_model_switches_its_base_models_attention(model, monkeypatch) -> None:
    """PEFT wraps the model; the switch must reach the config its attention layers read."""
    if varlen._kernel() is None:
        pytest.skip("this torch has no torch.nn.attention.varlen")
    import copy

    peft = pytest.importorskip("peft")
    lora = peft.get_peft_model(copy.deepcopy(model), peft.LoraConfig(r=4, target_modules=["q_proj", "v_proj"]))
    varlen.register()
    calls: list[int] = []
    monkeypatch.setitem(varlen._KERNEL, "fn", reference_kernel(calls))
    monkeypatch.setitem(varlen._KERNEL, "float32", True)
    monkeypatch.setattr(lp, "unavailable", lambda m: None)
    seqs = sequences(model.config.vocab_size, n=4, seed=7)
    [padded] = micro_batches(seqs, 8, 0, CPU)
    [packed] = micro_batches(seqs, 8, 0, CPU, pack=True)
    a, _ = lp.micro_batch_logprobs(lora, padded, 1.0)
    b, _ = lp.micro_batch_logprobs(lora, packed, 1.0)
    assert len(calls) == model.config.num_hidden_layers
    torch.testing.assert_close(b, a, rtol=2e-6, atol=1e-5)
    assert lora.config._attn_implementation == "sdpa"


def test_attention_dropout_in_train_mode_is_refused_with_what_to_do(model, monkeypatch) -> None:
    """rlvr sft trains in train mode: a model with attention dropout must not silently lose it."""
    if varlen._kernel() is None:
        pytest.skip("this torch has no torch.nn.attention.varlen")
    varlen.register()
    monkeypatch.setitem(varlen._KERNEL, "fn", reference_kernel([]))
    monkeypatch.setitem(varlen._KERNEL, "float32", True)
    monkeypatch.setattr(lp, "unavailable", lambda m: None)
    for layer in model.model.layers:
        monkeypatch.setattr(layer.self_attn, "attention_dropout", 0.1)
    [packed] = micro_batches(sequences(model.config.vocab_size), 8, 0, CPU, pack=True)
    model.train()
    try:
        with pytest.raises(RuntimeError, match="without pack_sequences, or set the model's attention_dropout to 0"):
            lp.micro_batch_logprobs(model, packed, 1.0)
        model.eval()  # rlvr train's mode: dropout off, so the same model runs
        lp.micro_batch_logprobs(model, packed, 1.0)
    finally:
        model.eval()
    assert model.config._attn_implementation == "sdpa"
