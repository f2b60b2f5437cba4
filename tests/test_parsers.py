from __future__ import annotations

import math
import random
import re
import time

import pytest

from rlvr.errors import ParseError
from rlvr.parsers import ThinkParser, XMLParser

P = XMLParser(["think", "move"], optional=["think"])
STRICT = XMLParser(["think", "move"])


@pytest.mark.parametrize(
    ("text", "optional_ok", "strict_ok"),
    [
        ("<think>centre</think>\n<move>4</move>", True, True),
        ("<move>4</move>", True, False),  # think missing: allowed only when optional
        ("  <think>a</think><move>4</move>\n", True, True),
        ("<think>a</think><move>4</move> done", False, False),  # trailing text
        ("I pick <think>a</think><move>4</move>", False, False),  # leading text
        ("<think>a</think><move>4</move><move>5</move>", False, False),  # two moves
        ("<think>a <move>4</move></think>", False, False),  # move nested in think
        ("<think>a<move>4</move>", False, False),  # unclosed think
        ("<think>a</think><move>4", False, False),  # unclosed move
        ("<move>4</move><think>a</think>", False, False),  # wrong order
        ("the move tag is what I use", False, False),  # mentions a tag name only
        ("<think>a</think></move><move>4</move>", False, False),  # stray closing tag
        ("<think></think><move>4</move>", False, False),  # empty field
        ("<think>a</think><move></move>", False, False),
    ],
)
def test_format_is_strict(text: str, optional_ok: bool, strict_ok: bool) -> None:
    assert P.is_formatted(text) is optional_ok
    assert STRICT.is_formatted(text) is strict_ok


def test_parse_answer_takes_the_last_top_level_field() -> None:
    assert P.parse_answer("<move>1</move> no wait <move>7</move>") == "7"
    assert P.parse_answer("<think>maybe <move>3</move></think><move>5</move>") == "5"
    assert P.parse_answer("<think>maybe <move>3</move></think>") is None  # inside think only
    assert P.parse_answer("<think>hmm <move> 8 </move>") == "8"  # lenient parse of an unclosed think
    assert P.parse_answer("no tags") is None


def test_parse_answer_reads_the_last_assistant_turn_that_answers() -> None:
    messages = [
        {"role": "user", "content": "<move>0</move>"},
        {"role": "assistant", "content": "<move>1</move>"},
        {"role": "user", "content": "again"},
        {"role": "assistant", "content": "no idea"},
    ]
    assert P.parse_answer(messages) == "1"


def test_format_reward_is_share_of_assistant_turns() -> None:
    messages = [
        {"role": "assistant", "content": "<think>x</think><move>1</move>"},
        {"role": "user", "content": "bad"},
        {"role": "assistant", "content": "<move>2</move> oops"},
        {"role": "assistant", "content": "<move>3</move>"},
    ]
    assert P.format_reward(messages) == pytest.approx(2 / 3)
    assert STRICT.format_reward(messages) == pytest.approx(1 / 3)
    assert P.format_reward([]) == 0.0


def test_bad_specs_are_rejected() -> None:
    with pytest.raises(ParseError):
        XMLParser([])
    with pytest.raises(ParseError):
        XMLParser(["a b"])
    with pytest.raises(ParseError):
        XMLParser(["a"], optional=["b"])
    with pytest.raises(ParseError):
        XMLParser(["a"], answer_field="c")


def test_the_scanner_uses_no_possessive_quantifier() -> None:
    """Python 3.11.2 (Debian 12's python3) matched `(?:...)*+` wrongly: `<think>2+2</think>`
    read as a field with no content, so every reply of that shape was ill-formatted. The suite
    runs on a later 3.11 where the same pattern works, so the tests above cannot see it; this
    one looks at the patterns themselves (a possessive quantifier is `*+`, `++`, `?+` or `}+`
    outside a character class)."""
    parser = XMLParser(["think", "move"], optional=["think"])
    parser.parse("<think>a</think><move>4</move><move>5")  # builds the scanners it needs
    assert parser._scanners
    for scanner in parser._scanners.values():
        outside_classes = re.sub(r"\[(?:\\.|[^\]])*\]", "", scanner.pattern)
        assert not re.search(r"(?<!\\)[*+?}]\+", outside_classes), scanner.pattern


def test_think_parser() -> None:
    tp = ThinkParser()
    assert tp.parse_answer("<think>2+2</think> 4") == "4"
    assert tp.is_formatted("<think>2+2</think> 4")
    assert not tp.is_formatted("4")
    assert not tp.is_formatted("<think>a</think> 4 <think>b</think>")
    assert not tp.is_formatted("<think>a</think>")


# ---- hostile replies: linear time, and the same reading as the plain quadratic algorithm --------


def _reference_parse(parser: XMLParser, text: str) -> tuple[list[tuple[str, str]], bool, str]:
    """The rules of the module docstring, read the obvious (quadratic) way: each opening tag
    looks ahead for its closing tag."""
    tags = list(re.finditer("<(/?)(" + "|".join(parser.fields) + ")>", text))
    elements, outside, well_formed, pos, i = [], [], True, 0, 0
    while i < len(tags):
        tag = tags[i]
        outside.append(text[pos : tag.start()])
        end = None
        if not tag.group(1):
            end = next((j for j in range(i + 1, len(tags)) if tags[j].group(0) == f"</{tag.group(2)}>"), None)
        if end is None:  # a stray closing tag, or an opening tag never closed
            well_formed = False
            outside.append(tag.group(0))
            pos, i = tag.end(), i + 1
            continue
        well_formed &= end == i + 1
        elements.append((tag.group(2), text[tag.end() : tags[end].start()].strip()))
        pos, i = tags[end].end(), end + 1
    outside.append(text[pos:])
    return elements, well_formed, "".join(outside).strip()


def test_parse_agrees_with_the_plain_reading_on_random_tag_soup() -> None:
    rng = random.Random(0)
    pieces = ["<think>", "</think>", "<move>", "</move>", "<mo", "ve>", "<", ">", "/", "x", " ", "4", "\n"]
    for _ in range(3000):
        text = "".join(rng.choice(pieces) for _ in range(rng.randint(0, 14)))
        parsed = P.parse(text)
        got = ([(e.name, e.content) for e in parsed.elements], parsed.well_formed, parsed.outside_text)
        assert got == _reference_parse(P, text), text


@pytest.mark.parametrize(
    "unit",
    [
        "<move>",
        "<think><move>",
        "</move>",
        "<move></move>",
        "<think>x</think><move>",
        "<think><move></think>",
        "<<move>",
    ],
)
def test_a_megabyte_of_hostile_tags_parses_in_linear_time(unit: str) -> None:
    """Unclosed tags made parsing quadratic: 48 KB of `<move>` took 16 s, in the event loop.
    Four times the text must take well under 16 times as long (linear: about 4x), and 1 MB
    under a second. (An absolute bound of 100 ms failed at 105-129 ms on a 2-core machine whose
    other core was busy: CPU time still grows when a neighbour shares the caches.)"""

    def seconds(size: int) -> float:
        text = unit * (size // len(unit))
        best = math.inf
        for _ in range(3):  # CPU time, best of 3: other processes on the machine count less
            t0 = time.process_time()
            P.parse(text)
            best = min(best, time.process_time() - t0)
        return best

    small, large = seconds(2**18), seconds(2**20)
    assert large < 1.0, f"{large * 1000:.0f} ms to parse 1 MB of {unit!r}"
    assert large < 8 * small + 0.010, f"1 MB of {unit!r}: {large * 1000:.0f} ms, 256 KB: {small * 1000:.0f} ms"
