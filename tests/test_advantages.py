"""Group advantages, DAPO's uniform-group filter and group statistics, by hand."""

from __future__ import annotations

import math

import pytest

from rlvr.errors import UsageError
from rlvr.train.advantages import drop_uniform_groups, group_advantages, group_stats


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
