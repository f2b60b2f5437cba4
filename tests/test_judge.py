"""Judge rewards: strict verdicts, logged failures, concurrency, and a Policy judge."""

from __future__ import annotations

import asyncio
import logging

import pytest

from rlvr import Policy, Rubric, SingleTurnEnv, XMLParser
from rlvr.engine import run_rollouts
from rlvr.errors import UsageError
from rlvr.judge import JUDGE_PROMPT, judge_reward, parse_verdict, reference_judge

PARSER = XMLParser(["answer"])
TASKS = [{"id": str(i), "question": f"What is {i} + {i}?", "answer": str(2 * i)} for i in range(6)]


def _env(judge) -> SingleTurnEnv:
    return SingleTurnEnv(TASKS, parser=PARSER, rubric=Rubric([judge], parser=PARSER))


def _answers(fn) -> Policy:
    """A model answering fn(i) to question i."""
    return Policy(lambda messages, rng: f"<answer>{fn(int(messages[-1]['content'].split()[2]))}</answer>")


@pytest.mark.parametrize(
    ("text", "verdict"),
    [
        ("<verdict>yes</verdict>", True),
        ("<verdict>no</verdict>", False),
        ("<verdict> YES </verdict>", True),
        ("The response matches the reference.\n<verdict>yes</verdict>", True),
        ("<think>is <verdict>no</verdict> right?</think><verdict>yes</verdict>", True),
        ("yes", None),
        ("<verdict>maybe</verdict>", None),
        ("<verdict>yes</verdict> <verdict>no</verdict>", None),
        ("<verdict>yes", None),
        ("<verdict>yes</verdict></verdict>", None),
        ("", None),
    ],
)
def test_parse_verdict_is_strict(text: str, verdict: bool | None) -> None:
    assert parse_verdict(text) is verdict


async def test_reference_judge_scores_right_and_wrong_answers() -> None:
    judge = judge_reward(reference_judge())
    right = await run_rollouts(_env(judge), _answers(lambda i: 2 * i), _env(judge).tasks())
    wrong = await run_rollouts(_env(judge), _answers(lambda i: 2 * i + 1), _env(judge).tasks())
    assert [r.rewards["judge_reward"] for r in right] == [1.0] * 6
    assert [r.rewards["judge_reward"] for r in wrong] == [0.0] * 6
    assert judge.stats == {"yes": 6, "no": 6}


async def test_judge_sees_question_reference_and_parsed_answer() -> None:
    seen = []

    def spy(messages, rng):
        seen.append(messages[-1]["content"])
        return "<verdict>yes</verdict>"

    judge = judge_reward(Policy(spy), name="spy_judge")
    [r] = await run_rollouts(_env(judge), _answers(lambda i: "eight"), _env(judge).tasks()[4:5])
    assert r.rewards == {"spy_judge": 1.0}
    assert seen == [JUDGE_PROMPT.format(question="What is 4 + 4?", answer="8", response="eight")]


async def test_unparsed_verdicts_score_zero_and_are_logged(caplog) -> None:
    judge = judge_reward(Policy(lambda m, rng: "I think so!", name="chatty"))
    with caplog.at_level(logging.WARNING, logger="rlvr.judge"):
        rollouts = await run_rollouts(_env(judge), _answers(lambda i: 2 * i), _env(judge).tasks())
    assert [r.rewards["judge_reward"] for r in rollouts] == [0.0] * 6 and all(r.error is None for r in rollouts)
    assert judge.stats == {"unparsed": 6}
    assert caplog.text.count("unparsed verdict from policy:chatty (scored 0): 'I think so!'") == 6


async def test_no_response_is_not_judged() -> None:
    calls = []
    judge = judge_reward(Policy(lambda m, rng: calls.append(1) or "<verdict>yes</verdict>"))
    env = SingleTurnEnv(TASKS, rubric=Rubric([judge]))  # no parser: the last assistant message is judged
    rollouts = await run_rollouts(env, Policy(lambda m, rng: "   "), env.tasks())
    assert [r.rewards["judge_reward"] for r in rollouts] == [0.0] * 6 and not calls
    assert judge.stats == {"no_response": 6}


async def test_judge_calls_run_concurrently_within_the_limit() -> None:
    active, peak = 0, 0

    async def slow(messages, rng):
        nonlocal active, peak
        active += 1
        peak = max(peak, active)
        await asyncio.sleep(0.05)
        active -= 1
        return "<verdict>yes</verdict>"

    judge = judge_reward(Policy(slow), max_concurrency=3)
    env = _env(judge)
    rollouts = await run_rollouts(env, _answers(lambda i: 2 * i), env.tasks(), rollouts_per_task=2, concurrency=12)
    assert len(rollouts) == 12 and peak == 3


async def test_a_failing_judge_client_makes_error_records_not_zeros() -> None:
    def broken(messages, rng):
        raise ConnectionError("judge endpoint down")

    env = _env(judge_reward(Policy(broken)))
    rollouts = await run_rollouts(env, _answers(lambda i: 2 * i), env.tasks())
    assert all(r.error and r.error.startswith("RewardError") and "judge endpoint down" in r.error for r in rollouts)


def test_bad_judge_configuration() -> None:
    with pytest.raises(UsageError, match="must contain {response}"):
        judge_reward(reference_judge(), prompt="Is {answer} the answer to {question}?")
    with pytest.raises(UsageError, match="max_concurrency"):
        judge_reward(reference_judge(), max_concurrency=0)
