"""Judge rewards: ask a model whether a completion answers the question, given the reference.

    judge = judge_reward(client)                  # any ChatClient: OpenAI-compatible, local, Policy
    rubric = Rubric([exact_match, judge], weights=[0.5, 0.5], parser=parser)

The judge sees the question (the last user message of the prompt), the reference answer and
the response (the parser's answer field when the rubric has a parser and it finds one, else
the last assistant message), and must reply with exactly one `<verdict>yes</verdict>` or
`<verdict>no</verdict>` (a leading `<think>` block is ignored). Anything else is *unparsed*:
logged on the `rlvr.judge` logger and scored 0. `judge.stats` counts `yes`, `no`, `unparsed`
and `no_response` (nothing to judge: scored 0 without a call).

Judge calls run concurrently: the engine scores each rollout as soon as it finishes, and a
judge allows `max_concurrency` calls in flight. A judge client that fails for good raises,
which turns that rollout into a `RewardError` record: never a silent 0.

`reference_judge()` is a `Policy` judge for tests and offline runs: it says yes when the
normalised response equals the normalised reference.
"""

from __future__ import annotations

import asyncio
import logging
import random
import re
from collections import Counter
from typing import Any

from rlvr.clients.base import ChatClient
from rlvr.clients.policy import Policy
from rlvr.errors import UsageError
from rlvr.parsers import assistant_texts
from rlvr.types import Messages, SamplingArgs

log = logging.getLogger("rlvr.judge")

JUDGE_PROMPT = """You are grading an answer to a question.

Question:
{question}

Reference answer:
{answer}

Response to grade:
{response}

Does the response give the same answer as the reference? Wording, capitalisation and formatting \
may differ; the substance may not. Reply with exactly <verdict>yes</verdict> or <verdict>no</verdict>."""

_VERDICT = re.compile(r"<verdict>\s*(yes|no)\s*</verdict>", re.IGNORECASE)
_THINK = re.compile(r"^\s*<think>.*?</think>", re.DOTALL)


def parse_verdict(text: str) -> bool | None:
    """True for yes, False for no, None when the reply is not exactly one verdict.

    >>> parse_verdict("<verdict>yes</verdict>"), parse_verdict("The answer matches. <verdict> No </verdict>")
    (True, False)
    >>> parse_verdict("yes"), parse_verdict("<verdict>yes</verdict><verdict>no</verdict>"), parse_verdict("<verdict>maybe</verdict>")
    (None, None, None)
    """
    text = _THINK.sub("", text)
    found = _VERDICT.findall(text)
    if len(found) != 1 or text.lower().count("<verdict>") != 1 or text.lower().count("</verdict>") != 1:
        return None
    return found[0].lower() == "yes"


def _question(prompt: Messages) -> str:
    return next((str(m.get("content") or "") for m in reversed(prompt) if m.get("role") == "user"), "")


class Judge:
    """A reward function (async) that asks `client` for a verdict; see the module docstring."""

    def __init__(
        self,
        client: ChatClient,
        *,
        name: str = "judge_reward",
        prompt: str = JUDGE_PROMPT,
        sampling: SamplingArgs | None = None,
        max_concurrency: int = 16,
    ) -> None:
        for field in ("{question}", "{answer}", "{response}"):
            if field not in prompt:
                raise UsageError(f"the judge prompt must contain {field}, got {prompt[:80]!r}...")
        if max_concurrency < 1:
            raise UsageError(f"max_concurrency must be >= 1, got {max_concurrency}")
        self.client = client
        self.__name__ = name
        self.prompt = prompt
        self.sampling = sampling or SamplingArgs(temperature=0.0, seed=0)
        self.max_concurrency = max_concurrency
        self.stats: Counter[str] = Counter()
        self._gates: dict[asyncio.AbstractEventLoop, asyncio.Semaphore] = {}

    def _gate(self) -> asyncio.Semaphore:
        loop = asyncio.get_running_loop()
        if loop not in self._gates:
            self._gates = {loop: asyncio.Semaphore(self.max_concurrency)}  # one loop at a time
        return self._gates[loop]

    async def __call__(self, prompt: Messages, completion: Messages, answer: str | None, parser: Any) -> float:
        response = parser.parse_answer(completion) if parser is not None else None
        if response is None:
            texts = [t for t in assistant_texts(completion) if t.strip()]
            response = texts[-1] if texts else None
        if not response or not response.strip():
            self.stats["no_response"] += 1
            return 0.0
        text = self.prompt.format(question=_question(prompt), answer=answer or "", response=response.strip())
        async with self._gate():
            reply = await self.client.chat([{"role": "user", "content": text}], self.sampling)
        verdict = parse_verdict(reply.text)
        if verdict is None:
            self.stats["unparsed"] += 1
            log.warning(
                "%s: unparsed verdict from %s (scored 0): %r",
                self.__name__,
                getattr(self.client, "name", "judge"),
                reply.text[:300],
            )
            return 0.0
        self.stats["yes" if verdict else "no"] += 1
        return 1.0 if verdict else 0.0


def judge_reward(client: ChatClient, **kwargs: Any) -> Judge:
    """A judge reward function for a `Rubric` (keyword arguments: see `Judge`)."""
    return Judge(client, **kwargs)


def _normalize(text: str) -> str:
    words = re.sub(r"[^\w\s]", "", text.lower()).split()
    return " ".join(words[1:] if words and words[0] in ("the", "a", "an") else words)


def _reference_verdict(messages: Messages, rng: random.Random) -> str:
    text = str(messages[-1].get("content") or "")
    found = re.search(r"Reference answer:\n(.*?)\n\nResponse to grade:\n(.*?)\n\nDoes the response", text, re.DOTALL)
    if found is None:
        return "I cannot find the reference and the response in this prompt."
    same = _normalize(found[1]) == _normalize(found[2])
    return f"<verdict>{'yes' if same else 'no'}</verdict>"


def reference_judge() -> Policy:
    """A judge that says yes when the normalised response equals the normalised reference
    (for tests and offline runs; it reads the default `JUDGE_PROMPT` layout)."""
    return Policy(_reference_verdict, name="reference_judge")
