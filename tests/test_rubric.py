from __future__ import annotations

import pytest

from rlvr.errors import RubricError
from rlvr.rubric import Rubric, group_reward
from rlvr.types import State, Task


def _state(answer: str, reply: str) -> State:
    s = State(task=Task(id="t", question="q", answer=answer))
    s.prompt = [{"role": "user", "content": "q"}]
    s.messages = s.prompt + [{"role": "assistant", "content": reply}]
    return s


def exact(completion, answer) -> float:
    return float(completion[-1]["content"] == answer)


async def length_metric(completion) -> float:
    return float(len(completion[-1]["content"]))


@group_reward
def best_in_group(completions, answers) -> list[float]:
    lengths = [len(c[-1]["content"]) for c in completions]
    return [float(n == min(lengths)) for n in lengths]


async def test_weights_metrics_and_async() -> None:
    rubric = Rubric([exact, length_metric], weights=[2.0, 0.0])
    scores = await rubric.score_group([_state("4", "4"), _state("4", "five")])
    assert scores == [{"exact": 1.0, "length_metric": 1.0}, {"exact": 0.0, "length_metric": 4.0}]
    assert [rubric.total(s) for s in scores] == [2.0, 0.0]


async def test_group_reward_sees_the_whole_group() -> None:
    rubric = Rubric([exact, best_in_group])
    scores = await rubric.score_group([_state("4", "4"), _state("4", "44"), _state("4", "4")])
    assert [s["best_in_group"] for s in scores] == [1.0, 0.0, 1.0]
    assert rubric.has_group_functions


def test_unknown_argument_fails_at_build_time_naming_the_options() -> None:
    def bad(completion, reference) -> float:
        return 0.0

    with pytest.raises(RubricError, match="reference.*available: prompt, completion"):
        Rubric([bad])


def test_group_function_asking_singular_names_is_rejected() -> None:
    @group_reward
    def bad(completion) -> list[float]:
        return []

    with pytest.raises(RubricError, match="group reward function"):
        Rubric([bad])


def test_bad_weights_names_and_lambdas() -> None:
    with pytest.raises(RubricError, match="2 reward functions but 1 weights"):
        Rubric([exact, length_metric], weights=[1.0])
    with pytest.raises(RubricError, match="unique"):
        Rubric([exact, exact])
    with pytest.raises(RubricError, match="lambda"):
        Rubric([lambda completion: 1.0])


async def test_non_numeric_reward_and_wrong_group_length() -> None:
    def text(completion) -> str:
        return "high"

    with pytest.raises(RubricError, match="expected a number"):
        await Rubric([text]).score_group([_state("4", "4")])

    @group_reward
    def short(completions) -> list[float]:
        return [1.0]

    with pytest.raises(RubricError, match="returned 1 values for a group of 2"):
        await Rubric([short]).score_group([_state("4", "4"), _state("4", "4")])
