"""The policy update leaves sequences of advantage 0 out of its passes where that is exact (CPU,
tiny model): the same gradients and loss with fewer forward passes for every loss, nothing left
out with a KL term, an update whose sequences all have advantage 0, the share it logs, and two
processes (DDP and FSDP2, one holding only sequences of advantage 0) that match one."""

from __future__ import annotations

import copy
import dataclasses
import math
import random
import textwrap

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from vowel_training import alone, run, torchrun

from rlvr.models import build_tiny_model
from rlvr.train import update
from rlvr.train.distributed import Dist
from rlvr.train.loss_specs import SPECS
from rlvr.train.losses import LossConfig, zero_advantage_adds_nothing
from rlvr.train.sequences import TrainSequence, micro_batches, normaliser, sequences_normaliser

pytestmark = pytest.mark.usefixtures("one_thread")
CPU = torch.device("cpu")
DIST = Dist(rank=0, world=1, device=CPU)
ADVANTAGES = [0.0, 0.0, 0.8, -0.8, 0.0, 0.0, 1.2, 0.0]
"""Groups of 2: two whose rewards tie (advantage 0), one that does not, one with a rollout at
its group's mean (a lone 0)."""


@pytest.fixture(scope="module")
def model(scrambled_tiny):
    return scrambled_tiny


def batch(vocab: int, advantages: list[float] = ADVANTAGES, seed: int = 0) -> list[TrainSequence]:
    """One sequence per rollout, of different lengths: a prompt (mask 0), then a reply (mask 1)."""
    rng = random.Random(seed)
    out = []
    for i, adv in enumerate(advantages):
        prompt, reply = rng.randint(2, 9), rng.randint(1, 12)
        ids = [rng.randrange(vocab) for _ in range(prompt + reply)]
        out.append(TrainSequence(ids, [0] * prompt + [1] * reply, adv, [math.nan] * len(ids), i))
    return out


def settings(
    loss: str, *, skip: bool = True, minibatches: int = 1, size: int = 3, **loss_cfg: float
) -> update.UpdateSettings:
    cfg = LossConfig(norm_len=16, **loss_cfg)  # (the trainer passes max_tokens)
    return update.UpdateSettings(
        loss, cfg, minibatches, size, 1.0, False, 1e9, 0, pack_sequences=False, skip_zero_advantage=skip
    )


class Recorder(torch.optim.SGD):
    """SGD that keeps a copy of the gradient at each step (None: the weight had none)."""

    def __init__(self, params, lr: float) -> None:
        super().__init__(params, lr=lr)
        self.grads: list[list[torch.Tensor | None]] = []

    def step(self, closure=None):
        params = [p for g in self.param_groups for p in g["params"]]
        self.grads.append([None if p.grad is None else p.grad.clone() for p in params])
        return super().step(closure)


def train(model, seqs, how, *, ref=None, lr: float = 0.0):
    """One `update_policy` on a copy of `model`: its metrics, the gradient of each optimizer step,
    and the rows of each forward pass of the policy."""
    m = copy.deepcopy(model)
    rows: list[int] = []
    hook = m.register_forward_pre_hook(lambda _, args, kw: rows.append(kw["input_ids"].shape[0]), with_kwargs=True)
    opt = Recorder(m.parameters(), lr)
    try:
        stats = update.update_policy(m, ref, seqs, len(ADVANTAGES), how, opt, DIST)
    finally:
        hook.remove()
    return stats, opt.grads, rows


def assert_same_gradients(got, want, *, exact: bool = False) -> None:
    """Equal (`exact`), or each weight's gradient within 2e-5 of its largest entry: sequences
    grouped in other micro-batches sum in another order (measured: up to 4.4e-6 on this model,
    the same as micro-batches of 8 against micro-batches of 3 without skipping)."""
    assert len(got) == len(want)
    for step_got, step_want in zip(got, want, strict=True):
        for g, w in zip(step_got, step_want, strict=True):
            assert g is not None and w is not None
            if exact:
                assert torch.equal(g, w)
            else:
                torch.testing.assert_close(g, w, rtol=0, atol=2e-5 * float(w.abs().max()))


# ---- the same gradient with fewer passes -------------------------------------------------------


@pytest.mark.parametrize("size", [1, 3])
@pytest.mark.parametrize("minibatches", [1, 2])
@pytest.mark.parametrize("loss", list(SPECS))
def test_sequences_of_advantage_zero_skip_the_passes_and_the_gradient_stays(model, loss, minibatches, size) -> None:
    seqs = batch(model.config.vocab_size)
    ran = [s for s in seqs if s.advantage != 0]
    # two minibatches: the second is off-policy (old log-probs from a no-grad pass, ratios != 1)
    lr = 0.0 if minibatches == 1 else 0.05
    full, want, rows_full = train(model, seqs, settings(loss, skip=False, minibatches=minibatches, size=size), lr=lr)
    fast, got, rows_fast = train(model, seqs, settings(loss, minibatches=minibatches, size=size), lr=lr)
    passes = 1 if minibatches == 1 else 2  # (and the frozen log-probs' pass)
    assert sum(rows_full) == passes * len(seqs) and sum(rows_fast) == passes * len(ran)
    assert len(want) == minibatches and sum(w.abs().sum() for w in want[-1] if w is not None) > 0
    # the skipped sequences still count in the normaliser; one sequence a micro-batch, the same
    # micro-batches run and the skipped ones only added exact zeros: equal to the last bit
    assert_same_gradients(got, want, exact=size == 1)
    for name in ("loss/policy", "loss/total", "grad/norm"):
        assert math.isclose(fast[name], full[name], rel_tol=1e-5, abs_tol=1e-8), name
    assert fast["tokens/trained"] == full["tokens/trained"] == sum(sum(s.mask[1:]) for s in seqs)
    assert fast["tokens/processed"] == sum(len(s.ids) for s in ran) < full["tokens/processed"]
    assert fast["batch/skipped_seqs_frac"] == 5 / 8 and full["batch/skipped_seqs_frac"] == 0.0
    assert fast["ratio/mean"] == 1.0 if minibatches == 1 else math.isfinite(fast["ratio/mean"])


@pytest.mark.parametrize("pack", [False, True])
@pytest.mark.parametrize("loss", list(SPECS))
def test_an_advantage_per_token_trains_as_one_per_sequence_where_they_agree(model, loss, pack) -> None:
    """Turn credit's advantages per token (`TrainSequence.token_adv`), each sequence's own on its
    sampled tokens: the same gradient to the last bit, the same sequences skipped."""
    seqs = batch(model.config.vocab_size)
    spread = [dataclasses.replace(s, token_adv=[s.advantage * m for m in s.mask]) for s in seqs]
    how = dataclasses.replace(settings(loss), pack_sequences=pack)
    plain, want, rows_want = train(model, seqs, how)
    per_token, got, rows_got = train(model, spread, how)
    assert rows_got == rows_want and per_token["batch/skipped_seqs_frac"] == 5 / 8
    assert_same_gradients(got, want, exact=True)
    assert per_token["loss/policy"] == plain["loss/policy"]


def test_a_kl_term_or_a_padded_width_normaliser_skips_nothing(model) -> None:
    seqs = batch(model.config.vocab_size)
    stats, _, rows = train(model, seqs, settings("grpo", kl_coef=0.1), ref=copy.deepcopy(model))
    assert sum(rows) == len(seqs) and stats["batch/skipped_seqs_frac"] == 0.0 and "kl/ref" in stats
    assert not zero_advantage_adds_nothing("cispo", LossConfig(kl_coef=1e-3))
    # dr_grpo without norm_len divides by the padded width of the micro-batch: not skipped
    assert not zero_advantage_adds_nothing("dr_grpo", LossConfig())
    assert zero_advantage_adds_nothing("dr_grpo", LossConfig(norm_len=8))
    assert all(zero_advantage_adds_nothing(name, LossConfig(norm_len=8)) for name in SPECS)


@pytest.mark.parametrize("kind", ["seq-mean", "token-mean", "constant"])
def test_skipped_sequences_count_what_their_micro_batches_would(kind) -> None:
    # a sequence whose only mask 1 is its first id (no target after the shift), a one-id sequence
    seqs = [*batch(50), TrainSequence([3, 4, 5], [1, 0, 0], 0.0, [math.nan] * 3, 8)]
    seqs.append(TrainSequence([7], [1], 0.0, [math.nan], 9))
    plan = micro_batches(seqs, 3, 0, CPU)
    assert sequences_normaliser(kind, seqs) == sum(normaliser(kind, mb.cpu_mask) for mb in plan)
    assert sequences_normaliser(kind, []) == 0.0


def test_a_token_cap_cuts_micro_batches_by_tokens_and_leaves_the_gradient_as_it_was(model) -> None:
    seqs = batch(model.config.vocab_size)
    _, want, _ = train(model, seqs, settings("cispo", size=len(seqs)))
    widths: list[int] = []
    m = copy.deepcopy(model)
    hook = m.register_forward_pre_hook(lambda _, a, kw: widths.append(kw["input_ids"].numel()), with_kwargs=True)
    how = dataclasses.replace(settings("cispo", size=len(seqs)), micro_batch_tokens=24)
    opt = Recorder(m.parameters(), 0.0)
    update.update_policy(m, None, seqs, len(ADVANTAGES), how, opt, DIST)
    hook.remove()
    ran = [s for s in seqs if s.advantage != 0]  # (advantage 0 skips the passes)
    longest = max(len(s.ids) for s in ran)
    assert len(widths) > 1 and all(w <= max(24, longest) for w in widths), widths  # padded rows x width
    assert_same_gradients(opt.grads, want)


# ---- a batch of advantage 0 only ---------------------------------------------------------------


@pytest.mark.parametrize("loss", ["cispo", "grpo"])
def test_an_update_whose_sequences_all_have_advantage_zero_steps_on_zero_gradients(model, loss) -> None:
    seqs = batch(model.config.vocab_size, [0.0] * len(ADVANTAGES))
    full, want, _ = train(model, seqs, settings(loss, skip=False))
    fast, got, rows = train(model, seqs, settings(loss))
    assert rows == [1]  # one empty micro-batch: every weight gets its (zero) gradient
    assert_same_gradients(got, want)
    assert all(not g.any() for g in got[0] if g is not None)
    assert fast["loss/policy"] == fast["loss/total"] == full["loss/policy"] == 0.0
    assert fast["grad/norm"] == 0.0 and fast["batch/skipped_seqs_frac"] == 1.0
    assert fast["tokens/trained"] == full["tokens/trained"] > 0 and fast["tokens/processed"] == 0
    assert "entropy/mean" in full and "entropy/mean" not in fast  # no sequence ran


def test_adamw_moves_on_its_momentum_through_an_all_zero_update_as_before(model) -> None:
    """A None gradient would make AdamW skip the weight; a zero one moves it on its momentum.
    (One sequence a micro-batch: the same sums to the last bit, which Adam's division by the
    root of tiny second moments would otherwise magnify.)"""
    mixed = batch(model.config.vocab_size)
    zero = [dataclasses.replace(s, advantage=0.0) for s in mixed]
    after = {}
    for skip in (False, True):
        m = copy.deepcopy(model)
        opt = torch.optim.AdamW(m.parameters(), lr=1e-2, weight_decay=0.0)
        how = settings("cispo", skip=skip, size=1)
        update.update_policy(m, None, mixed, 8, how, opt, DIST)
        first = torch.cat([p.detach().flatten() for p in m.parameters()])
        update.update_policy(m, None, zero, 8, how, opt, DIST)
        after[skip] = torch.cat([p.detach().flatten() for p in m.parameters()])
        assert not torch.equal(after[skip], first)
    assert torch.equal(after[True], after[False])


# ---- several processes -------------------------------------------------------------------------

SCRIPT = textwrap.dedent("""
    import json, math, os, random, sys
    import torch
    from transformers import AutoModelForCausalLM
    from rlvr.train import update
    from rlvr.train.distributed import setup_distributed
    from rlvr.train.losses import LossConfig
    from rlvr.train.sequences import TrainSequence, micro_batches, normaliser, sequences_normaliser
    from rlvr.train.sharding import wrap

    torch.set_num_threads(1)
    model_dir, out, skip = sys.argv[1], sys.argv[2], sys.argv[3] == "1"
    dist = setup_distributed("cpu")
    rng = random.Random(0)
    advantages = [0.8, -0.8, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0]  # process 1 of 2 gets only zeros
    seqs = []
    for i, adv in enumerate(advantages):
        prompt, reply = rng.randint(2, 9), rng.randint(1, 12)
        ids = [rng.randrange(100) for _ in range(prompt + reply)]
        seqs.append(TrainSequence(ids, [0] * prompt + [1] * reply, adv, [math.nan] * len(ids), i))
    mine = [s for s in seqs if s.rollout in dist.shard(list(range(len(seqs))))]
    result = {}
    for sharding in ("ddp", "fsdp"):
        model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
        before = [p.detach().clone() for p in model.parameters()]
        policy = wrap(model, dist, sharding)
        how = update.UpdateSettings("cispo", LossConfig(norm_len=16), 1, 1, 1.0, False, 1e9, 0,
                                    pack_sequences=False, skip_zero_advantage=skip)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        stats = update.update_policy(policy, None, mine, len(seqs), how, opt, dist)
        weights = [getattr(p, "full_tensor", lambda p=p: p)().detach() for p in model.parameters()]
        moved = any(not torch.equal(w, b) for w, b in zip(weights, before))
        result[sharding] = {"stats": stats, "weights": [w.flatten().tolist() for w in weights], "moved": moved}
    if dist.rank == 0:
        with open(out, "w") as f:
            json.dump(result, f)
    dist.close()
""")


@pytest.mark.heavy
@pytest.mark.slow
def test_two_processes_one_with_only_advantage_zero_match_one_process(tmp_path) -> None:
    import json

    model = str(build_tiny_model(tmp_path / "tiny", preset="tiny", seed=0))
    script = tmp_path / "update.py"
    script.write_text(SCRIPT)
    run(alone(str(script), model, str(tmp_path / "full.json"), "0"), tmp_path)
    run(torchrun(str(script), model, str(tmp_path / "two.json"), "1"), tmp_path)  # would hang if ranks differed
    full = json.loads((tmp_path / "full.json").read_text())
    two = json.loads((tmp_path / "two.json").read_text())
    for sharding in ("ddp", "fsdp"):
        a, b = full[sharding], two[sharding]
        assert a["stats"]["batch/skipped_seqs_frac"] == 0.0 and b["stats"]["batch/skipped_seqs_frac"] == 6 / 8
        assert math.isclose(b["stats"]["loss/policy"], a["stats"]["loss/policy"], rel_tol=1e-5)
        assert a["moved"] and b["moved"]
        for x, y in zip(a["weights"], b["weights"], strict=True):
            torch.testing.assert_close(torch.tensor(y), torch.tensor(x), rtol=1e-5, atol=1e-6)
