"""Group advantages, DAPO's uniform-group filter and group statistics, by hand."""

from __future__ import annotations

import math

import pytest

from rlvr.errors import UsageError
from rlvr.train.advantages import batch_advantages, drop_uniform_groups, group_advantages, group_stats, own_logprob
from rlvr.types import Completion, Rollout, Turn


def assert_all_close(actual: list[float], expected: list[float]) -> None:
    assert len(actual) == len(expected)
    for a, e in zip(actual, expected, strict=True):
        assert math.isclose(a, e, rel_tol=1e-9, abs_tol=1e-12), (actual, expected)


def test_mean_baseline_without_std():
    # groups of 2: means 0.5 and 0.5
    adv = group_advantages([1.0, 0.0, 0.5, 0.5], 2, scale_std=False)
    assert_all_close(adv, [0.5, -0.5, 0.0, 0.0])
    # one group of 3: rewards 1.2, 0.2, 0.2, mean 1.6 / 3
    adv = group_advantages([1.2, 0.2, 0.2], 3, scale_std=False)
    assert_all_close(adv, [1.2 - 1.6 / 3, 0.2 - 1.6 / 3, 0.2 - 1.6 / 3])


def test_std_scaling_uses_population_std_plus_eps():
    # rewards 0, 0, 0, 1: mean 0.25, population std sqrt(3) / 4
    std = math.sqrt(3) / 4
    adv = group_advantages([0.0, 0.0, 0.0, 1.0], 4, scale_std=True, eps=1e-6)
    assert_all_close(adv, [-0.25 / (std + 1e-6)] * 3 + [0.75 / (std + 1e-6)])
    adv = group_advantages([2.0, 4.0], 2, scale_std=True, eps=0.0)
    assert_all_close(adv, [-1.0, 1.0])


def test_equal_rewards_give_exact_zeros():
    adv = group_advantages([0.1, 0.1, 0.1, 1.0, 0.0, 1.0], 3, scale_std=True)
    assert adv[:3] == [0.0, 0.0, 0.0]
    assert all(math.isfinite(a) for a in adv)
    assert adv[3] > 0 > adv[4]


def test_group_size_must_divide_the_batch():
    with pytest.raises(UsageError, match="groups of 4"):
        group_advantages([1.0, 0.0, 1.0], 4, scale_std=False)
    with pytest.raises(UsageError, match="group_size"):
        drop_uniform_groups([1.0], 0)


def test_drop_uniform_groups_keeps_groups_with_spread():
    rewards = [1.0, 1.0, 1.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.7, 0.7 + 1e-12, 0.7]
    assert drop_uniform_groups(rewards, 3) == [False, True, False, False]
    assert drop_uniform_groups(rewards, 3, atol=0.0) == [False, True, False, True]
    assert drop_uniform_groups([], 3) == []


def test_group_stats():
    stats = group_stats([1.0, 1.0, 0.0, 1.0, 0.0, 0.0], 2)
    assert stats["group/count"] == 3.0
    assert math.isclose(stats["group/zero_std_frac"], 2 / 3)
    assert math.isclose(stats["group/reward_std_mean"], 0.5 / 3)
    assert group_stats([], 2)["group/zero_std_frac"] == 0.0


# ---- sharpen: each rollout's own log-probability joins its advantage ---------------------------


def rollout(reward: float, *turns: tuple[list[float] | None, str], error: str | None = None) -> Rollout:
    """A rollout with one turn per (logprobs, finish_reason); a turn's token ids are as many as
    its logprobs (three for a turn without them)."""
    made = [
        Turn(
            Completion(
                text="x", token_ids=list(range(len(lps) if lps is not None else 3)), logprobs=lps, finish_reason=why
            )
        )
        for lps, why in turns
    ]
    return Rollout(task_id="t", rollout_index=0, seed=0, prompt=[], turns=made, reward=reward, error=error)


def advantages(rollouts: list[Rollout], sharpen: float, scale_std: bool = False) -> list[float]:
    adv, _, _ = batch_advantages(
        rollouts, 2, scale_std=scale_std, mask_truncated=False, drop_uniform=False, sharpen=sharpen
    )
    return adv


def test_own_logprob_sums_sampled_turns_and_leaves_given_replies_out() -> None:
    r = rollout(1.0, ([-0.5, -0.25], "stop"), ([-9.0], "given"), ([-1.0], "length"))
    assert own_logprob(r) == -1.75
    assert own_logprob(rollout(1.0, (None, "stop"))) is None
    assert own_logprob(rollout(1.0, ([-0.5], "stop"), (None, "given"))) == -0.5


def test_sharpen_adds_the_weighted_logprob_after_the_env_advantage_is_scaled() -> None:
    tied = [rollout(1.0, ([-0.1, -0.1], "stop")), rollout(1.0, ([-2.0, -0.2], "stop"))]
    assert advantages(tied, 0.0) == [0.0, 0.0]  # off: a tie teaches nothing
    # on: log p = -0.2 and -2.2, mean -1.2: +-0.5 x 1.0, with or without std scaling (the term is
    # added after it, so a tie's small differences stay small)
    assert_all_close(advantages(tied, 0.5), [0.5, -0.5])
    assert_all_close(advantages(tied, 0.5, scale_std=True), [0.5, -0.5])
    assert_all_close(advantages(tied, 0.05, scale_std=True), [0.05, -0.05])
    # the env's reward still counts: a likelier loss against a rarer win, log p -0.01 and -0.2
    mixed = [rollout(1.0, ([-0.2], "stop")), rollout(0.0, ([-0.01], "stop"))]
    assert_all_close(advantages(mixed, 0.5), [0.5 - 0.0475, -0.5 + 0.0475])
    assert_all_close(advantages(mixed, 0.5, scale_std=True), [1.0 / (1 + 2e-6) - 0.0475, -1.0 / (1 + 2e-6) + 0.0475])


def test_sharpen_leaves_dapos_filter_to_the_env_rewards() -> None:
    tied = [rollout(1.0, ([-0.1], "stop")), rollout(1.0, ([-2.0], "stop"))]
    mixed = [rollout(1.0, ([-0.2], "stop")), rollout(0.0, ([-0.1], "stop"))]
    adv, trainable, kept = batch_advantages(
        tied + mixed, 2, scale_std=False, mask_truncated=False, drop_uniform=True, sharpen=0.5
    )
    assert trainable == [False, False, True, True] and kept == 0.5
    assert_all_close(adv, [0.475, -0.475, 0.475, -0.475])


def test_sharpen_leaves_failed_rollouts_at_the_group_mean_and_refuses_missing_logprobs() -> None:
    group = [rollout(1.0, ([-1.0], "stop")), rollout(0.0, error="ValueError: boom")]
    adv, trainable, _ = batch_advantages(
        group, 2, scale_std=False, mask_truncated=False, drop_uniform=False, sharpen=1.0
    )
    assert adv == [0.0, 0.0] and trainable == [True, False]
    for bad in (None, [math.nan]):
        with pytest.raises(
            UsageError, match="sharpen = 1.0 needs the log-probability of every sampled token; rollout 1"
        ):
            advantages([rollout(1.0, ([-1.0], "stop")), rollout(1.0, (bad, "stop"))], 1.0)
    assert advantages([rollout(1.0, (None, "stop")), rollout(1.0, (None, "stop"))], 0.0) == [0.0, 0.0]  # off: not read
    # logprobs past the float range (a hostile backend): refused by name, not an OverflowError
    for huge in ([-1e308, -1e308], [math.inf, -math.inf]):
        assert not math.isfinite(own_logprob(rollout(1.0, (huge, "stop"))) or math.nan)
        with pytest.raises(UsageError, match="rollout 1"):
            advantages([rollout(1.0, ([-1.0], "stop")), rollout(1.0, (huge, "stop"))], 1.0)
