"""Policy losses against hand-computed values and gradients (float64, tiny tensors)."""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")

from rlvr.errors import UsageError
from rlvr.train.loss_specs import SPECS
from rlvr.train.losses import LOSSES, LossConfig

F64 = torch.float64
NAN = float("nan")


def t(rows: list[list[float]]):
    return torch.tensor(rows, dtype=F64)


def logp_leaf(rows: list[list[float]]):
    return torch.tensor(rows, dtype=F64, requires_grad=True)


def close(actual, expected: float, tol: float = 1e-12) -> None:
    value = actual.item()
    assert math.isclose(value, expected, rel_tol=tol, abs_tol=tol), (value, expected)


def grads_close(actual, expected: list[list[float]]) -> None:
    torch.testing.assert_close(actual, t(expected), rtol=1e-12, atol=1e-12)


# Batch used by the PPO-family tests: B = 2, T = 3.
# seq 0: A = +1, ratios 1.1, 1.5, 0.5, all trainable.
# seq 1: A = -2, ratios 0.7, 1.0, then one padding token whose old_logp is NaN.
LOGP = [[-1.0, -1.0, -1.0], [-2.0, -2.0, -3.0]]
RATIOS = [[1.1, 1.5, 0.5], [0.7, 1.0, 1.0]]
OLD = [[lp - math.log(r) for lp, r in zip(row, rr, strict=True)] for row, rr in zip(LOGP, RATIOS, strict=True)]
OLD[1][2] = NAN
MASK = [[1, 1, 1], [1, 1, 0]]
ADV = [1.0, -2.0]


def run(name: str, cfg: LossConfig, logp=LOGP, old=OLD, adv=ADV, mask=MASK, ref=None):
    lp = logp_leaf(logp)
    loss, stats = LOSSES[name](
        lp, t(old), torch.tensor(adv, dtype=F64), t(mask), cfg, ref_logp=None if ref is None else t(ref)
    )
    loss.backward()
    return loss, stats, lp.grad


def test_grpo_value_clipping_and_zero_gradients():
    loss, stats, grad = run("grpo", LossConfig(clip_eps=0.2))
    # seq 0 (A=1): min(1.1,1.1)=1.1, min(1.5,1.2)=1.2 (clipped), min(0.5,0.8)=0.5 -> mean 2.8/3
    # seq 1 (A=-2): min(-1.4,-1.6)=-1.6 (clipped), min(-2,-2)=-2 -> mean -1.8
    close(loss, (-2.8 / 3 + 1.8) / 2)
    close(stats["loss/policy"], (-2.8 / 3 + 1.8) / 2)
    # d loss / d logp = -r*A / (n_tokens(seq) * n_seqs) where not clipped, else exactly 0.
    grads_close(grad, [[-1.1 / 6, 0.0, -0.5 / 6], [0.0, 2.0 / 4, 0.0]])
    assert grad[0, 1].item() == 0.0  # A > 0 and r > 1 + eps
    assert grad[1, 0].item() == 0.0  # A < 0 and r < 1 - eps
    assert grad[1, 2].item() == 0.0  # masked (and its old_logp is NaN)
    close(stats["clip/frac"], 2 / 5)
    close(stats["clip/high_frac"], 1 / 5)
    close(stats["clip/low_frac"], 1 / 5)
    close(stats["ratio/max"], 1.5)
    close(stats["ratio/min"], 0.5)
    close(stats["ratio/mean"], (1.1 + 1.5 + 0.5 + 0.7 + 1.0) / 5)
    close(stats["is_weight/mean"], (1.1 + 0.5 + 1.0) / 5)  # clipped tokens weigh 0
    assert "kl/ref" not in stats


def test_dr_grpo_divides_by_a_constant():
    # Sum of token terms: -(1.1 + 1.2 + 0.5) + (1.6 + 2.0) = 0.8.
    loss, _, grad = run("dr_grpo", LossConfig(clip_eps=0.2))
    close(loss, 0.8 / (2 * 3))  # B * T
    grads_close(grad, [[-1.1 / 6, 0.0, -0.5 / 6], [0.0, 2.0 / 6, 0.0]])
    loss, _, grad = run("dr_grpo", LossConfig(clip_eps=0.2, norm_len=10))
    close(loss, 0.8 / (2 * 10))
    close(grad[1, 1], 2.0 / 20)


def test_dapo_token_mean_and_clip_higher():
    loss, stats, grad = run("dapo", LossConfig(clip_eps=0.2, clip_eps_high=0.28))
    # r = 1.5 with A > 0 is now clipped at 1.28; the rest as in GRPO; 5 tokens in all.
    close(loss, (-(1.1 + 1.28 + 0.5) + (1.6 + 2.0)) / 5)
    grads_close(grad, [[-1.1 / 5, 0.0, -0.5 / 5], [0.0, 2.0 / 5, 0.0]])
    close(stats["clip/frac"], 2 / 5)


def test_dapo_asymmetric_clip_boundaries():
    # One sequence per case, eps_low = 0.2, eps_high = 0.28, one token each, 6 tokens in all.
    ratios = [1.25, 1.3, 0.75, 0.85, 1.5, 0.5]
    adv = [1.0, 1.0, -1.0, -1.0, -1.0, 1.0]
    logp = [[-1.0]] * 6
    old = [[-1.0 - math.log(r)] for r in ratios]
    _, stats, grad = run(
        "dapo", LossConfig(clip_eps=0.2, clip_eps_high=0.28), logp=logp, old=old, adv=adv, mask=[[1]] * 6
    )
    expected = [
        -1.25 / 6,  # A>0, r=1.25 < 1.28: inside the raised upper bound, gradient flows
        0.0,  # A>0, r=1.3 > 1.28: clipped
        0.0,  # A<0, r=0.75 < 0.8: lower bound unchanged, clipped
        0.85 / 6,  # A<0, r=0.85 >= 0.8: flows
        1.5 / 6,  # A<0, r=1.5: the pessimistic min keeps r*A, flows
        -0.5 / 6,  # A>0, r=0.5: flows
    ]
    grads_close(grad, [[g] for g in expected])
    close(stats["clip/high_frac"], 1 / 6)
    close(stats["clip/low_frac"], 1 / 6)
    # The same r = 1.25 token is clipped by symmetric GRPO (upper bound 1.2).
    _, _, grad = run("grpo", LossConfig(clip_eps=0.2), logp=[[-1.0]], old=[old[0]], adv=[1.0], mask=[[1]])
    assert grad.item() == 0.0


def test_cispo_caps_the_weight_and_keeps_the_gradient():
    logp = [[-0.5, -1.0], [-2.0, -7.0]]
    old = [[-0.5 - math.log(3.0), -1.0], [-2.0 - math.log(0.5), NAN]]  # r = 3, 1 / 0.5, pad
    loss, stats, grad = run(
        "cispo", LossConfig(max_is_weight=2.0), logp=logp, old=old, adv=[1.5, -1.0], mask=[[1, 1], [1, 0]]
    )
    # weights w = min(r, 2): 2, 1, 0.5; loss = -sum(w * A * logp) / 3
    close(loss, -(2 * 1.5 * -0.5 + 1 * 1.5 * -1.0 + 0.5 * -1.0 * -2.0) / 3)
    # grad = -w * A / N, nonzero for the token whose ratio 3 exceeds the cap.
    grads_close(grad, [[-2 * 1.5 / 3, -1 * 1.5 / 3], [0.5 / 3, 0.0]])
    close(stats["clip/frac"], 1 / 3)
    close(stats["clip/high_frac"], 1 / 3)
    close(stats["is_weight/max"], 2.0)
    close(stats["is_weight/mean"], 3.5 / 3)
    close(stats["ratio/max"], 3.0)


@pytest.mark.parametrize("name", list(SPECS))
def test_on_policy_gradient_is_minus_advantage_over_normaliser(name: str):
    # Off-mask log-probs are -inf (as padding may hold); the last sequence has no trainable token.
    inf = float("inf")
    logp = [[-0.3, -1.2, -0.7, -2.0], [-0.1, -0.9, -inf, -inf], [-inf, -0.4, -0.2, -inf], [-inf] * 4]
    mask = [[1, 1, 1, 1], [1, 1, 0, 0], [0, 1, 1, 0], [0, 0, 0, 0]]
    adv = [0.5, -1.5, 2.0, 1.0]
    loss, stats, grad = run(name, LossConfig(), logp=logp, old=logp, adv=adv, mask=mask)
    assert math.isfinite(loss.item())
    n_tok = [4, 2, 2, 1]
    kind = SPECS[name].normalisation
    if kind == "seq-mean":
        norm = [n * 3 for n in n_tok]  # mean per sequence, then over the 3 non-empty ones
    elif kind == "constant":
        norm = [4 * 4] * 4  # B * T
    else:
        norm = [8] * 4  # all trainable tokens
    expected = [[-a / nm * m for m in row] for a, nm, row in zip(adv, norm, mask, strict=True)]
    grads_close(grad, expected)
    close(stats["clip/frac"], 0.0)
    close(stats["ratio/mean"], 1.0)


def test_gspo_sequence_ratio_clip_and_token_gradient():
    # seq 0: log-ratios 0.1, 0.3 -> s0 = exp(0.2); seq 1: -1e-4, 1e-4, 3e-4 -> s1 = exp(1e-4)
    logp = [[-1.0, -2.0, -1.0], [-0.5, -0.6, -0.7]]
    old = [[-1.1, -2.3, NAN], [-0.5 + 1e-4, -0.6 - 1e-4, -0.7 - 3e-4]]
    mask = [[1, 1, 0], [1, 1, 1]]
    s0, s1 = math.exp(0.2), math.exp(1e-4)
    loss, stats, grad = run("gspo", LossConfig(), logp=logp, old=old, adv=[1.0, -1.0], mask=mask)
    # defaults clip s to [1 - 3e-4, 1 + 4e-4]: s0 (A>0) is clipped, s1 is inside.
    close(loss, (-(1 + 4e-4) * 1.0 + s1) / 2, tol=1e-9)
    grads_close(grad, [[0.0, 0.0, 0.0], [s1 / 6, s1 / 6, s1 / 6]])
    close(stats["ratio/max"], s0, tol=1e-9)
    close(stats["ratio/mean"], (s0 + s1) / 2, tol=1e-9)
    close(stats["clip/frac"], 2 / 5)  # the 2 tokens of seq 0
    # With wide bounds nothing is clipped: value s_i, gradient -s_i * A / (n_i * n_seqs).
    loss, _, grad = run(
        "gspo", LossConfig(seq_clip_eps=0.5, seq_clip_eps_high=0.5), logp=logp, old=old, adv=[1.0, -1.0], mask=mask
    )
    close(loss, (-s0 + s1) / 2, tol=1e-9)
    grads_close(grad, [[-s0 / 4, -s0 / 4, 0.0], [s1 / 6, s1 / 6, s1 / 6]])


def test_gspo_negative_advantage_below_lower_bound_is_clipped():
    logp = [[-1.0, -1.0]]
    old = [[-0.9, -0.9]]  # s = exp(-0.1) < 1 - 3e-4
    loss, stats, grad = run("gspo", LossConfig(), logp=logp, old=old, adv=[-1.0], mask=[[1, 1]])
    close(loss, 1 - 3e-4, tol=1e-9)  # -min(-s, -(1 - 3e-4)) = 1 - 3e-4
    grads_close(grad, [[0.0, 0.0]])
    close(stats["clip/low_frac"], 1.0)


@pytest.mark.parametrize("name", list(SPECS))
def test_zero_advantage_gives_zero_gradient(name: str):
    _, _, grad = run(name, LossConfig(), adv=[0.0, 0.0])
    assert torch.equal(grad, torch.zeros_like(grad))


@pytest.mark.parametrize("name", list(SPECS))
def test_empty_mask_gives_zero_loss_without_nan(name: str):
    loss, stats, grad = run(name, LossConfig(), mask=[[0, 0, 0], [0, 0, 0]], old=[[NAN] * 3] * 2)
    assert loss.item() == 0.0
    assert torch.equal(grad, torch.zeros_like(grad))
    assert all(math.isfinite(v.item()) for v in stats.values())


@pytest.mark.parametrize("name", list(SPECS))
def test_an_advantage_per_token_is_the_same_loss_where_it_is_constant_and_credits_each_token(name: str):
    # one advantage per sequence, spread over its tokens (padding holds garbage, off the mask)
    spread = [[1.0, 1.0, 1.0], [-2.0, -2.0, 7.0]]
    loss, stats, grad = run(name, LossConfig(kl_coef=0.1), adv=spread, ref=LOGP)
    want_loss, want_stats, want_grad = run(name, LossConfig(kl_coef=0.1), ref=LOGP)
    close(loss, want_loss.item())
    torch.testing.assert_close(grad, want_grad, rtol=1e-12, atol=1e-12)
    assert stats.keys() == want_stats.keys()
    # one token of advantage 0 (seq 0, token 1): no policy gradient there; the others keep theirs
    _, _, part = run(name, LossConfig(), adv=[[1.0, 0.0, 1.0], [-2.0, -2.0, 7.0]])
    _, _, whole = run(name, LossConfig())
    assert part[0, 1].item() == 0.0
    torch.testing.assert_close(part[1], whole[1], rtol=1e-12, atol=1e-12)
    if name == "cispo":  # every token keeps its own gradient: only token 1 changes
        torch.testing.assert_close(part[0, [0, 2]], whole[0, [0, 2]], rtol=1e-12, atol=1e-12)


def test_kl_term_k3_added_with_its_coefficient():
    # On-policy, A = 0: the policy term is 0. ref - logp = log 2 and 0 on the two tokens.
    logp = [[-1.0, -2.0]]
    ref = [[-1.0 + math.log(2.0), -2.0]]
    k3 = 2.0 - math.log(2.0) - 1.0
    loss, stats, grad = run("grpo", LossConfig(kl_coef=0.1), logp=logp, old=logp, adv=[0.0], mask=[[1, 1]], ref=ref)
    close(stats["kl/ref"], k3 / 2)
    close(loss, 0.1 * k3 / 2)
    # d k3 / d logp = 1 - exp(ref - logp): -1 and 0; times 0.1 / 2 tokens.
    grads_close(grad, [[-0.05, 0.0]])
    # kl_coef = 0: logged, not added.
    loss, stats, _ = run("cispo", LossConfig(), logp=logp, old=logp, adv=[0.0], mask=[[1, 1]], ref=ref)
    assert loss.item() == 0.0
    close(stats["kl/ref"], k3 / 2)


def test_kl_coef_without_reference_is_an_error():
    with pytest.raises(ValueError, match="ref_logp"):
        run("dapo", LossConfig(kl_coef=0.1))


def test_bad_shapes_and_config_are_rejected():
    with pytest.raises(ValueError, match=r"adv must be \(B,\)"):
        run("grpo", LossConfig(), adv=[1.0, 2.0, 3.0])
    with pytest.raises(ValueError, match=r"or \(B, T\) = \(2, 3\)"):
        run("grpo", LossConfig(), adv=[[1.0, 2.0], [3.0, 4.0]])
    with pytest.raises(UsageError, match="clip_eps"):
        LossConfig(clip_eps=0.0)
    with pytest.raises(UsageError, match="norm_len"):
        LossConfig(norm_len=0)
