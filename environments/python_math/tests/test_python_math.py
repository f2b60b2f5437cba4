"""python_math: seeded problems with exact answers; the oracle computes them through the sandbox."""

from __future__ import annotations

import json
import random
import statistics

import pytest
from python_math import load_environment, make_tasks
from python_math.problems import KINDS, answer, make_problem, read_problem

from rlvr import Policy, check_env
from rlvr.cli import main
from rlvr.engine import run_rollouts
from rlvr.errors import UsageError
from rlvr.sandbox import run_python
from rlvr.types import Completion, ToolCall


def test_problems_are_seeded_and_readable() -> None:
    assert [t.to_dict() for t in make_tasks("eval", 30, 1)] == [t.to_dict() for t in make_tasks("eval", 30, 1)]
    assert [t.question for t in make_tasks("eval", 30, 1)] != [t.question for t in make_tasks("eval", 30, 2)]
    kinds = set()
    for i in range(300):
        question, value, kind = make_problem(random.Random(i))
        parsed, numbers = read_problem(question)
        assert parsed.name == kind and answer(kind, numbers) == value
        kinds.add(kind)
    assert kinds == {k.name for k in KINDS}


def test_hand_computed_answers() -> None:
    assert answer("digit_sum", {"a": 2, "b": 10}) == 7  # 1024
    assert answer("fibonacci", {"n": 10, "m": 1000}) == 55
    assert answer("divisor_sum", {"n": 12}) == 28 and answer("divisor_sum", {"n": 16}) == 31
    assert answer("count_primes", {"n": 100}) == 25 and answer("product", {"a": 12, "b": 12}) == 144


async def test_every_oracle_program_prints_the_answer_in_the_sandbox() -> None:
    for i, kind in enumerate(KINDS):
        numbers = kind.draw(random.Random(i))
        result = await run_python(kind.program.format(**numbers))
        assert result.ok and result.stdout.strip() == str(answer(kind.name, numbers)), kind.name


async def test_oracle_scores_one_and_guess_scores_low() -> None:
    env = load_environment(eval_tasks=14)
    oracle = await run_rollouts(env, env.policies()["oracle"](), env.tasks(), concurrency=4)
    assert statistics.fmean(r.reward for r in oracle) == 1.0
    assert all(r.rewards["run_python_calls"] == 1 and r.rewards["failed_tool_calls"] == 0 for r in oracle)
    guess = await run_rollouts(env, env.policies()["guess"](), env.tasks(), rollouts_per_task=3)
    assert statistics.fmean(r.reward for r in guess) < 0.1
    assert all(r.rewards["run_python_calls"] == 0 for r in guess)


async def test_a_wrong_argument_type_is_a_tool_error() -> None:
    env = load_environment(eval_tasks=1)
    calls = iter([ToolCall("c0", "run_python", '{"code": 42}'), ToolCall("c1", "run_python", '{"src": "1"}')])

    def fn(messages, rng):
        call = next(calls, None)
        return Completion(text="", tool_calls=[call]) if call else "<answer>0</answer>"

    [r] = await run_rollouts(env, Policy(fn), env.tasks())
    replies = [m["content"] for m in r.completion if m["role"] == "tool"]
    assert replies == [
        "Error: argument 'code' must be string, got integer 42",
        "Error: missing required argument 'code'",
    ]
    assert r.error is None and r.rewards["failed_tool_calls"] == 2


def test_check_env_cli_and_arguments(tmp_path, capsys) -> None:
    check_env(load_environment(eval_tasks=2))
    out = tmp_path / "run"
    assert main(["eval", "python_math", "-m", "policy:oracle", "-n", "4", "-r", "1", "-q", "-o", str(out)]) == 0
    rows = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert [row["reward"] for row in rows] == [1.0] * 4
    with pytest.raises(UsageError):
        load_environment(num_tasks=0)
