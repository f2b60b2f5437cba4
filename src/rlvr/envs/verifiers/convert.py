"""What crosses between rlvr and verifiers: messages, tool definitions, dataset rows, the rubric.

verifiers' classic API keeps messages as pydantic objects (`AssistantMessage` with `ToolCall`s
of `id`, `name`, `arguments`), tools as `vf.Tool` (`name`, `description`, `parameters`,
`strict`) and dataset rows as dicts with `prompt`, `answer`, `info` and `example_id`. rlvr keeps
OpenAI-style dicts. The rubric is scored by verifiers itself: each of its reward functions
becomes an rlvr reward function of the same name and weight that reads verifiers' own score.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from rlvr.errors import UsageError
from rlvr.rubric import Rubric, group_reward
from rlvr.types import Message, Messages, State, Task


def to_verifiers(messages: Messages) -> list[Any]:
    """rlvr's messages as verifiers' message objects (OpenAI-style tool calls included)."""
    from verifiers.utils.message_utils import normalize_messages

    return list(normalize_messages([dict(m) for m in messages], field_name="messages"))


def from_verifiers(messages: Sequence[Any]) -> Messages:
    """verifiers' messages (objects or dicts) as rlvr's dicts: unset fields dropped, tool calls
    in the OpenAI form rlvr's clients send.

    >>> from_verifiers([{"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "name": "add", "arguments": "{}"}]}])
    [{'role': 'assistant', 'content': '', 'tool_calls': [{'id': 'c1', 'type': 'function', 'function': {'name': 'add', 'arguments': '{}'}}]}]
    """
    out: Messages = []
    for message in messages:
        raw = message.model_dump(exclude_none=True) if hasattr(message, "model_dump") else dict(message)
        msg: Message = {k: v for k, v in raw.items() if v is not None}
        if msg.get("role") == "assistant":
            msg.setdefault("content", "")
            calls = msg.pop("tool_calls", None) or []
            if calls:
                msg["tool_calls"] = [_openai_call(c) for c in calls]
        out.append(msg)
    return out


def _openai_call(call: Mapping[str, Any]) -> dict[str, Any]:
    if "function" in call:
        return dict(call)
    return {"id": call["id"], "type": "function", "function": {"name": call["name"], "arguments": call["arguments"]}}


def tool_schemas(tool_defs: Sequence[Any]) -> list[dict[str, Any]] | None:
    """verifiers' `vf.Tool` definitions as OpenAI tool schemas (None when there are none), the
    way verifiers' own OpenAI chat client sends them (`strict` only when the tool sets it)."""
    schemas = []
    for tool in tool_defs:
        function: dict[str, Any] = {"name": tool.name, "description": tool.description, "parameters": tool.parameters}
        if tool.strict is not None:
            function["strict"] = tool.strict
        schemas.append({"type": "function", "function": function})
    return schemas or None


def row_task(row: Mapping[str, Any], split: str) -> Task:
    """One row of a verifiers dataset as an rlvr task: id `{split}-{example_id}`, its prompt
    messages (a text prompt becomes one user message), its answer as text, its info.

    >>> row_task({"prompt": [{"role": "user", "content": "2+2?", "tool_calls": None}], "answer": 4,
    ...           "info": '{"level": 1}', "example_id": 3}, "eval")
    Task(id='eval-3', prompt=({'role': 'user', 'content': '2+2?'},), question=None, answer='4', info={'level': 1}, seed=3)
    """
    prompt = row.get("prompt")
    if isinstance(prompt, str):
        prompt = [{"role": "user", "content": prompt}]
    if not prompt:
        raise UsageError(f"verifiers dataset row {row.get('example_id')!r} has no prompt; columns: {', '.join(row)}")
    info = row.get("info") or {}
    if isinstance(info, str):
        info = json.loads(info) if info.strip() else {}
    answer = row.get("answer")
    example_id = int(row.get("example_id", 0))
    return Task(
        id=f"{split}-{example_id}",
        prompt=tuple({k: v for k, v in dict(m).items() if v is not None} for m in prompt),
        answer=None if answer is None or answer == "" else str(answer),
        info=dict(info),
        seed=example_id,
    )


def bridged_rubric(vf_rubric: Any, vf_state_of: Callable[[State], Any]) -> Rubric:
    """An rlvr rubric scored by verifiers' rubric `vf_rubric` (a `Rubric` or `RubricGroup`).

    Each verifiers reward function (metrics included, at weight 0) becomes an rlvr function of
    the same name (`rlvr_name`) and weight; the first one asked scores the whole group with verifiers' own
    `score_group` (async or sync functions, the parser and the other objects verifiers hands
    them, group reward functions, a failing function scored 0, as verifiers does), and every one
    reads its value from verifiers' `metrics`. So rlvr's weighted total is verifiers' reward.
    When verifiers has group reward functions every bridged function is an rlvr group function
    (rollouts of a task are scored together), else each rollout is scored alone."""
    names: list[str] = list(vf_rubric._get_reward_func_names())
    weights: list[float] = [float(w) for w in vf_rubric._get_reward_weights()]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise UsageError(
            f"the verifiers rubric has two reward functions named {twice[0]!r}; verifiers sums their "
            "metrics under one name, so rlvr cannot weigh them apart: give them distinct names"
        )
    grouped = bool(vf_rubric.has_group_rewards)

    async def scored(states: Sequence[State]) -> list[Mapping[str, float]]:
        vf_states = [vf_state_of(s) for s in states]
        fresh = [s for s in vf_states if s.get("metrics") is None]
        if fresh:
            await vf_rubric.score_group(fresh)
        return [s["metrics"] for s in vf_states]

    funcs = [_reward_fn(name, rlvr_name(name, i), scored, grouped) for i, name in enumerate(names)]
    return Rubric(funcs, weights=weights)


def rlvr_name(name: str, index: int) -> str:
    """The rlvr name of verifiers' reward function `name`: the same, unless it is no identifier
    (a lambda's `<lambda>`): then `reward_{index}`, its place in the rubric.

    >>> rlvr_name("correct", 0), rlvr_name("<lambda>", 2)
    ('correct', 'reward_2')
    """
    return name if name.isidentifier() else f"reward_{index}"


def _reward_fn(name: str, as_named: str, scored: Callable[..., Any], grouped: bool) -> Callable[..., Any]:
    if grouped:

        async def group_fn(states: list[State]) -> list[float]:
            return [float(m.get(name, 0.0)) for m in await scored(states)]

        group_fn.__name__ = group_fn.__qualname__ = as_named
        group_fn.__doc__ = f"verifiers' group reward function {name!r}, as verifiers scores it."
        return group_reward(group_fn)

    async def fn(state: State) -> float:
        (metrics,) = await scored([state])
        return float(metrics.get(name, 0.0))

    fn.__name__ = fn.__qualname__ = as_named
    fn.__doc__ = f"verifiers' reward function {name!r}, as verifiers scores it."
    return fn
