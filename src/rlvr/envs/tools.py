"""Tool environments: plain Python functions become tools the model can call.

A tool's schema comes from its signature and docstring: type hints give the JSON types, the
docstring's first paragraph the description, and its `Args:` section each parameter's
description. The model calls tools; each call's result (or error) goes back as a `tool`
message; the episode ends when the model answers without a tool call (`no_tool_call`,
terminated) or at `max_turns` (truncated).

`StatefulToolEnv` hides some arguments from the model (a database handle, a sandbox) and fills
them in from the rollout state.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import re
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar, Unpack

from rlvr.envs.multiturn import EnvOptions, MultiTurnEnv, stop
from rlvr.envs.schema import validate_arguments
from rlvr.errors import UsageError
from rlvr.types import Messages, State, Task, ToolCall

_JSON_TYPES: dict[Any, str] = {str: "string", int: "integer", float: "number", bool: "boolean"}
MAX_TOOL_CALLS = 32
"""Tool calls of one reply that are run by default; the rest are answered with an error, unrun
(one reply held 100,000 calls, which ran one by one for hours)."""


@dataclass(kw_only=True)
class ToolState(State):
    tool_calls: dict[str, int] = field(default_factory=dict)
    """Calls made to each tool."""
    failed_tool_calls: int = 0
    """Calls that raised, named an unknown tool, or had malformed arguments."""


TS = TypeVar("TS", bound=ToolState)


def _json_type(hint: Any) -> dict[str, Any]:
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if hint in _JSON_TYPES:
        return {"type": _JSON_TYPES[hint]}
    if origin is Literal:
        return {"type": _JSON_TYPES.get(type(args[0]), "string"), "enum": list(args)}
    if origin in (list, tuple, Sequence) or hint in (list, tuple):
        return {"type": "array", "items": _json_type(args[0])} if args else {"type": "array"}
    if origin in (dict, Mapping) or hint is dict:
        return {"type": "object"}
    if origin in (typing.Union, types.UnionType):
        inner = [a for a in args if a is not type(None)]
        return _json_type(inner[0]) if len(inner) == 1 else {"anyOf": [_json_type(a) for a in inner]}
    return {"type": "string"}


def _docstring_parts(fn: Callable[..., Any]) -> tuple[str, dict[str, str]]:
    doc = inspect.getdoc(fn) or ""
    summary = doc.split("\n\n", 1)[0].replace("\n", " ").strip()
    params: dict[str, str] = {}
    section = re.search(r"^(?:Args|Arguments|Parameters):\s*\n((?:[ \t]+.*\n?)+)", doc, re.M)
    if section:
        current = None
        for line in section.group(1).splitlines():
            m = re.match(r"^\s+(\w+)(?:\s*\([^)]*\))?:\s*(.*)$", line)
            if m and (current is None or len(line) - len(line.lstrip()) <= 4):
                current = m.group(1)
                params[current] = m.group(2).strip()
            elif current:
                params[current] += " " + line.strip()
    return summary, params


def tool_schema(fn: Callable[..., Any], hidden: Sequence[str] = ()) -> dict[str, Any]:
    """The OpenAI tool schema of a function; parameters named in `hidden` are left out.

    >>> def add(a: int, b: int = 2) -> int:
    ...     '''Add two numbers.
    ...
    ...     Args:
    ...         a: first number
    ...         b: second number
    ...     '''
    ...     return a + b
    >>> s = tool_schema(add)["function"]
    >>> s["description"], s["parameters"]["required"], s["parameters"]["properties"]["a"]
    ('Add two numbers.', ['a'], {'type': 'integer', 'description': 'first number'})
    """
    hints = typing.get_type_hints(fn)
    summary, described = _docstring_parts(fn)
    properties: dict[str, Any] = {}
    required: list[str] = []
    for p in inspect.signature(fn).parameters.values():
        if p.name in hidden or p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            continue
        prop = _json_type(hints.get(p.name, str))
        if p.name in described:
            prop["description"] = described[p.name]
        properties[p.name] = prop
        if p.default is p.empty:
            required.append(p.name)
    return {
        "type": "function",
        "function": {
            "name": fn.__name__,
            "description": summary,
            "parameters": {"type": "object", "properties": properties, "required": required},
        },
    }


class ToolEnv(MultiTurnEnv[TS]):
    """The model calls tools until it answers without one."""

    hidden_args: tuple[str, ...] = ()

    def __init__(
        self,
        dataset: Sequence[Task | Mapping[str, Any]],
        *,
        tools: Sequence[Callable[..., Any]],
        max_tool_calls: int = MAX_TOOL_CALLS,
        **options: Unpack[EnvOptions],
    ) -> None:
        """`tools`: the functions the model may call; `max_tool_calls`: the calls of one reply
        that are run (the rest are answered with an error each, not run); `options`: those of
        `MultiTurnEnv`."""
        super().__init__(dataset, **options)
        if max_tool_calls < 1:
            raise UsageError(f"max_tool_calls must be >= 1, got {max_tool_calls}")
        self.max_tool_calls = max_tool_calls
        names = [t.__name__ for t in tools]
        if len(set(names)) != len(names):
            raise UsageError(f"tool names must be unique, got {names}")
        self.tools = {t.__name__: t for t in tools}
        self._schemas = [tool_schema(t, self.hidden_args) for t in tools]
        self._parameters = {s["function"]["name"]: s["function"]["parameters"] for s in self._schemas}

    def setup_state(self, task: Task) -> TS:
        return ToolState(task=task)  # type: ignore[return-value]

    def tool_schemas(self, state: TS) -> list[dict[str, Any]] | None:
        return self._schemas

    @stop(priority=50)
    def no_tool_call(self, state: TS) -> bool:
        return not state.awaiting_model and not state.turns[-1].completion.tool_calls

    async def env_response(self, messages: Messages, state: TS) -> Messages:
        """Each call's result, in order; the calls past `max_tool_calls` are not run: each gets
        the same error (an API wants an answer to every call id), counted as failed."""
        calls = state.turns[-1].completion.tool_calls
        run, skipped = calls[: self.max_tool_calls], calls[self.max_tool_calls :]
        replies = [
            {"role": "tool", "tool_call_id": call.id, "content": await self.call_tool(call, state)} for call in run
        ]
        if skipped:
            state.failed_tool_calls += len(skipped)
            error = f"Error: {len(calls)} tool calls in one reply; only the first {len(run)} were run, not this one"
            replies += [{"role": "tool", "tool_call_id": call.id, "content": error} for call in skipped]
        return replies

    def inject(self, tool_name: str, args: dict[str, Any], state: TS) -> dict[str, Any]:
        """Add hidden arguments to a call. `ToolEnv` hides none."""
        return args

    async def call_tool(self, call: ToolCall, state: TS) -> str:
        """Run one call; any failure becomes an error message for the model."""
        state.tool_calls[call.name] = state.tool_calls.get(call.name, 0) + 1
        fn = self.tools.get(call.name)
        try:
            if fn is None:
                raise ToolCallError(f"unknown tool {call.name!r}; available: {', '.join(self.tools)}")
            args = parse_arguments(call.arguments)
            problem = validate_arguments(self._parameters[call.name], args)
            if problem:
                raise ToolCallError(problem)
            args = self.inject(call.name, args, state)
            inspect.signature(fn).bind(**args)
            result = await asyncio.to_thread(fn, **args) if not inspect.iscoroutinefunction(fn) else await fn(**args)
        except Exception as exc:
            state.failed_tool_calls += 1
            detail = str(exc) if isinstance(exc, ToolCallError) else f"{type(exc).__name__}: {exc}"
            return f"Error: {detail}"
        return result if isinstance(result, str) else json.dumps(result, default=str)


class StatefulToolEnv(ToolEnv[TS]):
    """Tools with arguments hidden from the model, filled in from the state.

    Declare the hidden names in `hidden_args`; `inject` takes each from the state attribute of
    the same name (override it for anything else).
    """

    hidden_args: tuple[str, ...] = ()

    def inject(self, tool_name: str, args: dict[str, Any], state: TS) -> dict[str, Any]:
        params = inspect.signature(self.tools[tool_name]).parameters
        for name in self.hidden_args:
            if name in args:
                raise ToolCallError(f"argument {name!r} is not yours to set")
            if name in params:
                args[name] = getattr(state, name)
        return args


class ToolCallError(Exception):
    """A tool call the model got wrong (shown to the model, never raised to the user)."""


def parse_arguments(raw: str) -> dict[str, Any]:
    try:
        args = json.loads(raw) if raw.strip() else {}
    except json.JSONDecodeError as exc:
        raise ToolCallError(f"arguments are not valid JSON ({exc.msg} at column {exc.colno})") from None
    if not isinstance(args, dict):
        raise ToolCallError(f"arguments must be a JSON object, got {type(args).__name__}")
    return args
