"""Action spaces as text: what to write, how it is read, and how an action is written back.

Every action is written inside ``<action>...</action>``. A `Discrete` action is a number (or
one of the env's action names); a `Text` action is the text itself (surrounding white space
dropped); every other space takes JSON:

- `Box`: a JSON list of numbers (nested like the shape; a lone number when the shape has one
  element), each within its bounds;
- `MultiDiscrete`: a JSON list of integers, each in its own range;
- `MultiBinary`: a JSON list of 0s and 1s;
- `Tuple`: a JSON list with one item per part, each written as that part asks;
- `Dict`: a JSON object with one key per part, each value written as that part asks (a
  `Text` part as a JSON string).

A value that cannot be read raises ``ValueError`` with a one-line reason the model is shown,
e.g. ``item 1 is 3.5; it must be in [-2, 2]``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from typing import Any

from rlvr.errors import import_extra

SUPPORTED = "Discrete, Box, MultiDiscrete, MultiBinary, Text, and Tuple and Dict of those"
KINDS = frozenset({"Discrete", "Box", "MultiDiscrete", "MultiBinary", "Text", "Tuple", "Dict"})


def _numpy() -> Any:
    """numpy, imported when a space is read or written (never at import: the core has no numpy;
    every gymnasium space brings it, through the `gym` extra)."""
    return import_extra("numpy", "gym", "Gymnasium action spaces")


def _kind(space: Any) -> str:
    name = type(space).__name__
    if name not in KINDS:
        raise ValueError(f"no text form for the action space {space}; supported: {SUPPORTED}; pass parse_action=")
    for part in _parts(space).values():
        _kind(part)
    return name


def _parts(space: Any) -> dict[Any, Any]:
    """The parts of a Tuple (by position) or a Dict (by key); none for any other space."""
    name = type(space).__name__
    if name == "Tuple":
        return dict(enumerate(space.spaces))
    return dict(space.spaces) if name == "Dict" else {}


def check_supported(space: Any) -> None:
    """Raise ValueError naming the space when it has no text form."""
    _kind(space)


def _range(low: float, high: float) -> str:
    """The bounds of one number, in words.

    >>> _range(-2.0, 2.0), _range(0.0, float("inf")), _range(-float("inf"), float("inf"))
    ('in [-2, 2]', 'at least 0', 'of any value')
    """
    if math.isinf(low) and math.isinf(high):
        return "of any value"
    if math.isinf(low):
        return f"at most {high:g}"
    if math.isinf(high):
        return f"at least {low:g}"
    return f"in [{low:g}, {high:g}]"


def describe(space: Any, names: Sequence[str] | None = None) -> str:
    """What one action of `space` is, in words.

    >>> import gymnasium
    >>> describe(gymnasium.spaces.Box(-2.0, 2.0, (1,)))
    'a number in [-2, 2] (or a JSON list of 1 number)'
    >>> describe(gymnasium.spaces.MultiDiscrete([3, 2]))
    'a JSON list of 2 integers: the 1st from 0 to 2, the 2nd from 0 to 1'
    """
    kind = _kind(space)
    if kind == "Discrete":
        start, n = int(space.start), int(space.n)
        return "one of " + ", ".join(names) if names is not None else f"an integer from {start} to {start + n - 1}"
    if kind == "Tuple":
        parts = [describe(part) for part in space.spaces]
        return f"a JSON list of {len(parts)} items: " + "; ".join(
            f"the {_ordinal(i + 1)} {p}" for i, p in enumerate(parts)
        )
    if kind == "Dict":
        keys = "; ".join(f"{json.dumps(k)}: {describe(part)}" for k, part in space.spaces.items())
        return f"a JSON object with the keys {keys}"
    if kind == "Text":
        return _describe_text(space)
    np = _numpy()
    size, note = int(np.prod(space.shape)), _shape_note(space.shape)
    if kind == "MultiBinary":
        return f"a JSON list of {size} values, each 0 or 1{note}"
    if kind == "MultiDiscrete":
        low, high = space.start.ravel(), (space.start + space.nvec - 1).ravel()
        ranges = [f"from {int(a)} to {int(b)}" for a, b in zip(low, high)]
        return f"a JSON list of {size} integers: {_each(ranges)}{note}"
    word = "integer" if np.issubdtype(space.dtype, np.integer) else "number"  # a Box
    ranges = [_range(float(a), float(b)) for a, b in zip(space.low.ravel(), space.high.ravel())]
    if size == 1:
        return f"{'an' if word == 'integer' else 'a'} {word} {ranges[0]} (or a JSON list of 1 {word})"
    if len(set(ranges)) == 1:
        return f"a JSON list of {size} {word}s, each {ranges[0]}{note}"
    return f"a JSON list of {size} {word}s: {_each(ranges)}{note}"


def _describe_text(space: Any) -> str:
    """A Text space in words.

    >>> import gymnasium
    >>> _describe_text(gymnasium.spaces.Text(5, charset="abc"))
    'text of 1 to 5 characters, each one of: abc'
    """
    chars = "".join(sorted(space.character_set))
    allowed = f", each one of: {chars}" if len(chars) <= 80 else f" ({len(chars)} characters allowed)"
    if chars == "".join(sorted("0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz")):
        allowed = ", letters and digits only"
    return f"text of {space.min_length} to {space.max_length} characters{allowed}"


def _each(items: Sequence[str]) -> str:
    return ", ".join(f"the {_ordinal(i + 1)} {item}" for i, item in enumerate(items))


def _ordinal(i: int) -> str:
    suffix = "th" if 10 <= i % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(i % 10, "th")
    return f"{i}{suffix}"


def _shape_note(shape: tuple[int, ...]) -> str:
    return f" (flat, or nested as shape {list(shape)})" if len(shape) > 1 else ""


# ---- reading an action ----------------------------------------------------------------------


def parse(text: str, space: Any, names: Sequence[str] | None = None) -> Any:
    """The action written in `text` (the inside of ``<action>``); ValueError with a reason.

    >>> import gymnasium
    >>> parse("[0.5]", gymnasium.spaces.Box(-2.0, 2.0, (1,)))
    array([0.5], dtype=float32)
    >>> parse("[3]", gymnasium.spaces.Box(-2.0, 2.0, (1,)))
    Traceback (most recent call last):
    ...
    ValueError: 3 is out of range: it must be in [-2, 2]
    """
    kind = _kind(space)
    if kind == "Discrete":
        return _discrete(text.strip(), space, names)
    if kind == "Text":
        return _text(text.strip(), space, "")
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        raise ValueError(f"{text.strip()[:40]!r} is not JSON; write e.g. {example(space)}") from None
    return _from_json(value, space, "")


def _discrete(key: str, space: Any, names: Sequence[str] | None) -> int:
    start, n = int(space.start), int(space.n)
    lowered = [a.lower() for a in names] if names is not None else []
    if key.lower() in lowered:
        return start + lowered.index(key.lower())
    if key.lstrip("-").isdigit() and start <= int(key) < start + n:
        return int(key)
    allowed = ", ".join(names) if names is not None else f"{start}..{start + n - 1}"
    raise ValueError(f"{key[:40]!r} is not an action; choose one of {allowed}")


def _text(value: Any, space: Any, where: str) -> str:
    if not isinstance(value, str):
        raise ValueError(f"{where}{_show(value)} is not a JSON string")
    if not space.min_length <= len(value) <= space.max_length:
        raise ValueError(f"{where}{len(value)} characters; it must have {space.min_length} to {space.max_length}")
    bad = next((c for c in value if c not in space.character_set), None)
    if bad is not None:
        raise ValueError(f"{where}the character {bad!r} is not allowed; write {_describe_text(space)}")
    return value


def _from_json(value: Any, space: Any, where: str) -> Any:
    kind = type(space).__name__
    if kind == "Text":
        return _text(value, space, where)
    if kind == "Dict":
        keys = list(space.spaces)
        if not isinstance(value, dict) or sorted(value) != sorted(keys):
            raise ValueError(f"{where}{_show(value)} is not a JSON object with exactly the keys {json.dumps(keys)}")
        return {k: _from_json(value[k], part, f"{where}key {json.dumps(k)}: ") for k, part in space.spaces.items()}
    if kind == "Tuple":
        n = len(space.spaces)
        if not isinstance(value, list) or len(value) != n:
            raise ValueError(f"{where}{_show(value)} is not a JSON list of {n} items")
        return tuple(
            _from_json(v, part, f"{where}item {i + 1}: ") for i, (v, part) in enumerate(zip(value, space.spaces))
        )
    if kind == "Discrete":
        start, n = int(space.start), int(space.n)
        if not _is_integer(value) or not start <= value < start + n:
            raise ValueError(f"{where}{_show(value)} is not an integer from {start} to {start + n - 1}")
        return int(value)
    np = _numpy()
    size = int(np.prod(space.shape))
    flat = [value] if size == 1 and not isinstance(value, list) else value
    try:
        array = np.asarray(flat, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError(f"{where}{_show(value)} is not a JSON list of {size} numbers") from None
    if array.size != size:
        raise ValueError(f"{where}{_show(value)} has {array.size} numbers; the action has {size}")
    array = array.reshape(space.shape)
    integral = kind != "Box" or np.issubdtype(space.dtype, np.integer)
    if kind == "MultiBinary":
        low, high = np.zeros(space.shape), np.ones(space.shape)
    elif kind == "MultiDiscrete":
        low, high = space.start, space.start + space.nvec - 1
    else:
        low, high = space.low, space.high
    for i, (x, a, b) in enumerate(zip(array.ravel(), np.ravel(low), np.ravel(high))):
        item = f"{where}item {i + 1}: " if size > 1 else where
        if not math.isfinite(x) or (integral and not float(x).is_integer()):
            raise ValueError(f"{item}{_show(x)} is not {'an integer' if integral else 'a finite number'}")
        if not a <= x <= b:
            raise ValueError(f"{item}{_show(x)} is out of range: it must be {_range(float(a), float(b))}")
    return array.astype(space.dtype)


def _is_integer(value: Any) -> bool:
    return not isinstance(value, bool) and isinstance(value, (int, float)) and float(value).is_integer()


def _show(value: Any) -> str:
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return json.dumps(value)[:40] if not isinstance(value, (float, _numpy().floating)) else f"{float(value):g}"


# ---- writing an action ----------------------------------------------------------------------


def to_text(action: Any, space: Any, names: Sequence[str] | None = None) -> str:
    """The text `parse` reads back as `action` (floats written exactly).

    >>> import gymnasium, numpy as np
    >>> space = gymnasium.spaces.Tuple([gymnasium.spaces.Discrete(3), gymnasium.spaces.Box(0.0, 1.0, (2,))])
    >>> to_text((2, np.array([0.25, 1.0], dtype=np.float32)), space)
    '[2, [0.25, 1.0]]'
    """
    kind = _kind(space)
    if kind == "Discrete":
        index = int(action) - int(space.start)
        return names[index] if names is not None else str(int(action))
    return str(action) if kind == "Text" else json.dumps(_to_json(action, space))


def _to_json(action: Any, space: Any) -> Any:
    if type(space).__name__ == "Tuple":
        return [_to_json(a, part) for a, part in zip(action, space.spaces)]
    if type(space).__name__ == "Dict":
        return {k: _to_json(action[k], part) for k, part in space.spaces.items()}
    if type(space).__name__ == "Text":
        return str(action)
    if type(space).__name__ == "Discrete":
        return int(action)
    return _numpy().asarray(action).tolist()


def example(space: Any) -> str:
    """A valid action, as text: the middle of each range (the low end when unbounded above).

    >>> import gymnasium
    >>> example(gymnasium.spaces.Box(-2.0, 2.0, (1,)))
    '[0.0]'
    """
    kind = _kind(space)
    if kind in ("Discrete", "Text"):
        return str(_example(space))
    return json.dumps(_example(space))


def _example(space: Any) -> Any:
    kind = type(space).__name__
    if kind == "Tuple":
        return [_example(part) for part in space.spaces]
    if kind == "Dict":
        return {k: _example(part) for k, part in space.spaces.items()}
    if kind == "Discrete":
        return int(space.start)
    if kind == "Text":
        return sorted(space.character_set)[0] * max(space.min_length, 1)
    np = _numpy()
    if kind == "MultiBinary":
        return np.zeros(space.shape, dtype=int).tolist()
    if kind == "MultiDiscrete":
        return (space.start + (space.nvec - 1) // 2).tolist()
    low, high = np.asarray(space.low, dtype=np.float64), np.asarray(space.high, dtype=np.float64)
    lo, hi = np.where(np.isfinite(low), low, 0.0), np.where(np.isfinite(high), high, 0.0)
    both, only_low = np.isfinite(low) & np.isfinite(high), np.isfinite(low) & ~np.isfinite(high)
    middle = np.where(both, (lo + hi) / 2, np.where(only_low, lo, np.where(np.isfinite(high), hi, 0.0)))
    if np.issubdtype(space.dtype, np.integer):
        middle = np.floor(middle)
    return middle.astype(space.dtype).tolist()
