"""`rlvr sft`: assistant-only SFT on a tiny model (CPU): loss falls, LoRA, resume, bad data."""

from __future__ import annotations

import json
import os

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from rlvr.cli import main
from rlvr.errors import UsageError
from rlvr.models import build_tiny_model
from rlvr.train.sft import run_batch, train_sft
from rlvr.train.sft_config import SFTConfig
from rlvr.train.sft_data import Sample, read_dataset, tokenize_rows

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    return build_tiny_model(tmp_path_factory.mktemp("tiny"), preset="tiny")


def conversation(i: int) -> dict:
    cell = i % 9
    return {
        "messages": [
            {"role": "system", "content": "Answer with a move."},
            {"role": "user", "content": f"Play cell {cell}."},
            {
                "role": "assistant",
                "content": f"<think>cell {cell} is free</think>\n<move>{cell}</move>",
            },
            {"role": "user", "content": "Again."},
            {"role": "assistant", "content": f"<move>{cell}</move>"},
        ],
        "reward": 1.0,
    }


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    path = tmp_path_factory.mktemp("data") / "chats.jsonl"
    path.write_text("".join(json.dumps(conversation(i)) + "\n" for i in range(40)))
    return path


def config(tiny_dir, data, out, **kw) -> SFTConfig:
    values = {
        "model": str(tiny_dir),
        "data": str(data),
        "output_dir": str(out),
        "max_steps": 25,
        "batch_size": 8,
        "micro_batch_size": 4,
        "lr": 3e-3,
        "warmup_steps": 2,
        "eval_fraction": 0.1,
        "eval_every": 10,
        "save_every": None,
    }
    return SFTConfig(**{**values, **kw})


def test_full_fine_tuning_loss_falls_and_final_model_loads(tiny_dir, data, tmp_path) -> None:
    result = train_sft(config(tiny_dir, data, tmp_path / "run"), quiet=True)
    first, last = result.train_loss[0], sum(result.train_loss[-3:]) / 3
    assert len(result.train_loss) == 25 and last < 0.3 * first, result.train_loss
    assert result.eval_loss[-1] < 0.3 * result.eval_loss[0], result.eval_loss
    run = tmp_path / "run"
    assert (run / "plots" / "loss.png").stat().st_size > 0 and list((run / "tensorboard").iterdir())
    header = (run / "metrics.csv").read_text().splitlines()[0]
    assert {"loss/train", "loss/eval", "optim/lr", "grad/norm"} <= set(header.split(","))
    assert (run / "checkpoints" / "step_000025" / "trainer.pt").is_file()
    model = transformers.AutoModelForCausalLM.from_pretrained(result.final_dir)
    tokenizer = transformers.AutoTokenizer.from_pretrained(result.final_dir)
    prompt = tokenizer.apply_chat_template(conversation(4)["messages"][:2], add_generation_prompt=True, tokenize=False)
    ids = tokenizer(prompt, add_special_tokens=False, return_tensors="pt")["input_ids"]
    out = model.generate(ids, max_new_tokens=20, do_sample=False)
    assert "<move>" in tokenizer.decode(out[0, ids.shape[1] :])  # it picked up the format


def test_lora_trains_adapters_and_saves_a_merged_model(tiny_dir, data, tmp_path) -> None:
    result = train_sft(config(tiny_dir, data, tmp_path / "lora", lora_rank=8, lr=1e-2, max_steps=12), quiet=True)
    assert sum(result.train_loss[-3:]) / 3 < 0.8 * result.train_loss[0], result.train_loss
    assert not list(result.final_dir.glob("adapter_*"))  # merged: a plain model folder
    base = transformers.AutoModelForCausalLM.from_pretrained(tiny_dir)
    tuned = transformers.AutoModelForCausalLM.from_pretrained(result.final_dir)
    changed = [n for n, p in tuned.named_parameters() if not torch.equal(p, base.get_parameter(n))]
    assert any("q_proj" in n for n in changed) and not any("embed" in n or "norm" in n for n in changed)


def test_resume_continues_exactly_where_the_run_stopped(tiny_dir, data, tmp_path) -> None:
    def cfg(out, steps):  # constant LR: the schedule does not depend on max_steps
        return config(tiny_dir, data, tmp_path / out, max_steps=steps, save_every=3, lr_schedule="constant")

    straight = train_sft(cfg("a", 6), quiet=True)
    train_sft(cfg("b", 3), quiet=True)  # as if killed after the checkpoint of step 3
    resumed = train_sft(cfg("b", 6), resume=True, quiet=True)
    assert len(resumed.train_loss) == 3
    assert resumed.train_loss == pytest.approx(straight.train_loss[3:], rel=1e-5)
    a = transformers.AutoModelForCausalLM.from_pretrained(straight.final_dir)
    b = transformers.AutoModelForCausalLM.from_pretrained(resumed.final_dir)
    assert all(torch.allclose(p, b.get_parameter(n), atol=1e-6) for n, p in a.named_parameters())
    rows = (tmp_path / "b" / "metrics.csv").read_text().splitlines()
    steps = [r.split(",")[0] for r in rows[1:] if r.split(",")[1:2] != [""]]
    assert len([s for s in steps if s]) == len(set(steps))  # no step logged twice


def test_loss_is_a_token_mean_whatever_the_micro_batch_size(tiny_dir) -> None:
    model = transformers.AutoModelForCausalLM.from_pretrained(tiny_dir)
    samples = [
        Sample([5, 6, 7, 8], [0, 0, 1, 1], 1),
        Sample([9, 10, 11, 12, 13, 14], [0, 1, 1, 1, 1, 0], 2),
    ]
    cfg = SFTConfig(model="m", data="d", output_dir="o", micro_batch_size=1)
    one, n = run_batch(model, samples, cfg, 0, torch.device("cpu"), False, train=False)
    both, _ = run_batch(
        model,
        samples,
        SFTConfig(model="m", data="d", output_dir="o"),
        0,
        torch.device("cpu"),
        False,
        train=False,
    )
    with torch.no_grad():
        logp = [torch.log_softmax(model(torch.tensor([s.ids])).logits[0].float(), -1) for s in samples]
    manual = [-lp[t - 1, s.ids[t]].item() for lp, s in zip(logp, samples) for t in range(1, len(s.ids)) if s.mask[t]]
    assert n == 6 and one == pytest.approx(both, rel=1e-5) and one == pytest.approx(sum(manual) / 6, rel=1e-4)


@pytest.mark.parametrize("pack", [False, True], ids=["padded", "packed"])
def test_the_chunked_loss_gives_the_full_logits_loss_and_gradient(tiny_dir, pack) -> None:
    """`summed_loss` runs the RL update's chunked head, on padded or packed rows; the full-logits
    cross-entropy it replaced (padded rows, an attention mask) gives the same sum and gradient."""
    from rlvr.train.sft import summed_loss

    model = transformers.AutoModelForCausalLM.from_pretrained(tiny_dir)
    samples = [
        Sample([5, 6, 7, 8, 9, 10, 11], [0, 0, 1, 1, 0, 1, 1], 1),
        Sample([9, 10, 11, 12], [0, 1, 1, 1], 2),
        Sample([20, 21, 22], [0, 0, 0], 3),  # nothing to learn: no loss, no gradient
    ]
    width = max(len(s.ids) for s in samples)
    ids = torch.tensor([s.ids + [0] * (width - len(s.ids)) for s in samples])
    attention = torch.tensor([[1] * len(s.ids) + [0] * (width - len(s.ids)) for s in samples])
    mask = torch.tensor([s.mask + [0] * (width - len(s.mask)) for s in samples], dtype=torch.float32)

    def full() -> torch.Tensor:
        logits = model(input_ids=ids, attention_mask=attention).logits[:, :-1].float()
        ce = torch.nn.functional.cross_entropy(logits.transpose(1, 2), ids[:, 1:], reduction="none")
        return (ce * mask[:, 1:]).sum()

    def grads(fn) -> list[torch.Tensor]:
        model.zero_grad(set_to_none=True)
        loss = fn()
        loss.backward()
        out = [loss.detach(), *(p.grad.clone() for p in model.parameters())]
        model.zero_grad(set_to_none=True)
        return out

    want, got = grads(full), grads(lambda: summed_loss(model, samples, 0, torch.device("cpu"), pack=pack))
    torch.testing.assert_close(got[0], want[0], rtol=1e-6, atol=1e-5)
    for a, b in zip(got[1:], want[1:]):
        assert (a - b).norm() <= 1e-5 * b.norm() + 1e-12


def _error(capsys, argv) -> str:
    code = main(argv)
    err = capsys.readouterr().err
    assert code != 0 and "Traceback" not in err and err.count("\n") == 1, err
    return err


def test_malformed_lines_are_reported_by_number(tiny_dir, tmp_path, capsys) -> None:
    bad = tmp_path / "bad.jsonl"
    lines = [json.dumps(conversation(i)) for i in range(6)]
    lines[1] = "{not json"
    lines[3] = json.dumps({"messages": [{"role": "user", "content": "no answer"}]})
    lines[4] = json.dumps({"messages": [{"role": "robot", "content": "x"}]})
    bad.write_text("\n".join(lines) + "\n\n")
    argv = [
        "sft",
        "-m",
        str(tiny_dir),
        "-d",
        str(bad),
        "-o",
        str(tmp_path / "r"),
        "--steps",
        "1",
        "--eval-fraction",
        "0",
        "-q",
    ]
    err = _error(capsys, argv)
    assert "has 3 malformed line(s) (line 2: not JSON" in err and "line 4: no assistant message" in err
    assert "line 5: message 0 needs a role" in err and "--skip-bad-lines" in err
    rows, skipped = read_dataset(bad, skip_bad_lines=True)
    assert skipped == [2, 4, 5] and [r["line"] for r in rows] == [1, 3, 6]
    assert main(argv[:-1] + ["--skip-bad-lines", "-o", str(tmp_path / "r2")]) == 0
    assert "skipped 3 malformed line(s) of" in capsys.readouterr().out
    assert (tmp_path / "r2" / "final" / "config.json").is_file()


def test_hostile_lines_are_one_line_errors_and_lone_surrogates_train(tiny_dir, tmp_path, capsys) -> None:
    argv = ["sft", "-m", str(tiny_dir), "--steps", "1", "--eval-fraction", "0", "-q"]
    for i, (messages, expected) in enumerate(
        [
            ([{"role": "assistant"}], "line 1: message 0 (assistant) has neither content nor tool_calls"),
            ([{"role": "assistant", "content": "hi"}], "line 1: the conversation opens with an assistant message"),
        ]
    ):
        path = tmp_path / f"bad{i}.jsonl"
        path.write_text(json.dumps({"messages": messages}) + "\n")
        assert expected in _error(capsys, argv + ["-d", str(path), "-o", str(tmp_path / f"r{i}")])
    odd = tmp_path / "odd.jsonl"  # what `rlvr gen` writes for a reply holding a lone surrogate
    odd.write_text(
        json.dumps({"messages": [{"role": "user", "content": "a\ud800"}, {"role": "assistant", "content": "\udfffb"}]})
        + "\n"
    )
    rows, _ = read_dataset(odd)
    tokenizer = transformers.AutoTokenizer.from_pretrained(tiny_dir)
    [sample] = tokenize_rows(tokenizer, rows, 512)
    assert "\ufffdb" in tokenizer.decode([t for t, m in zip(sample.ids, sample.mask) if m])


def test_bad_input_is_one_line(tiny_dir, data, tmp_path, capsys) -> None:
    base = ["sft", "-d", str(data), "--steps", "1", "-q"]
    assert "cannot load a tokenizer" in _error(capsys, base + ["-m", str(tmp_path / "nope"), "-o", str(tmp_path / "x")])
    assert "does not exist" in _error(
        capsys,
        [
            "sft",
            "-m",
            str(tiny_dir),
            "-d",
            str(tmp_path / "none.jsonl"),
            "-o",
            str(tmp_path / "y"),
            "-q",
        ],
    )
    assert "lr must be > 0" in _error(capsys, base + ["-m", str(tiny_dir), "-o", str(tmp_path / "z"), "--lr", "0"])
    out = tmp_path / "done"
    assert main(base + ["-m", str(tiny_dir), "-o", str(out)]) == 0
    capsys.readouterr()
    assert "already holds a run (sft_config.json)" in _error(capsys, base + ["-m", str(tiny_dir), "-o", str(out)])
    assert "cannot resume: lr was" in _error(
        capsys, base + ["-m", str(tiny_dir), "-o", str(out), "--resume", "--lr", "0.5"]
    )
    with pytest.raises(UsageError, match="unknown lr_schedule 'step'; expected one of constant, linear, cosine"):
        SFTConfig(model="m", data="d", output_dir="o", lr_schedule="step")


def test_deterministic_kernels_are_on_for_the_run_only(tiny_dir, data, tmp_path, monkeypatch) -> None:
    from rlvr.train import grpo, sft
    from rlvr.train.config import TrainConfig

    seen = []

    def state(cfg, **kw) -> None:
        seen.append((torch.are_deterministic_algorithms_enabled(), os.environ.get("CUBLAS_WORKSPACE_CONFIG")))

    monkeypatch.setattr(sft, "_train_sft", state)
    monkeypatch.setattr(grpo, "_train", state)
    monkeypatch.delenv("CUBLAS_WORKSPACE_CONFIG", raising=False)
    for deterministic in (True, False):
        sft.train_sft(config(tiny_dir, data, tmp_path / "s", deterministic=deterministic))
        grpo.train(TrainConfig(env="x", model=str(tiny_dir), deterministic=deterministic))
    assert seen == [(True, ":4096:8")] * 2 + [(False, None)] * 2
    assert not torch.are_deterministic_algorithms_enabled()
    assert "CUBLAS_WORKSPACE_CONFIG" not in os.environ


def test_tf32_flags_set_by_a_run_are_restored_after_it_even_when_it_fails(tiny_dir, monkeypatch) -> None:
    from rlvr.train import grpo
    from rlvr.train.config import TrainConfig

    def sets_tf32(cfg, **kw) -> None:  # as setup_run does on a GPU
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True
        raise RuntimeError("stopped")

    monkeypatch.setattr(grpo, "_train", sets_tf32)
    saved = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    try:
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
        with pytest.raises(RuntimeError, match="stopped"):
            grpo.train(TrainConfig(env="x", model=str(tiny_dir)))
        assert (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32) == (False, False)
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved


def test_a_kernel_without_a_deterministic_version_is_a_one_line_error() -> None:
    from rlvr.errors import ModelError
    from rlvr.train.model import deterministic_kernels

    expected = "^--deterministic: put_ does not have a deterministic implementation; run without --deterministic$"
    with pytest.raises(ModelError, match=expected), deterministic_kernels(True):
        torch.zeros(3).put_(torch.tensor([0]), torch.tensor([1.0]))  # no deterministic version on any device
    assert not torch.are_deterministic_algorithms_enabled()
    with pytest.raises(RuntimeError, match="other"), deterministic_kernels(True):
        raise RuntimeError("other")  # any other error passes through as it is


def test_deterministic_sft_on_a_cpu_trains_the_same_weights_twice(tiny_dir, data, tmp_path) -> None:
    """The run under the flag, end to end and repeatable. A CPU's kernels repeat without the flag
    too, so this does not show the flag's effect: that needs a GPU (tests/test_gpu.py)."""
    from safetensors.torch import load_file

    finals = []
    for name in ("a", "b"):
        train_sft(config(tiny_dir, data, tmp_path / name, max_steps=6, deterministic=True), quiet=True)
        finals.append(load_file(str(tmp_path / name / "final" / "model.safetensors")))
    assert finals[0].keys() == finals[1].keys()
    assert all(torch.equal(finals[0][k], finals[1][k]) for k in finals[0])


@pytest.mark.heavy
def test_gradient_checkpointing_trains_the_same_weights_and_may_change_on_resume(
    tiny_dir, data, tmp_path, monkeypatch
) -> None:
    """Recomputing the blocks in the backward pass changes memory, not the math: the same
    weights after the same steps (LoRA too); and a resumed run may turn it on (an OOM's fix)."""
    from safetensors.torch import load_file

    from rlvr.train import logprobs

    recomputed, real = [], logprobs._checkpointed
    monkeypatch.setattr(logprobs, "_checkpointed", lambda *a, **kw: recomputed.append(1) or real(*a, **kw))
    for lora in (0, 4):
        finals = []
        for name, on in (("plain", False), ("ckpt", True)):
            out = tmp_path / f"{name}{lora}"
            train_sft(config(tiny_dir, data, out, max_steps=3, lora_rank=lora, gradient_checkpointing=on), quiet=True)
            finals.append(load_file(str(out / "final" / "model.safetensors")))
        assert finals[0].keys() == finals[1].keys()
        assert all(torch.equal(finals[0][k], finals[1][k]) for k in finals[0]), lora
    assert recomputed  # the checkpointed runs went through it
    more = config(tiny_dir, data, tmp_path / "plain0", max_steps=4, gradient_checkpointing=True)
    assert len(train_sft(more, resume=True, quiet=True).train_loss) == 1


def test_packed_sft_trains_as_padded_sft(tiny_dir, data, tmp_path, monkeypatch) -> None:
    """`pack_sequences`: the same run on packed rows (one row a micro-batch) ends at the padded
    run's weights (float32 sums in another order)."""
    from safetensors.torch import load_file

    from rlvr.train import sft

    rows, real = [], sft.micro_batches

    def counted(*args, **kwargs):
        out = real(*args, **kwargs)
        rows.extend(mb.ids.shape[0] for mb in out)
        return out

    monkeypatch.setattr(sft, "micro_batches", counted)
    finals, seen = [], []
    for name, pack in (("padded", False), ("packed", True)):
        rows.clear()
        train_sft(config(tiny_dir, data, tmp_path / name, max_steps=3, pack_sequences=pack), quiet=True)
        finals.append(load_file(str(tmp_path / name / "final" / "model.safetensors")))
        seen.append(set(rows))
    assert seen[0] >= {4} and seen[1] == {1}  # micro-batches of 4 conversations: 4 rows, or 1 packed
    base = load_file(str(tiny_dir / "model.safetensors"))
    moved = {k: (finals[0][k] - base[k]).norm() for k in finals[0]}
    assert sum(moved.values()) > 0
    for key in finals[0]:  # AdamW's first steps move by about lr a weight, whatever the gradient's size
        assert (finals[1][key] - finals[0][key]).norm() <= 1e-3 * moved[key] + 1e-7, key
