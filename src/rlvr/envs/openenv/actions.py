"""From a model reply to an OpenEnv action, and from an observation to messages, by the schemas."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from rlvr.errors import UsageError
from rlvr.types import Messages, ToolCall

_RESERVED = ("done", "reward", "metadata")
"""Observation fields every OpenEnv observation has; not shown to the model."""


class ActionError(ValueError):
    """A reply that makes no action (no JSON object where one is needed)."""


@dataclass(frozen=True)
class ActionMapping:
    """How a reply becomes an action, read from the server's `/schema`.

    - `chat`: the server is an rlvr environment (`rlvr serve`): the reply and its tool calls
      are the action, the observation's messages are the environment's messages.
    - `text_field`: the reply's text fills this one field of the action.
    - otherwise the reply holds the action as a JSON object (its first `{...}` that parses).
    """

    fields: dict[str, Any]
    required: tuple[str, ...]
    text_field: str | None = None
    observation_field: str | None = None
    chat: bool = False

    @classmethod
    def from_schema(
        cls, schema: dict[str, Any], action_field: str | None = None, observation_field: str | None = None
    ) -> ActionMapping:
        """The mapping for a server's `/schema`.

        >>> s = {"action": {"properties": {"message": {"type": "string"}, "metadata": {}}, "required": ["message"]}}
        >>> ActionMapping.from_schema(s).text_field
        'message'
        >>> s = {"action": {"properties": {"guess": {"type": "integer"}}, "required": ["guess"]}}
        >>> ActionMapping.from_schema(s).text_field is None
        True
        """
        action = schema.get("action") or {}
        fields = {k: v for k, v in (action.get("properties") or {}).items() if k != "metadata"}
        required = tuple(k for k in action.get("required") or () if k in fields)
        observed = set((schema.get("observation") or {}).get("properties") or {})
        for label, name, names in (("action", action_field, fields), ("observation", observation_field, observed)):
            if name is not None and names and name not in names:
                raise UsageError(f"the {label} has no field {name!r}; its fields: {', '.join(sorted(names))}")
        chat = action_field is None and {"content", "tool_calls"} <= set(fields) and "messages" in observed
        text = action_field if action_field is not None else None if chat else _one_text_field(fields, required)
        return cls(fields, required, text, observation_field, chat)

    def action(self, text: str, tool_calls: Sequence[ToolCall] = ()) -> dict[str, Any]:
        """The action of a reply (its text, without the thinking; its tool calls)."""
        if self.chat:
            return {"content": text, "tool_calls": [vars(c) for c in tool_calls]}
        if self.text_field is not None:
            return {self.text_field: text}
        return _first_json_object(text)

    def hint(self) -> str:
        """How a reply must look, in one sentence."""
        if self.chat or self.text_field is not None:
            return "Reply with your action as plain text."
        described = ", ".join(f"{k} ({v.get('type', 'any')})" for k, v in self.fields.items())
        return f"Reply with your action as one JSON object with the fields {described}."

    def instructions(self) -> str | None:
        """The system prompt made from the schema (None for an rlvr-served env: it has its own)."""
        if self.chat:
            return None
        return "You act in an environment. Each user message is what you observe. " + self.hint()


def observation_messages(observation: dict[str, Any], mapping: ActionMapping) -> Messages:
    """The messages of an observation: an rlvr-served env's own messages; else one user message
    with the chosen field, the one field there is, or each field on a line (`name: value`).

    >>> m = ActionMapping({}, ())
    >>> observation_messages({"echoed": "hi", "done": False, "reward": 0.5}, m)
    [{'role': 'user', 'content': 'hi'}]
    >>> observation_messages({"feedback": "higher", "attempts_left": 3}, m)[0]["content"]
    'feedback: higher\\nattempts_left: 3'
    """
    if mapping.chat:
        return [dict(m) for m in observation.get("messages") or []]
    shown = {k: v for k, v in observation.items() if k not in _RESERVED}
    if mapping.observation_field is not None:
        shown = {mapping.observation_field: shown.get(mapping.observation_field, "")}
    if len(shown) == 1:
        text = _text(next(iter(shown.values())))
    else:
        text = "\n".join(f"{k}: {_text(v)}" for k, v in shown.items())
    return [{"role": "user", "content": text}] if text else []


def _text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value)


def _one_text_field(fields: dict[str, Any], required: tuple[str, ...]) -> str | None:
    """The field a reply's text fills: the only field, or the only required one, if it is text."""
    candidates = list(fields) if len(fields) == 1 else list(required) if len(required) == 1 else []
    if candidates and fields[candidates[0]].get("type") == "string":
        return candidates[0]
    return None


def _first_json_object(text: str) -> dict[str, Any]:
    """The first JSON object in `text`.

    >>> _first_json_object('I guess {"guess": 50} now')
    {'guess': 50}
    """
    decoder = json.JSONDecoder()
    for start in (i for i, ch in enumerate(text) if ch == "{"):
        try:
            value, _ = decoder.raw_decode(text, start)
        except json.JSONDecodeError:
            continue
        if isinstance(value, dict):
            return value
    raise ActionError("the reply holds no JSON object")
