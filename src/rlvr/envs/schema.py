"""Check tool-call arguments against a tool's JSON schema before the tool runs.

A wrong argument type is the model's mistake: it becomes a tool error message, not a crash.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

_JSON_CHECKS: dict[str, Any] = {
    "string": lambda v: isinstance(v, str),
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    "boolean": lambda v: isinstance(v, bool),
    "array": lambda v: isinstance(v, list),
    "object": lambda v: isinstance(v, dict),
    "null": lambda v: v is None,
}
_JSON_NAMES = {str: "string", bool: "boolean", int: "integer", float: "number", list: "array", dict: "object"}


def _json_name(value: Any) -> str:
    return "null" if value is None else _JSON_NAMES.get(type(value), type(value).__name__)


def _type_error(schema: Mapping[str, Any], value: Any, where: str) -> str | None:
    if "anyOf" in schema or "oneOf" in schema:
        options = schema.get("anyOf") or schema.get("oneOf") or []
        if any(_type_error(s, value, where) is None for s in options):
            return None
        choices = [s.get("type", "?") for s in options]
        return f"{where} must be one of {choices}, got {_json_name(value)} {value!r}"
    if "enum" in schema and value not in schema["enum"]:
        return f"{where} must be one of {schema['enum']}, got {value!r}"
    declared = schema.get("type")
    if declared is None:
        return None
    kinds = [declared] if isinstance(declared, str) else list(declared)
    if not any(_JSON_CHECKS.get(k, lambda v: True)(value) for k in kinds):
        return f"{where} must be {' or '.join(kinds)}, got {_json_name(value)} {value!r}"
    if isinstance(value, list) and isinstance(schema.get("items"), Mapping):
        for i, item in enumerate(value):
            problem = _type_error(schema["items"], item, f"{where}[{i}]")
            if problem:
                return problem
    return None


def validate_arguments(parameters: Mapping[str, Any], args: Mapping[str, Any]) -> str | None:
    """What is wrong with tool-call `args` for a JSON-schema `parameters` object, or None.

    Checks required and unknown arguments and each argument's JSON type (`type`, `enum`,
    `anyOf`, array `items`); other keywords are left to the tool.

    >>> schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    >>> validate_arguments(schema, {"n": 3}) is None, validate_arguments(schema, {"n": "3"})
    (True, "argument 'n' must be integer, got string '3'")
    >>> validate_arguments(schema, {}), validate_arguments(schema, {"n": 1, "m": 2})
    ("missing required argument 'n'", "unknown argument 'm' (expected: n)")
    """
    properties: Mapping[str, Any] = parameters.get("properties") or {}
    for name in parameters.get("required") or ():
        if name not in args:
            return f"missing required argument {name!r}"
    for name, value in args.items():
        if name not in properties:
            if parameters.get("additionalProperties") not in (None, False):
                continue
            return f"unknown argument {name!r} (expected: {', '.join(properties) or 'no arguments'})"
        problem = _type_error(properties[name], value, f"argument {name!r}")
        if problem:
            return problem
    return None
