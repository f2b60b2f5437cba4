"""The rollout loop: stop conditions, built-in truncations, errors, tools."""

from __future__ import annotations

import array
import asyncio
import fractions
import json
from dataclasses import dataclass, field

import pytest

from rlvr import (
    MultiTurnEnv,
    Policy,
    Rubric,
    SingleTurnEnv,
    State,
    StatefulToolEnv,
    ToolEnv,
    ToolState,
    check_env,
    stop,
)
from rlvr.engine import run_rollouts
from rlvr.errors import EnvError, PromptTooLongError, UsageError
from rlvr.types import Completion, SamplingArgs, Task, ToolCall, Usage


def turns_taken(state) -> float:
    return float(state.turn)


@dataclass(kw_only=True)
class CountState(State):
    count: int = 0
    log: list[str] = field(default_factory=list)


class CountEnv(MultiTurnEnv[CountState]):
    """The env counts replies; done at `target`. Records when each stop was checked."""

    def __init__(self, target: int = 3, **kw):
        super().__init__([{"question": "count"}], rubric=Rubric([turns_taken]), **kw)
        self.target = target

    def setup_state(self, task: Task) -> CountState:
        return CountState(task=task)

    async def env_response(self, messages, state: CountState):
        state.count += 1
        return [{"role": "user", "content": f"count={state.count}"}]

    @stop
    def reached(self, state: CountState) -> bool:
        state.log.append(f"check turn={state.turn} awaiting={state.awaiting_model}")
        return state.count >= self.target


def _play(env, policy, n=1, **kw):
    return asyncio.run(run_rollouts(env, policy, env.tasks(), rollouts_per_task=n, **kw))


SAY = Policy(lambda m, rng: "ok", name="say")


def test_env_stop_is_checked_after_model_turn_and_env_reply_never_late() -> None:
    env = CountEnv(target=2)
    [r] = _play(env, SAY)
    assert r.stop_reason == "reached" and not r.truncated
    assert len(r.turns) == 2  # stopped right after the env reply that reached the target
    assert r.turns[-1].env_messages[-1]["content"] == "count=2"


def test_max_turns_counts_the_last_turn_after_the_env_answered_it() -> None:
    env = CountEnv(target=3, max_turns=3)
    [r] = _play(env, SAY)
    assert r.stop_reason == "reached" and not r.truncated  # the env's stop wins on the last turn
    env = CountEnv(target=10, max_turns=3)
    [r] = _play(env, SAY)
    assert r.stop_reason == "max_turns_reached" and r.truncated and len(r.turns) == 3


def test_token_budget_truncates_and_caps_max_tokens() -> None:
    seen = []

    def counted(messages, rng) -> Completion:
        return Completion(text="x", token_ids=[1, 2, 3], usage=Usage(5, 3))

    class Spy(Policy):
        async def chat(self, messages, sampling, tools=None):
            seen.append(sampling.max_tokens)
            return await super().chat(messages, sampling, tools)

    env = CountEnv(target=100, max_completion_tokens=7)
    [r] = _play(env, Spy(counted), sampling=SamplingArgs(max_tokens=5))
    assert r.stop_reason == "token_budget" and r.truncated
    assert seen == [5, 4, 1]  # capped by what is left of the budget
    assert r.usage.completion_tokens == 9 and r.usage.prompt_tokens == 15


def test_timeout_truncates() -> None:
    async def slow(messages, rng) -> str:
        await asyncio.sleep(5)
        return "late"

    env = CountEnv(timeout_s=0.05)
    [r] = _play(env, Policy(slow))
    assert r.stop_reason == "timeout" and r.truncated and r.error is None


def test_a_crashing_rollout_becomes_an_error_record_and_others_finish() -> None:
    def flaky(messages, rng) -> str:
        if rng.random() < 0.5:
            raise RuntimeError("model exploded")
        return "fine"

    env = SingleTurnEnv([{"question": str(i)} for i in range(20)], rubric=Rubric([turns_taken]))
    rollouts = _play(env, Policy(flaky), n=2)
    errors = [r for r in rollouts if r.error]
    assert len(rollouts) == 40 and 0 < len(errors) < 40
    assert all(r.stop_reason == "error" and r.reward == 0.0 for r in errors)
    assert all("RuntimeError: model exploded" in r.error for r in errors)


def test_prompt_too_long_truncates() -> None:
    def long(messages, rng) -> str:
        if len(messages) > 3:
            raise PromptTooLongError("context full")
        return "ok"

    [r] = _play(CountEnv(target=10), Policy(long))
    assert r.stop_reason == "prompt_too_long" and r.truncated and r.error is None and len(r.turns) == 2


def test_stop_priority_orders_the_checks() -> None:
    class Two(CountEnv):
        @stop(priority=5, truncated=True)
        def urgent(self, state) -> bool:
            return state.count >= 1

    [r] = _play(Two(target=1), SAY)
    assert r.stop_reason == "urgent" and r.truncated
    assert Two().stop_conditions()[0] == "urgent"


def test_seeds_are_per_rollout_and_reproducible() -> None:
    def draw(messages, rng) -> str:
        return str(rng.random())

    env = SingleTurnEnv([{"question": "a", "seed": 1}, {"question": "b", "seed": 2}], rubric=Rubric([turns_taken]))
    a = [r.turns[0].completion.text for r in _play(env, Policy(draw), n=3)]
    b = [r.turns[0].completion.text for r in _play(env, Policy(draw), n=3)]
    assert a == b and len(set(a)) == 6


def test_concurrency_limit_is_respected() -> None:
    live, peak = 0, 0

    async def track(messages, rng) -> str:
        nonlocal live, peak
        live += 1
        peak = max(peak, live)
        await asyncio.sleep(0.01)
        live -= 1
        return "ok"

    env = SingleTurnEnv([{"question": str(i)} for i in range(30)], rubric=Rubric([turns_taken]))
    rollouts = _play(env, Policy(track), n=2, concurrency=4)
    assert len(rollouts) == 60 and peak == 4


def test_bad_arguments() -> None:
    with pytest.raises(UsageError):
        CountEnv(max_turns=0)
    with pytest.raises(UsageError, match="unique"):
        SingleTurnEnv([{"id": "a", "question": "x"}, {"id": "a", "question": "y"}])
    with pytest.raises(UsageError):
        asyncio.run(run_rollouts(CountEnv(), SAY, [], rollouts_per_task=0))


# ---- tools ------------------------------------------------------------------------------


def add(a: int, b: int) -> int:
    """Add two integers.

    Args:
        a: the first number
        b: the second number
    """
    return a + b


async def shout(text: str) -> str:
    """Upper-case a text."""
    return text.upper()


def explode() -> str:
    """Always fails."""
    raise ValueError("nope")


def _tool_script(calls_per_turn):
    """A policy that makes the scripted tool calls, then answers with the last tool result."""

    def policy(messages, rng, tools):
        turn = sum(m["role"] == "assistant" for m in messages)
        if turn < len(calls_per_turn):
            calls = [ToolCall(id=f"c{turn}{i}", name=n, arguments=a) for i, (n, a) in enumerate(calls_per_turn[turn])]
            return Completion(text="", tool_calls=calls, finish_reason="tool_calls")
        return "answer: " + messages[-1]["content"]

    return Policy(policy)


def tool_calls_made(state: ToolState) -> float:
    return float(sum(state.tool_calls.values()))


def test_tool_env_runs_tools_and_reports_errors_to_the_model() -> None:
    env = ToolEnv([{"question": "go"}], tools=[add, shout, explode], rubric=Rubric([tool_calls_made]), max_turns=10)
    script = [
        [("add", json.dumps({"a": 2, "b": 3})), ("shout", '{"text": "hi"}')],
        [("add", "{not json"), ("nosuch", "{}"), ("explode", "{}"), ("add", '{"a": 1}'), ("add", '{"a": "1", "b": 2}')],
    ]
    [r] = _play(env, _tool_script(script))
    assert r.error is None and r.stop_reason == "no_tool_call" and not r.truncated
    replies = [m["content"] for m in r.turns[0].env_messages]
    assert replies == ["5", "HI"]
    errors = [m["content"] for m in r.turns[1].env_messages]
    assert errors[0].startswith("Error: arguments are not valid JSON")
    assert "unknown tool 'nosuch'" in errors[1] and "available: add, shout, explode" in errors[1]
    assert errors[2] == "Error: ValueError: nope"
    assert errors[3] == "Error: missing required argument 'b'"
    assert errors[4] == "Error: argument 'a' must be integer, got string '1'"
    assert r.rewards["tool_calls_made"] == 7.0


def test_tool_schemas_reach_the_model() -> None:
    seen = []

    def policy(messages, rng, tools):
        seen.append(tools)
        return "done"

    env = ToolEnv([{"question": "go"}], tools=[add], rubric=Rubric([tool_calls_made]))
    _play(env, Policy(policy))
    fn = seen[0][0]["function"]
    assert fn["name"] == "add" and fn["parameters"]["required"] == ["a", "b"]
    assert fn["parameters"]["properties"]["b"] == {"type": "integer", "description": "the second number"}


@dataclass(kw_only=True)
class Wallet(ToolState):
    balance: dict[str, int] = field(default_factory=lambda: {"coins": 10})


def spend(amount: int, balance: dict) -> str:
    """Spend coins.

    Args:
        amount: how many
    """
    balance["coins"] -= amount
    return str(balance["coins"])


class WalletEnv(StatefulToolEnv[Wallet]):
    hidden_args = ("balance",)

    def setup_state(self, task):
        return Wallet(task=task)


def test_stateful_tools_hide_arguments_and_inject_state() -> None:
    env = WalletEnv([{"question": "go"}], tools=[spend], rubric=Rubric([tool_calls_made]))
    assert list(env.tool_schemas(None)[0]["function"]["parameters"]["properties"]) == ["amount"]
    script = [[("spend", '{"amount": 3}')], [("spend", '{"amount": 1, "balance": {"coins": 99}}')]]
    [r] = _play(env, _tool_script(script))
    assert r.turns[0].env_messages[0]["content"] == "7"
    assert "unknown argument 'balance'" in r.turns[1].env_messages[0]["content"]


# ---- check_env --------------------------------------------------------------------------


def test_check_env_accepts_a_sound_env() -> None:
    check_env(CountEnv(target=2), SAY)


def test_check_env_names_the_problem() -> None:
    class NoState(CountEnv):
        def setup_state(self, task):
            return {"task": task}

    with pytest.raises(EnvError, match="setup_state returned dict"):
        check_env(NoState(), SAY)

    class Broken(CountEnv):
        async def env_response(self, messages, state):
            raise KeyError("board")

    with pytest.raises(EnvError, match="KeyError"):
        check_env(Broken(), SAY)

    class Instant(CountEnv):
        @stop(priority=9)
        def always(self, state) -> bool:
            return True

    with pytest.raises(EnvError, match="before the model's first turn"):
        check_env(Instant(), SAY)

    with pytest.raises(EnvError, match="no reward functions"):
        check_env(SingleTurnEnv([{"question": "q"}]), SAY)

    class ScoresOneTurnTooFew(CountEnv):
        def turn_rewards(self, task, rollout):
            return [1.0] * (len(rollout.turns) - 1)

    with pytest.raises(EnvError, match=r"rollout 0: turn_rewards must give one number per model turn \(2\), got 1"):
        check_env(ScoresOneTurnTooFew(target=2), SAY)

    class ScoresTurns(CountEnv):
        def turn_rewards(self, task, rollout):  # an array (anything with tolist) of real numbers
            return array.array("f", [0.5] * len(rollout.turns))

    check_env(ScoresTurns(target=2), SAY)

    class ScoresFractions(CountEnv):
        def turn_rewards(self, task, rollout):  # any numbers.Real (numpy's float32 is one)
            return [fractions.Fraction(1, 2)] * len(rollout.turns)

    check_env(ScoresFractions(target=2), SAY)

    class ScoresText(CountEnv):
        def turn_rewards(self, task, rollout):
            return ["x" * 10_000_000] * len(rollout.turns)

    with pytest.raises(EnvError, match=r"turn_rewards gave 'xxxx.*'; each score must be a finite number") as got:
        check_env(ScoresText(target=2), SAY)
    assert len(str(got.value)) < 200  # the value is shown cut short

    class ScoresHugeInts(CountEnv):
        def turn_rewards(self, task, rollout):  # a real number float() cannot hold
            return [10**400] * len(rollout.turns)

    with pytest.raises(EnvError, match=r"turn_rewards gave 1000.*; each score must be a finite number") as got:
        check_env(ScoresHugeInts(target=2), SAY)
    assert len(str(got.value)) < 200
