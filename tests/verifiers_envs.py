"""Three environments written with verifiers' own classic classes (verifiers 0.3.x), for the
bridge's tests, and the scripted model that plays them (tests/test_verifiers_env.py).

`load_environment(kind)` builds one of:
- `single`: `vf.SingleTurnEnv`, sums, `vf.XMLParser` with think/answer fields; a sync exact-answer
  reward, an async brevity reward, the parser's format reward, and a metric (weight 0).
- `guess`: `vf.MultiTurnEnv`, guess a number from "higher" / "lower" hints; a `@vf.stop`
  condition for a right guess, a `final_env_response` after three wrong ones, `max_turns`.
- `tools`: `vf.ToolEnv` with two tools (`add`, `reverse`), a reward on the final answer.
- `stateful`: `vf.StatefulToolEnv`, a tool argument hidden from the model and filled in from the
  state that the env's `setup_state` prepared.
- `group`: `single` plus a group reward function (it sees every rollout of a task at once).

`scripted_model` answers all three deterministically, right on some tasks and wrong on others,
so that rewards differ from task to task.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from openai_server import Reply

vf = pytest.importorskip("verifiers")  # (pytest collects this module for its doctests too)
Dataset = pytest.importorskip("datasets").Dataset

SINGLE_PROMPT = "Add the numbers. Think in <think>, answer in <answer>."
GUESS_PROMPT = "Guess my number between 1 and 16. Reply with the number only."
TOOLS_PROMPT = "Use the tools, then give the result in <answer>."
STATEFUL_PROMPT = "Use scaled_add, then give its result in <answer>."


def output_tokens(state) -> float:
    """Tokens the model sampled in the episode, as verifiers counts them (`state["usage"]`)."""
    return float(state["usage"]["output_tokens"])


def single_env(n: int = 6) -> Any:
    rows = [{"question": f"What is {i} + {2 * i + 1}?", "answer": str(3 * i + 1)} for i in range(n)]
    parser = vf.XMLParser(["think", "answer"], answer_field="answer")

    def exact_answer(completion, answer, parser) -> float:
        return 1.0 if (parser.parse_answer(completion) or "").strip() == answer else 0.0

    async def brevity(completion) -> float:
        return 1.0 / (1 + len(completion[-1].content or "") // 20)

    def answer_digits(parser, completion) -> float:
        return float(len(parser.parse_answer(completion) or ""))

    rubric = vf.Rubric(
        funcs=[exact_answer, brevity, parser.get_format_reward_func()], weights=[1.0, 0.3, 0.2], parser=parser
    )
    rubric.add_metric(answer_digits)
    rubric.add_metric(output_tokens)
    return vf.SingleTurnEnv(dataset=Dataset.from_list(rows), system_prompt=SINGLE_PROMPT, parser=parser, rubric=rubric)


class GuessEnv(vf.MultiTurnEnv):
    """Guess the secret (the row's answer); hints after each wrong guess, three at most."""

    @vf.stop
    async def guessed(self, state) -> bool:
        if not state["trajectory"]:
            return False
        return (state["trajectory"][-1]["completion"][-1].content or "").strip() == state["answer"]

    async def env_response(self, messages, state, **kwargs):
        guess = int(re.sub(r"\D", "", messages[-1].content or "") or 0)
        if len(state["trajectory"]) >= 3:
            state["final_env_response"] = [vf.UserMessage(content=f"Out of guesses: it was {state['answer']}.")]
            return [vf.UserMessage(content="verifiers shows final_env_response instead of this")]
        hint = "higher" if guess < int(state["answer"]) else "lower"
        return [vf.UserMessage(content=f"{guess} is wrong; go {hint}.")]


def guess_env(n: int = 6) -> Any:
    secrets = [8, 4, 12, 1, 15, 10][:n]
    rows = [{"question": "I have a number in mind.", "answer": str(s), "info": {"secret": s}} for s in secrets]

    def solved(state) -> float:
        return 1.0 if state.get("stop_condition") == "guessed" else 0.0

    async def quick(state) -> float:
        return 1.0 / len(state["trajectory"])

    # a lambda too: verifiers names it `<lambda>`, rlvr by its place (`reward_2`)
    rubric = vf.Rubric(
        funcs=[solved, quick, lambda state: float(len(state["trajectory"]) > 1)], weights=[1.0, 0.5, 0.25]
    )
    return GuessEnv(dataset=Dataset.from_list(rows), system_prompt=GUESS_PROMPT, rubric=rubric, max_turns=6)


def add(a: int, b: int) -> int:
    """Add two integers.

    Args:
        a: the first integer
        b: the second integer
    """
    return a + b


def reverse(text: str) -> str:
    """Reverse a text.

    Args:
        text: the text to reverse
    """
    return text[::-1]


def tools_env(n: int = 4) -> Any:
    rows = [
        {"question": f"Compute {10 * i} + {i + 5}, then reverse the digits.", "answer": str(11 * i + 5)[::-1]}
        for i in range(n)
    ]
    parser = vf.XMLParser(["answer"], answer_field="answer")

    def final_answer(completion, answer, parser) -> float:
        return 1.0 if (parser.parse_answer(completion) or "").strip() == answer else 0.0

    rubric = vf.Rubric(funcs=[final_answer], parser=parser)
    return vf.ToolEnv(
        tools=[add, reverse],
        dataset=Dataset.from_list(rows),
        system_prompt=TOOLS_PROMPT,
        parser=parser,
        rubric=rubric,
        max_turns=5,
    )


def scaled_add(a: int, b: int, scale: int) -> int:
    """Add two integers, times the task's scale.

    Args:
        a: the first integer
        b: the second integer
        scale: set by the environment from the task
    """
    return (a + b) * scale


class ScaledToolEnv(vf.StatefulToolEnv):
    """A tool with an argument the model does not see (`scale`, from the task's info)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.add_tool(scaled_add, args_to_skip=["scale"])

    async def setup_state(self, state, **kwargs):
        state["scale"] = state["info"]["scale"]
        return state

    def update_tool_args(self, tool_name, tool_args, messages, state, **kwargs):
        return {**tool_args, "scale": state["scale"]} if tool_name == "scaled_add" else tool_args


def stateful_env(n: int = 4) -> Any:
    rows = [
        {
            "question": f"Compute ({i} + 4) times the scale.",
            "answer": str((i + 4) * (i % 3 + 1)),
            "info": {"scale": i % 3 + 1},
        }
        for i in range(n)
    ]
    parser = vf.XMLParser(["answer"], answer_field="answer")

    def final_answer(completion, answer, parser) -> float:
        return 1.0 if (parser.parse_answer(completion) or "").strip() == answer else 0.0

    return ScaledToolEnv(
        dataset=Dataset.from_list(rows),
        system_prompt=STATEFUL_PROMPT,
        parser=parser,
        rubric=vf.Rubric(funcs=[final_answer], parser=parser),
        max_turns=3,
    )


def group_env(n: int = 4) -> Any:
    """`single` with a group reward function: each rollout's share of its group's right answers."""
    env = single_env(n)

    def share_right(completions, answers) -> list[float]:
        right = [float((env.parser.parse_answer(c) or "").strip() == a) for c, a in zip(completions, answers)]
        return [sum(right) / len(right) ** 2] * len(right)

    env.rubric.add_reward_func(share_right, weight=0.5)
    return env


def load_environment(kind: str = "single", n: int = 4) -> Any:
    kinds = {"single": single_env, "guess": guess_env, "tools": tools_env, "stateful": stateful_env, "group": group_env}
    return kinds[kind](n)


# ---- the scripted model ---------------------------------------------------------------------------


def scripted_model(messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> str | Reply:
    system = str(messages[0].get("content") or "")
    if system == SINGLE_PROMPT:
        a, b = map(int, re.findall(r"\d+", str(messages[-1]["content"])))
        total = a + b + (1 if a % 3 == 2 else 0)  # wrong on every third task
        if a % 2:
            return f"<answer>{total}</answer>"  # no think block: a lower format reward
        return f"<think>\n{a} plus {b} makes {total}, I am sure of it.\n</think>\n<answer>\n{total}\n</answer>"
    if system == GUESS_PROMPT:
        low, high = 1, 16
        for m in messages:
            hint = re.match(r"(\d+) is wrong; go (higher|lower)", str(m.get("content") or ""))
            if hint:
                guess = int(hint.group(1))
                low, high = (guess + 1, high) if hint.group(2) == "higher" else (low, guess - 1)
        return str((low + high) // 2)
    if system == TOOLS_PROMPT:
        results = [m for m in messages if m.get("role") == "tool"]
        a, b = map(int, re.findall(r"\d+", str(messages[1]["content"])))
        if not results:
            return Reply(tool_calls=[("add", {"a": a, "b": b})])
        if len(results) == 1:
            return Reply(tool_calls=[("reverse", {"text": str(results[0]["content"])})])
        answer = str(results[-1]["content"]) if a % 20 == 0 else "0"  # wrong on odd tasks
        return f"<answer>{answer}</answer>"
    if system == STATEFUL_PROMPT:
        results = [m for m in messages if m.get("role") == "tool"]
        a, b = map(int, re.findall(r"\d+", str(messages[1]["content"])))
        if not results:
            return Reply(tool_calls=[("scaled_add", {"a": a, "b": b})])
        return f"<answer>{results[-1]['content'] if a != 1 else 0}</answer>"  # wrong on task 1
    return json.dumps({"unexpected system prompt": system})
