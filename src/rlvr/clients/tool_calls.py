"""Tool calls in a model's reply text (the chat format, not the decoder): Hermes-style
`<tool_call>{"name": ..., "arguments": {...}}</tool_call>` blocks, as Qwen and many other chat
templates write them. `LocalModel` splits them off its replies; an API server does this itself.
"""

from __future__ import annotations

import json
import re

from rlvr.types import ToolCall

_TOOL_BLOCK = re.compile(r"<tool_call>(.*?)(?:</tool_call>|\Z)", re.DOTALL)


def parse_tool_calls(text: str, id_prefix: str = "call") -> tuple[str, list[ToolCall]]:
    """Split Hermes-style `<tool_call>{"name": ..., "arguments": {...}}</tool_call>` blocks off
    the text. A block whose JSON is malformed (or unclosed at the end) still becomes a call,
    with the raw block as its arguments, so the environment can tell the model what was wrong.

    >>> content, calls = parse_tool_calls('Let me look.<tool_call>{"name": "f", "arguments": {"x": 1}}</tool_call>')
    >>> content, calls[0].name, calls[0].arguments
    ('Let me look.', 'f', '{"x": 1}')
    >>> parse_tool_calls('<tool_call>{"name": "f", "arguments": {x}</tool_call>')[1][0].arguments
    '{"name": "f", "arguments": {x}'
    """
    calls = []
    for i, match in enumerate(_TOOL_BLOCK.finditer(text)):
        raw = match.group(1).strip()
        try:
            obj = json.loads(raw)
        except json.JSONDecodeError:
            obj = None
        if isinstance(obj, dict) and isinstance(obj.get("name"), str):
            args = obj.get("arguments", obj.get("parameters", {}))
            name, arguments = (
                obj["name"],
                args if isinstance(args, str) else json.dumps(args, ensure_ascii=False),
            )
        else:
            found = re.search(r'"name"\s*:\s*"([^"]*)"', raw)
            name, arguments = (found.group(1) if found else ""), raw
        calls.append(ToolCall(id=f"{id_prefix}_{i}", name=name, arguments=arguments))
    return (_TOOL_BLOCK.sub("", text).strip() if calls else text), calls
