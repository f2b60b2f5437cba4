"""Reverse text: reverse a paragraph character by character (single turn).

The model gets a paragraph and answers with its character-by-character reversal inside
`<reversed_text>` tags (an optional `<think>` block may come first). Paragraphs are generated
offline from a seed: sentences of words drawn from a small built-in word list, so the same
arguments always give the same tasks and nothing is downloaded.

Rewards:

    lcs_reward     weight 1   2 * LCS(answer, reversal) / (len(answer) + len(reversal)), the
                              longest-common-subsequence ratio: 1 for an exact reversal, lower
                              for missing *and* for extra characters; 0 without an answer.
    format_reward  weight 0   (`format_weight` to change) 1 when the reply is exactly the
                              fields, nothing outside them. A metric by default: the answer is
                              read only from the tags anyway, and a total reward in [0, 1]
                              reads as "share of the reversal recovered".

Reference players (`-m policy:NAME`): `oracle` reverses the paragraph it reads from the prompt
(reward 1); `echo` copies the paragraph unreversed (a bad player, reward well below 1).
"""

from __future__ import annotations

import functools
import random
from collections.abc import Callable

from rlvr import Messages, Policy, Rubric, SamplingArgs, SingleTurnEnv, Task, XMLParser
from rlvr.clients.base import ChatClient
from rlvr.deprecation import renamed_arguments
from rlvr.errors import UsageError

__all__ = ["ReverseTextEnv", "lcs_length", "lcs_ratio", "load_environment", "make_paragraph"]

_WORD_LIST = """
the a one two small large old new red green blue quiet loud quick slow bright dark warm cold
river mountain forest garden village city road bridge window door table chair lamp book letter
story song picture morning evening night winter summer autumn spring rain snow wind cloud sun
moon star stone tree flower leaf bird fish horse dog cat friend teacher farmer sailor baker
child family neighbour stranger king queen walks runs sings reads writes builds paints carries
finds keeps opens closes watches follows remembers forgets waits listens answers asks brings
and but or so because while after before under over near across through behind beside with
without into from towards every many few some always never often sometimes slowly softly
together again almost already still very gently early late
"""
WORDS = _WORD_LIST.split()

SYSTEM_PROMPT = (
    "Reverse the text the user sends, character by character: the last character comes first. "
    "Keep every character, spaces and punctuation included. You may think inside "
    "<think>...</think> first; then give the reversed text inside "
    "<reversed_text>...</reversed_text>, and nothing else."
)


def make_paragraph(rng: random.Random, num_words: int) -> str:
    """A paragraph of `num_words` words: capitalised sentences of 4-12 words, punctuated.

    >>> make_paragraph(random.Random(0), 6) == make_paragraph(random.Random(0), 6)
    True
    >>> len(make_paragraph(random.Random(1), 30).split())
    30
    """
    sentences, left = [], num_words
    while left > 0:
        n = min(left, rng.randint(4, 12))
        words = [rng.choice(WORDS) for _ in range(n)]
        if n >= 6 and rng.random() < 0.3:
            words[rng.randrange(1, n - 2)] += ","
        words[0] = words[0].capitalize()
        sentences.append(" ".join(words) + rng.choice(".....?!"))
        left -= n
    return " ".join(sentences)


def lcs_length(a: str, b: str) -> int:
    """Length of the longest common subsequence of `a` and `b`.

    The textbook O(len(a) * len(b)) dynamic programme, with each row of its table held as the
    bits of one Python integer (bit-parallel LCS: Allison & Dix 1986, Hyyro 2004). Bit j of
    `row` is 0 where the row steps up by one, so the LCS length is the number of 0 bits. One
    character of `a` updates a whole row with a few big-integer operations, about 64 cells per
    machine step: a 16,000-character answer against a 250-character reversal takes ~2 ms
    instead of ~0.5 s with Python loops, so a runaway answer cannot stall the event loop that
    scores rollouts. tests/ checks it against the plain two-loop version.

    >>> lcs_length("ABCBDAB", "BDCABA")
    4
    >>> lcs_length("abc", ""), lcs_length("same", "same"), lcs_length("abc", "xyz")
    (0, 4, 0)
    """
    positions: dict[str, int] = {}
    for j, ch in enumerate(b):
        positions[ch] = positions.get(ch, 0) | (1 << j)  # where ch occurs in b
    row = full = (1 << len(b)) - 1
    for ch in a:
        matches = row & positions.get(ch, 0)
        row = ((row + matches) | (row - matches)) & full
    return len(b) - row.bit_count()


def lcs_ratio(a: str, b: str) -> float:
    """2 * LCS / (len(a) + len(b)): 1 for equal strings, 0 when nothing is shared (or one is
    empty and the other not). Symmetric; it penalises missing and extra characters alike.

    >>> lcs_ratio("olleh", "olleh"), lcs_ratio("", "")
    (1.0, 1.0)
    >>> lcs_ratio("abcd", "abxd")   # LCS "abd": 2 * 3 / 8
    0.75
    >>> lcs_ratio("ab", "abab")     # LCS "ab": 2 * 2 / 6
    0.6666666666666666
    """
    if not a and not b:
        return 1.0
    return 2 * lcs_length(a, b) / (len(a) + len(b))


def lcs_reward(completion: Messages, answer: str | None, parser: XMLParser) -> float:
    """LCS ratio of the `<reversed_text>` answer with the true reversal; 0 without an answer.

    >>> p = XMLParser(["think", "reversed_text"], optional=["think"])
    >>> lcs_reward([{"role": "assistant", "content": "<reversed_text>cba</reversed_text>"}], "cba", p)
    1.0
    >>> lcs_reward([{"role": "assistant", "content": "cba"}], "cba", p)
    0.0
    """
    given = parser.parse_answer(completion)
    if given is None or answer is None:
        return 0.0
    return lcs_ratio(given, answer)


def format_reward(completion: Messages, parser: XMLParser) -> float:
    """1 when the reply is exactly `[<think>] <reversed_text>`, nothing else around them."""
    return parser.format_reward(completion)


def _paragraph_of(messages: Messages) -> str:
    return next((str(m.get("content") or "") for m in reversed(messages) if m.get("role") == "user"), "")


def oracle_policy(messages: Messages, rng: random.Random) -> str:
    """Reverses the paragraph of the last user message: the best possible reply."""
    return f"<reversed_text>\n{_paragraph_of(messages)[::-1]}\n</reversed_text>"


def echo_policy(messages: Messages, rng: random.Random) -> str:
    """Returns the paragraph as it came, well formatted but unreversed: a bad player."""
    return f"<reversed_text>\n{_paragraph_of(messages)}\n</reversed_text>"


class ReverseTextEnv(SingleTurnEnv):
    """Single-turn reversal; see the module docstring."""

    def policies(self) -> dict[str, Callable[[], ChatClient]]:
        return {
            "oracle": functools.partial(Policy, oracle_policy, name="oracle"),
            "echo": functools.partial(Policy, echo_policy, name="echo"),
        }


def make_tasks(split: str, count: int, seed: int, min_words: int, max_words: int) -> list[Task]:
    """`count` tasks of one split. Task i depends only on (seed, split, i, word range), so a
    larger `count` extends the list without changing its first tasks."""
    tasks = []
    for i in range(count):
        rng = random.Random(f"reverse_text:{seed}:{split}:{i}")
        text = make_paragraph(rng, rng.randint(min_words, max_words))
        tasks.append(
            Task(
                id=f"{split}-{i}",
                question=text,
                answer=text[::-1],
                info={"words": len(text.split())},
                seed=rng.getrandbits(31),
            )
        )
    return tasks


@renamed_arguments(num_examples="num_tasks", num_eval_examples="eval_tasks")
def load_environment(
    num_tasks: int = 1000,
    eval_tasks: int = 100,
    seed: int = 0,
    min_words: int = 8,
    max_words: int = 40,
    format_weight: float = 0.0,
    max_tokens: int = 512,
) -> ReverseTextEnv:
    """The reverse-text environment.

    Args:
        num_tasks: training tasks.
        eval_tasks: held-out evaluation tasks (a separate seeded stream).
        seed: dataset seed; same arguments, same tasks.
        min_words: fewest words in a paragraph.
        max_words: most words in a paragraph.
        format_weight: weight of `format_reward` in the total (0: a logged metric only).
        max_tokens: most tokens in the reply (a 40-word reversal takes about 300 characters;
            the rest leaves room for a short think). Sent with every request: a server's own
            default (transformers serve: 1,024 tokens) would otherwise decide.
    """
    if num_tasks < 1 or eval_tasks < 1:
        raise UsageError(f"num_tasks and eval_tasks must be >= 1, got {num_tasks}, {eval_tasks}")
    if not 1 <= min_words <= max_words:
        raise UsageError(f"need 1 <= min_words <= max_words, got min_words={min_words}, max_words={max_words}")
    parser = XMLParser(["think", "reversed_text"], optional=["think"])
    rubric = Rubric([lcs_reward, format_reward], weights=[1.0, format_weight], parser=parser)
    return ReverseTextEnv(
        make_tasks("train", num_tasks, seed, min_words, max_words),
        eval_dataset=make_tasks("eval", eval_tasks, seed, min_words, max_words),
        system_prompt=SYSTEM_PROMPT,
        parser=parser,
        rubric=rubric,
        sampling=SamplingArgs(max_tokens=max_tokens),
    )
