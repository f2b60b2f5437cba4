"""Filter expressions over a rollout's rewards and metrics, e.g. for `rlvr gen --filter`.

    win_reward > 0 and format_reward == 1
    not (turns >= 5 or invalid_move_penalty < 0)
    0.5 <= reward < 1.2

Grammar (a small language of its own, parsed here, never `eval`-ed):

    expr       := and_expr ("or" and_expr)*
    and_expr   := not_expr ("and" not_expr)*
    not_expr   := "not" not_expr | comparison
    comparison := operand (OP operand)*          OP: < <= > >= == !=  (chains like Python)
    operand    := NUMBER | "-" NUMBER | NAME | "(" expr ")"

A bare name or number is true when it is not 0. Names are the rollout's reward functions, its
metrics, `reward` (the weighted total) and `truncated` (1 or 0); see `rollout_values`.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, NoReturn

from rlvr.errors import UsageError

_TOKEN = re.compile(
    r"\s*(?:(?P<num>(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)|(?P<op><=|>=|==|!=|<|>)"
    r"|(?P<name>[A-Za-z_][A-Za-z0-9_.]*)|(?P<paren>[()])|(?P<minus>-)|(?P<bad>\S))"
)
_KEYWORDS = ("and", "or", "not")
_COMPARE = {
    "<": lambda a, b: a < b,
    "<=": lambda a, b: a <= b,
    ">": lambda a, b: a > b,
    ">=": lambda a, b: a >= b,
    "==": lambda a, b: a == b,
    "!=": lambda a, b: a != b,
}


@dataclass(frozen=True)
class _Node:
    kind: str  # "num", "name", "not", "and", "or", "cmp"
    text: str  # the source of this node, for messages
    value: Any = None  # number, name, or comparison operators
    children: tuple[_Node, ...] = ()


class Filter:
    """A parsed filter expression.

    >>> f = Filter("win_reward > 0 and format_reward == 1")
    >>> f({"win_reward": 1.0, "format_reward": 1.0}), f({"win_reward": 0.0, "format_reward": 1.0})
    (True, False)
    >>> f.failed_clause({"win_reward": 0.0, "format_reward": 1.0})
    'win_reward > 0'
    >>> sorted(f.names)
    ['format_reward', 'win_reward']
    """

    def __init__(self, source: str) -> None:
        self.source = source.strip()
        if not self.source:
            raise UsageError("empty filter expression; write e.g. 'win_reward > 0 and format_reward == 1'")
        self._tokens = _tokenize(self.source)
        self._pos = 0
        self.root = self._or()
        if self._pos < len(self._tokens):
            self._fail("expected 'and', 'or' or the end of the expression")
        self.names = frozenset(_names(self.root))

    def check_names(self, available: Iterable[str]) -> None:
        """Raise `UsageError` when the expression names something not in `available`."""
        known = sorted(set(available))
        unknown = sorted(self.names - set(known))
        if unknown:
            raise UsageError(
                f"filter {self.source!r} names unknown {', '.join(map(repr, unknown))}; "
                f"available: {', '.join(known) or 'none'}"
            )

    def __call__(self, values: Mapping[str, float]) -> bool:
        return _truth(_eval(self.root, values))

    def failed_clause(self, values: Mapping[str, float]) -> str | None:
        """None when `values` pass; else the first top-level `and` clause that fails (or the
        whole expression when it is not a conjunction)."""
        if self(values):
            return None
        if self.root.kind == "and":
            for clause in self.root.children:
                if not _truth(_eval(clause, values)):
                    return clause.text
        return self.root.text

    # ---- recursive descent ------------------------------------------------------------------

    def _peek(self) -> tuple[str, str, int] | None:
        return self._tokens[self._pos] if self._pos < len(self._tokens) else None

    def _keyword(self, word: str) -> bool:
        token = self._peek()
        if token is not None and token[0] == "name" and token[1] == word:
            self._pos += 1
            return True
        return False

    def _span(self, start: int) -> str:
        first = self._tokens[start][2]
        last = self._tokens[self._pos - 1]
        return self.source[first : last[2] + len(last[1])]

    def _or(self) -> _Node:
        start, parts = self._pos, [self._and()]
        while self._keyword("or"):
            parts.append(self._and())
        return parts[0] if len(parts) == 1 else _Node("or", self._span(start), None, tuple(parts))

    def _and(self) -> _Node:
        start, parts = self._pos, [self._not()]
        while self._keyword("and"):
            parts.append(self._not())
        return parts[0] if len(parts) == 1 else _Node("and", self._span(start), None, tuple(parts))

    def _not(self) -> _Node:
        start = self._pos
        if self._keyword("not"):
            inner = self._not()
            return _Node("not", self._span(start), None, (inner,))
        return self._comparison()

    def _comparison(self) -> _Node:
        start, operands, ops = self._pos, [self._operand()], []
        while (token := self._peek()) is not None and token[0] == "op":
            self._pos += 1
            ops.append(token[1])
            operands.append(self._operand())
        if not ops:
            return operands[0]
        return _Node("cmp", self._span(start), tuple(ops), tuple(operands))

    def _operand(self) -> _Node:
        token = self._peek()
        if token is None:
            self._fail("expected a number, a name or '(' but the expression ended")
        kind, text, _ = token
        start = self._pos
        self._pos += 1
        if kind == "num":
            return _Node("num", text, float(text))
        if kind == "minus":
            nxt = self._peek()
            if nxt is None or nxt[0] != "num":
                self._pos -= 1
                self._fail("'-' must be followed by a number")
            self._pos += 1
            return _Node("num", self._span(start), -float(nxt[1]))
        if kind == "name" and text not in _KEYWORDS:
            return _Node("name", text, text)
        if kind == "paren" and text == "(":
            inner = self._or()
            close = self._peek()
            if close is None or close[1] != ")":
                self._fail("expected ')'")
            self._pos += 1
            return _Node(inner.kind, self._span(start), inner.value, inner.children)
        self._pos -= 1
        self._fail(f"expected a number, a name or '(' but found {text!r}")
        raise AssertionError  # unreachable

    def _fail(self, message: str) -> NoReturn:
        token = self._peek()
        column = token[2] + 1 if token is not None else len(self.source) + 1
        raise UsageError(f"bad filter {self.source!r} at column {column}: {message}")


def _tokenize(source: str) -> list[tuple[str, str, int]]:
    tokens = []
    for match in _TOKEN.finditer(source):
        kind = match.lastgroup
        if kind is None:
            continue
        text = match.group(kind)
        if kind == "bad":
            raise UsageError(
                f"bad filter {source!r} at column {match.start(kind) + 1}: unexpected {text!r} "
                "(allowed: names, numbers, < <= > >= == !=, and, or, not, parentheses)"
            )
        tokens.append((kind, text, match.start(kind)))
    return tokens


def _names(node: _Node) -> Iterable[str]:
    if node.kind == "name":
        yield node.value
    for child in node.children:
        yield from _names(child)


def _truth(value: float | bool) -> bool:
    return bool(value) and not (isinstance(value, float) and math.isnan(value))


def _eval(node: _Node, values: Mapping[str, float]) -> float | bool:
    if node.kind == "num":
        return node.value
    if node.kind == "name":
        if node.value not in values:
            raise UsageError(f"filter names unknown {node.value!r}; available: {', '.join(sorted(values))}")
        return float(values[node.value])
    if node.kind == "not":
        return not _truth(_eval(node.children[0], values))
    if node.kind == "and":
        return all(_truth(_eval(c, values)) for c in node.children)
    if node.kind == "or":
        return any(_truth(_eval(c, values)) for c in node.children)
    operands = [_eval(c, values) for c in node.children]
    return all(_COMPARE[op](a, b) for op, a, b in zip(node.value, operands, operands[1:]))


def rollout_values(rollout: Any) -> dict[str, float]:
    """The names a filter can use for one rollout: its metrics, rewards, `reward`, `truncated`."""
    return {
        **{k: float(v) for k, v in rollout.metrics.items()},
        **{k: float(v) for k, v in rollout.rewards.items()},
        "reward": float(rollout.reward),
        "truncated": float(rollout.truncated),
    }
