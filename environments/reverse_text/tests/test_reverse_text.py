"""reverse_text: seeded datasets, LCS by hand, and the reference players through the engine."""

from __future__ import annotations

import asyncio
import random
import statistics

import pytest
from reverse_text import lcs_length, lcs_ratio, lcs_reward, load_environment, make_paragraph

from rlvr import check_env
from rlvr.engine import run_rollouts
from rlvr.errors import UsageError
from rlvr.registry import load_environment as load_by_name


def test_same_arguments_same_tasks_and_prefix_stable() -> None:
    a, b = load_environment(num_tasks=20, seed=3), load_environment(num_tasks=20, seed=3)
    assert [t.to_dict() for t in a.tasks("train")] == [t.to_dict() for t in b.tasks("train")]
    assert [t.to_dict() for t in a.tasks("eval")] == [t.to_dict() for t in b.tasks("eval")]
    longer = load_environment(num_tasks=30, seed=3)
    assert [t.question for t in longer.tasks("train")[:20]] == [t.question for t in a.tasks("train")]
    other = load_environment(num_tasks=20, seed=4)
    assert [t.question for t in other.tasks("train")] != [t.question for t in a.tasks("train")]
    train = {t.question for t in a.tasks("train")}
    assert not train & {t.question for t in a.tasks("eval")}  # held-out split


def test_tasks_respect_word_range_and_answer_is_the_reversal() -> None:
    env = load_environment(num_tasks=50, min_words=3, max_words=7)
    for task in env.tasks("train"):
        assert 3 <= task.info["words"] == len(task.question.split()) <= 7
        assert task.answer == task.question[::-1]


@pytest.mark.parametrize(
    ("a", "b", "lcs"),
    [
        ("", "", 0),
        ("abc", "", 0),
        ("abc", "abc", 3),
        ("abc", "cba", 1),
        ("AGGTAB", "GXTXAYB", 4),
        ("xabcx", "yabcy", 3),
        ("banana", "atana", 4),
    ],
)
def test_lcs_length_by_hand(a: str, b: str, lcs: int) -> None:
    assert lcs_length(a, b) == lcs == lcs_length(b, a)


def reference_lcs(a: str, b: str) -> int:
    """The plain O(n*m) table, written independently of the bit-parallel version."""
    table = [[0] * (len(b) + 1) for _ in range(len(a) + 1)]
    for i, ca in enumerate(a, 1):
        for j, cb in enumerate(b, 1):
            table[i][j] = table[i - 1][j - 1] + 1 if ca == cb else max(table[i - 1][j], table[i][j - 1])
    return table[-1][-1]


def test_lcs_length_matches_the_plain_table() -> None:
    rng = random.Random(0)
    for _ in range(400):
        a = "".join(rng.choice("ab c.") for _ in range(rng.randint(0, 40)))
        b = "".join(rng.choice("abc d") for _ in range(rng.randint(0, 70)))  # > 64 bits sometimes
        assert lcs_length(a, b) == reference_lcs(a, b)
    text = make_paragraph(rng, 30)
    assert lcs_length(text, text[::-1]) == reference_lcs(text, text[::-1])


def test_lcs_ratio_by_hand() -> None:
    assert lcs_ratio("abcdef", "abcdef") == 1.0
    assert lcs_ratio("abcdef", "") == 0.0
    assert lcs_ratio("abc", "xyz") == 0.0
    assert lcs_ratio("abcd", "abd") == pytest.approx(2 * 3 / 7)  # one character missing
    assert lcs_ratio("abcd", "abcdXY") == pytest.approx(2 * 4 / 10)  # two extra characters


def test_lcs_reward_reads_only_the_tagged_answer() -> None:
    env = load_environment(num_tasks=1)
    parser = env.parser

    def score(text: str) -> float:
        return lcs_reward([{"role": "assistant", "content": text}], "olleh", parser)  # type: ignore[arg-type]

    assert score("<think>reverse it</think><reversed_text>olleh</reversed_text>") == 1.0
    assert score("olleh") == 0.0
    assert score("<reversed_text>olleh") == 0.0  # never closed
    assert score("<reversed_text>olle</reversed_text>") == pytest.approx(8 / 9)


def _mean_reward(name: str, n: int = 8) -> tuple[float, list[float]]:
    env = load_environment(num_tasks=n, eval_tasks=n)
    rollouts = asyncio.run(run_rollouts(env, env.policies()[name](), env.tasks(), rollouts_per_task=2))
    assert len(rollouts) == 2 * n and all(r.error is None for r in rollouts)
    assert {r.stop_reason for r in rollouts} == {"answered"} and not any(r.truncated for r in rollouts)
    return statistics.fmean(r.reward for r in rollouts), [r.rewards["format_reward"] for r in rollouts]


def test_oracle_scores_one() -> None:
    mean, formats = _mean_reward("oracle")
    assert mean == 1.0 and set(formats) == {1.0}


def test_echo_scores_low() -> None:
    mean, formats = _mean_reward("echo")
    assert mean < 0.6 and set(formats) == {1.0}  # well formatted, wrong


def test_format_weight_enters_the_total() -> None:
    env = load_environment(num_tasks=2, eval_tasks=2, format_weight=0.2)
    rollouts = asyncio.run(run_rollouts(env, env.policies()["oracle"](), env.tasks()))
    assert [r.reward for r in rollouts] == [pytest.approx(1.2)] * 2


def test_check_env_and_entry_point() -> None:
    check_env(load_environment(num_tasks=3, eval_tasks=3))
    env = load_by_name("reverse_text", num_tasks=2, eval_tasks=2)
    assert env.name == "reverse_text" and env.env_args == {
        "num_tasks": 2,
        "eval_tasks": 2,
    }


@pytest.mark.parametrize("kwargs", [{"num_tasks": 0}, {"min_words": 5, "max_words": 4}, {"min_words": 0}])
def test_bad_arguments(kwargs: dict[str, int]) -> None:
    with pytest.raises(UsageError):
        load_environment(**kwargs)
