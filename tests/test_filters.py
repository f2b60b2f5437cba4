"""Filter expressions for `rlvr gen`: parsing, evaluation, and one-line errors."""

from __future__ import annotations

import pytest

from rlvr.errors import UsageError
from rlvr.filters import Filter, rollout_values
from rlvr.types import Rollout

VALUES = {
    "win_reward": 1.0,
    "format_reward": 0.5,
    "invalid_move_penalty": -0.1,
    "turns": 4.0,
    "reward": 1.0,
}


@pytest.mark.parametrize(
    ("expr", "expected"),
    [
        ("win_reward > 0", True),
        ("win_reward > 0 and format_reward == 1", False),
        ("win_reward > 0 and format_reward == 1 or turns < 5", True),  # and binds tighter than or
        ("win_reward > 0 and (format_reward == 1 or turns > 5)", False),
        ("not format_reward == 1", True),
        ("not not win_reward", True),
        ("invalid_move_penalty == -0.1", True),
        ("invalid_move_penalty >= -.05", False),
        ("0.5 <= format_reward < 1", True),  # chained like Python
        ("0.5 < format_reward < 1", False),
        ("turns != 4", False),
        ("format_reward", True),  # a bare value is true when non-zero
        ("1e0 == win_reward", True),
    ],
)
def test_evaluates_like_python(expr: str, expected: bool) -> None:
    assert Filter(expr)(VALUES) is expected


def test_failed_clause_names_the_first_failing_conjunct() -> None:
    f = Filter("win_reward > 0 and  format_reward == 1 and turns < 3")
    assert f.failed_clause(VALUES) == "format_reward == 1"
    assert f.failed_clause({**VALUES, "format_reward": 1.0}) == "turns < 3"
    assert f.failed_clause({**VALUES, "format_reward": 1.0, "turns": 2.0}) is None
    assert Filter("(win_reward < 0)").failed_clause(VALUES) == "(win_reward < 0)"


@pytest.mark.parametrize(
    ("expr", "message"),
    [
        ("", "empty filter"),
        ("win_reward >", "expression ended"),
        ("win_reward > > 1", "column 14"),
        ("(win_reward > 1", "expected ')'"),
        ("win_reward > 1)", "expected 'and', 'or' or the end"),
        ("__import__('os').system('x')", 'unexpected "\'"'),
        ("win_reward + 1 > 2", "unexpected '+'"),
        ("win_reward > 1 and", "expression ended"),
        ("- win_reward > 1", "'-' must be followed by a number"),
        ("and win_reward", "found 'and'"),
    ],
)
def test_syntax_errors_are_one_line_usage_errors(expr: str, message: str) -> None:
    with pytest.raises(UsageError) as info:
        Filter(expr)
    assert message in str(info.value) and "\n" not in str(info.value)


def test_unknown_names_list_the_available_ones() -> None:
    f = Filter("win_rewrd > 0 or turns > 1")
    assert f.names == {"win_rewrd", "turns"}
    f.check_names(["win_rewrd", "turns", "x"])  # all known: no error
    with pytest.raises(UsageError, match=r"unknown 'win_rewrd'; available: format_reward, turns, win_reward"):
        f.check_names(["win_reward", "format_reward", "turns"])


def test_rollout_values_expose_rewards_metrics_total_and_truncated() -> None:
    rollout = Rollout(
        task_id="t",
        rollout_index=0,
        seed=0,
        prompt=[],
        rewards={"win_reward": 0.5},
        reward=0.7,
        metrics={"turns": 3.0},
        truncated=True,
    )
    assert rollout_values(rollout) == {
        "win_reward": 0.5,
        "reward": 0.7,
        "turns": 3.0,
        "truncated": 1.0,
    }
    assert Filter("truncated and reward > 0.6")(rollout_values(rollout))
