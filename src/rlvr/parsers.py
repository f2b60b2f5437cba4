"""Parsers: pull tagged fields out of completions, and judge their format strictly.

`XMLParser(["think", "move"])` reads replies such as `<think>...</think><move>4</move>`.
Parsing is lenient (take what can be read, the *last* top-level field wins); the format check
is strict: every field closed, none nested in another, nothing but whitespace outside them,
fields in the declared order, each at most once. A reply that merely mentions a tag name, or
leaves a tag open, gets no format credit.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from rlvr.errors import ParseError
from rlvr.types import Messages

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_\-]*$")


class Parser(Protocol):
    """What environments and rubrics need from a parser."""

    def parse_answer(self, completion: str | Messages) -> str | None: ...

    def format_reward(self, completion: str | Messages) -> float: ...


@dataclass
class Element:
    name: str
    content: str


@dataclass
class Parsed:
    """The top-level fields of one reply, in order, and whether it was well formed."""

    elements: list[Element] = field(default_factory=list)
    well_formed: bool = True
    """All tags closed, none nested in another field, no stray closing tag."""
    outside_text: str = ""
    """Non-whitespace text found outside every field."""

    def last(self, name: str) -> str | None:
        for el in reversed(self.elements):
            if el.name == name:
                return el.content
        return None


def assistant_texts(completion: str | Messages) -> list[str]:
    """The text of every assistant turn (a plain string counts as one turn)."""
    if isinstance(completion, str):
        return [completion]
    return [str(m.get("content") or "") for m in completion if m.get("role") == "assistant"]


class XMLParser:
    """Reads `<field>...</field>` blocks; see the module docstring for the rules.

    >>> p = XMLParser(["think", "move"], optional=["think"])
    >>> p.parse_answer("<think>centre is best</think>\\n<move>4</move>")
    '4'
    >>> p.is_formatted("<move>4</move> because"), p.is_formatted("<think>x<move>4</move>")
    (False, False)
    """

    def __init__(
        self,
        fields: Sequence[str],
        *,
        answer_field: str | None = None,
        optional: Sequence[str] = (),
    ) -> None:
        if not fields:
            raise ParseError("XMLParser needs at least one field name, got none")
        for name in fields:
            if not _NAME.match(name):
                raise ParseError(f"field name {name!r} is not a valid tag name (letters, digits, _ or -)")
        unknown = set(optional) - set(fields)
        if unknown:
            raise ParseError(f"optional fields {sorted(unknown)} are not among fields {list(fields)}")
        self.fields = list(fields)
        self.optional = set(optional)
        self.answer_field = answer_field or self.fields[-1]
        if self.answer_field not in self.fields:
            raise ParseError(f"answer_field {self.answer_field!r} is not among fields {self.fields}")
        self._fields_pattern = "|".join(re.escape(f) for f in self.fields)
        self._any_tag = re.compile(f"</?(?:{self._fields_pattern})>")
        self._scanners: dict[frozenset[str], re.Pattern[str]] = {}

    def parse(self, text: str) -> Parsed:
        """Split one reply into its top-level fields.

        Linear in the length of the reply, whatever it holds (a reply of a million unclosed
        tags must not stall the event loop): a field with no other tag inside is read by one
        regular expression match; each field's closing tag is searched for once per field read
        otherwise, and a field left open for good is not looked for again.
        """
        out = Parsed()
        outside: list[str] = []
        elements = out.elements
        alive = frozenset(self.fields)  # fields that may still have a closing tag ahead
        scanner = self._scanner(alive)
        found: dict[str, int] = {}  # where each field's next closing tag was last found
        pos = 0  # end of the last field read
        at: int | None = 0  # where to look for the next one (None: nowhere)
        while at is not None:
            start_at, at = at, None
            for tag in scanner.finditer(text, start_at):
                (name, content), start = tag.group(1, 2), tag.start()
                if content is not None:  # <name>text</name>, no other tag inside: the common case
                    outside.append(text[pos:start])
                    elements.append(Element(name, content.strip()))
                    pos = tag.end()
                    continue
                end = start + len(name) + 2
                close = found.get(name, -1)
                if close < end:
                    close = found[name] = text.find(f"</{name}>", end)
                if close < 0:  # never closed from here on: its opening tags stay outside text
                    alive -= {name}
                    if alive:
                        scanner, at = self._scanner(alive), end
                    break
                out.well_formed = False  # another field's tag inside this one
                outside.append(text[pos:start])
                elements.append(Element(name, text[end:close].strip()))
                pos = at = close + len(name) + 3
                break
        outside.append(text[pos:])
        # a tag outside every field is an unclosed opening tag or a stray closing tag
        if self._any_tag.search("\0".join(outside)):  # (NUL: no tag forms across two parts)
            out.well_formed = False
        out.outside_text = "".join(outside).strip()
        return out

    def _scanner(self, names: frozenset[str]) -> re.Pattern[str]:
        """Matches an opening tag of `names`, with (group 2) its content and closing tag when no
        tag of any field comes first. Atomic, so it never backtracks: the content is taken whole
        inside a lookahead (a lookahead keeps no backtracking points), then consumed by `\\2`.
        Not the possessive `*+` of Python 3.11: 3.11.2 (Debian 12's python3) matched
        `<think>2+2</think>` with no content through it, which made every reply ill-formatted."""
        if names not in self._scanners:
            opening = "|".join(re.escape(f) for f in sorted(names))
            content = f"(?:[^<]+|<(?!/?(?:{self._fields_pattern})>))*"
            self._scanners[names] = re.compile(f"<({opening})>(?:(?=({content}))\\2</\\1>)?")
        return self._scanners[names]

    def is_formatted(self, text: str) -> bool:
        """True when the reply is exactly the declared fields, in order, nothing else."""
        parsed = self.parse(text)
        if not parsed.well_formed or parsed.outside_text:
            return False
        names = [el.name for el in parsed.elements]
        expected = [f for f in self.fields if f in names or f not in self.optional]
        return names == expected and all(el.content for el in parsed.elements)

    def parse_answer(self, completion: str | Messages) -> str | None:
        """The answer field of the last assistant turn that has one (its last occurrence)."""
        for text in reversed(assistant_texts(completion)):
            value = self.parse(text).last(self.answer_field)
            if value is not None:
                return value
        return None

    def format_reward(self, completion: str | Messages) -> float:
        """Share of assistant turns that are well formatted (0 when there are none)."""
        texts = assistant_texts(completion)
        if not texts:
            return 0.0
        return sum(self.is_formatted(t) for t in texts) / len(texts)

    def format_instructions(self) -> str:
        """A sentence for the system prompt describing the expected format."""
        parts = [f"<{f}>...</{f}>" + (" (optional)" if f in self.optional else "") for f in self.fields]
        return "Reply with " + ", then ".join(parts) + ", and nothing else."


class ThinkParser:
    """Reasoning in one leading `<think>...</think>` block, then the answer as plain text.

    >>> ThinkParser().parse_answer("<think>2+2</think> 4")
    '4'
    """

    def __init__(self) -> None:
        self._xml = XMLParser(["think"])

    def split(self, text: str) -> tuple[str | None, str]:
        stripped = text.lstrip()
        if stripped.startswith("<think>") and "</think>" in stripped:
            head, _, tail = stripped.partition("</think>")
            return head[len("<think>") :].strip(), tail.strip()
        return None, text.strip()

    def parse_answer(self, completion: str | Messages) -> str | None:
        texts = assistant_texts(completion)
        if not texts:
            return None
        _, answer = self.split(texts[-1])
        return answer or None

    def is_formatted(self, text: str) -> bool:
        thought, answer = self.split(text)
        if thought is None or not answer:
            return False
        head = text[: text.index("</think>") + len("</think>")]
        return self._xml.is_formatted(head) and "<think>" not in answer and "</think>" not in answer

    def format_reward(self, completion: str | Messages) -> float:
        texts = assistant_texts(completion)
        return sum(self.is_formatted(t) for t in texts) / len(texts) if texts else 0.0
