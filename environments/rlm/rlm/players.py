"""Reference players: `oracle` solves every question, in both modes; `guess` answers at once.

The oracle recognises the question's template (wiki_search's grammar is public). In the REPL
mode it writes one cell that, for each page to read, cuts the page out of `context` by its
title and asks `llm_query` for the fact ("reply with only the city that completes this
sentence of the page: ..."); the cell prints the last answer, and the next turn is
`FINAL(answer)`. The same function answers those sub-queries (it is the rollout's own client,
the default sub-model) from the page in the prompt alone, with wiki_search's fact patterns.
In the long-prompt mode it reads the context in its prompt the same way and answers at once: a
model with an unbounded window and perfect recall.
"""

from __future__ import annotations

import json
import random
import re

from wiki_search.articles import FACTS
from wiki_search.questions import fact_pattern, parse_question

from rlm.corpus import page_text
from rlvr.types import Messages

SUB_QUERY = re.compile(
    r"^Reply with only the (?P<field>\w+) that completes this sentence of the page: (?P<fact>\".+?\")\n"
)
_QUESTION = re.compile(r"^Question: (?P<q>.+)$", re.MULTILINE)

CELL = """\
name = {subject}
for field, sentence in {reads}:
    page = ("\\n" + context).split("\\n# " + name + "\\n", 1)[1].split("\\n# ", 1)[0]
    name = llm_query(f"Reply with only the {{field}} that completes this sentence of the page: "
                     f"{{json.dumps(sentence)}}\\n\\n# {{name}}\\n{{page}}").strip()
    print(name)
"""


def sub_query(prompt: str) -> str | None:
    """A sub-query the oracle wrote, answered from the page in it; None for any other prompt.

    >>> sub_query('Reply with only the year that completes this sentence of the page: '
    ...           '"{title} is a {kind} by {creator}, completed in {year}."\\n\\n# X\\n## Overview\\n'
    ...           'X is a novel by Ada Kerr, completed in 1901.')
    '1901'
    """
    found = SUB_QUERY.match(prompt)
    if found is None:
        return None
    sentence, field = json.loads(found["fact"]), found["field"]
    fact = next((key for key, text in FACTS.items() if text == sentence), None)
    value = fact_pattern(fact, field).search(prompt[found.end() :]) if fact else None
    return value[field] if value else "unknown"


def _first_user(messages: Messages) -> str:
    return next((str(m.get("content") or "") for m in messages if m.get("role") == "user"), "")


def oracle_policy(messages: Messages, rng: random.Random) -> str:
    """The oracle's next message (see the module docstring)."""
    prompt = _first_user(messages)
    answered = sub_query(prompt)
    if answered is not None:
        return answered
    question = _QUESTION.findall(prompt)
    parsed = parse_question(question[-1]) if question else None
    if parsed is None:
        return "FINAL(unknown)"
    template, subject = parsed
    if "\n# " in prompt:  # long-prompt mode: the context is in the prompt
        name: str | None = subject
        for _, fact, field in template.reads:
            page = page_text(prompt, name) if name else None
            value = fact_pattern(fact, field).search(page) if page else None
            name = value[field] if value else None
        return f"FINAL({name or 'unknown'})"
    first = next((i for i, m in enumerate(messages) if m.get("role") == "assistant"), len(messages))
    outputs = [str(m.get("content") or "") for m in messages[first:] if m.get("role") == "user"]
    if not outputs:
        reads = [(field, FACTS[fact]) for _, fact, field in template.reads]
        return "```python\nimport json\n" + CELL.format(subject=json.dumps(subject), reads=reads) + "```"
    last = [line for line in outputs[-1].splitlines() if line.strip() and not line.startswith("[")]
    return f"FINAL({last[-1].strip() if last else 'unknown'})"


def guess_policy(messages: Messages, rng: random.Random) -> str:
    """Answers at once without reading: a plausible year, or a shrug."""
    question = _QUESTION.findall(_first_user(messages))
    if question and question[-1].startswith("In what year"):
        return f"FINAL({rng.randint(1750, 2000)})"
    return "FINAL(unknown)"
