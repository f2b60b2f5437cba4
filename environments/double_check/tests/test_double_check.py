"""double_check: seeded problems, exactly two turns, and the reference players through the engine."""

from __future__ import annotations

import asyncio
import random
import statistics

import pytest
from double_check import ARE_YOU_SURE, STEPS, as_int, load_environment, make_problem, solve

from rlvr import Policy, SamplingArgs, check_env
from rlvr.engine import run_rollouts
from rlvr.errors import UsageError
from rlvr.registry import load_environment as load_by_name
from rlvr.types import Rollout


def test_same_arguments_same_tasks_and_prefix_stable() -> None:
    a, b = load_environment(num_tasks=20, seed=7), load_environment(num_tasks=20, seed=7)
    assert [t.to_dict() for t in a.tasks("train")] == [t.to_dict() for t in b.tasks("train")]
    assert [t.to_dict() for t in a.tasks("eval")] == [t.to_dict() for t in b.tasks("eval")]
    longer = load_environment(num_tasks=25, seed=7)
    assert [t.question for t in longer.tasks("train")[:20]] == [t.question for t in a.tasks("train")]
    assert [t.question for t in load_environment(num_tasks=20, seed=8).tasks("train")] != [
        t.question for t in a.tasks("train")
    ]


def test_problems_have_exact_answers_and_use_every_step() -> None:
    seen = set()
    for s in range(500):
        rng = random.Random(s)
        text, answer = make_problem(rng, rng.randint(0, 3))
        assert 0 <= answer and solve(text) == answer
        seen |= {
            kind
            for kind, step in STEPS.items()
            for sentence in text.split(". ")
            if step.pattern.fullmatch(sentence + ".")
        }
    assert seen == set(STEPS)


def test_hand_made_problem() -> None:
    text = (
        "Ava has 12 coins. Ava gives 4 coins to Ben. Ava finds 3 bags with 5 coins in each. "
        "Ben gives Ava enough coins to have 2 times as many as before. "
        "Ava splits the coins into 23 equal piles and keeps one pile. How many coins does Ava have now?"
    )
    assert solve(text) == ((12 - 4 + 3 * 5) * 2) // 23 == 2


def test_as_int() -> None:
    assert [as_int(s) for s in ["42", " -7 ", "1,000", "4.0", "four", ""]] == [
        42,
        -7,
        1000,
        None,
        None,
        None,
    ]


def _run(name: str, n: int = 10) -> list[Rollout]:
    env = load_environment(num_tasks=n, eval_tasks=n)
    rollouts = asyncio.run(run_rollouts(env, env.policies()[name](), env.tasks(), rollouts_per_task=2))
    assert len(rollouts) == 2 * n and all(r.error is None for r in rollouts)
    return rollouts


def test_stops_exactly_after_the_second_answer() -> None:
    for r in _run("oracle", 3):
        assert (r.stop_reason, r.truncated, len(r.turns)) == ("second_answer", False, 2)
        assert r.turns[0].env_messages == [{"role": "user", "content": ARE_YOU_SURE}]
        assert r.turns[1].env_messages == []  # no reply after the final answer
        assert [m["role"] for m in r.completion] == ["assistant", "user", "assistant"]


def test_oracle_keeps_its_right_answer() -> None:
    rollouts = _run("oracle")
    assert statistics.fmean(r.reward for r in rollouts) == 1.0
    assert all(r.rewards["changed_answer"] == 0.0 and r.rewards["format_reward"] == 1.0 for r in rollouts)


def test_flipper_is_right_then_wrong() -> None:
    rollouts = _run("flipper")
    assert statistics.fmean(r.reward for r in rollouts) == 0.0
    assert all(r.rewards["first_answer_correct"] == 1.0 and r.rewards["changed_answer"] == 1.0 for r in rollouts)


def test_random_scores_low() -> None:
    assert statistics.fmean(r.reward for r in _run("random", 20)) < 0.2


def test_final_answer_is_read_from_the_last_turn_only() -> None:
    """A final reply without an answer scores 0, even though the first reply had the right one."""
    env = load_environment(num_tasks=2, eval_tasks=2)

    def forgetful(messages: list[dict[str, str]], rng: random.Random) -> str:
        first = not any(m["role"] == "assistant" for m in messages)
        return f"<answer>{solve(messages[1]['content'])}</answer>" if first else "Yes, I am sure."

    rollouts = asyncio.run(run_rollouts(env, Policy(forgetful), env.tasks(), sampling=SamplingArgs()))
    for r in rollouts:
        assert r.rewards == {
            "correct_answer": 0.0,
            "first_answer_correct": 1.0,
            "changed_answer": 1.0,
            "format_reward": 0.5,
        }


def test_check_env_and_entry_point() -> None:
    check_env(load_environment(num_tasks=3, eval_tasks=3))
    assert load_by_name("double_check", seed=1, eval_tasks=4).name == "double_check"


@pytest.mark.parametrize("kwargs", [{"eval_tasks": 0}, {"min_steps": 3, "max_steps": 2}])
def test_bad_arguments(kwargs: dict[str, int]) -> None:
    with pytest.raises(UsageError):
        load_environment(**kwargs)
