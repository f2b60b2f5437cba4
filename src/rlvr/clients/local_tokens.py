"""Prompt ids of conversations that grow turn by turn, tokenizing only what each turn adds.

`LocalModel.render` turns messages into prompt ids: the chat template's text (with the
generation prompt), tokenized. In a multi-turn game each prompt is the previous prompt plus the
model's reply and the environment's answer, and tokenizing the whole text again every turn is
most of the cost (a tic-tac-toe prompt of ~390 tokens: ~70 us to render, ~520 us to tokenize).

`PromptTokens.ids` keeps each conversation it tokenized (its messages, rendered text, ids, and
where in both each *added token* starts: `<|im_start|>`, `<|im_end|>`, `<think>` ...). A new
conversation whose messages extend a kept one is rendered whole (the template must see it all),
then tokenized from a cut only: the last added token of the kept text that the new text still
has, with all the text before it identical. The result equals tokenizing the whole text because
a fast tokenizer splits its input at added tokens before anything else (normalizing and
pre-tokenizing each piece on its own, none at offset 0 after the first), so the ids before an
added token depend only on the text before it. Checked at every turn:

- the new text starts with the kept text up to the end of the cut token (a template that
  rewrites earlier turns, e.g. Qwen3 dropping the reasoning of earlier replies, or a generation
  prompt the next render does not repeat, fails it at that turn: an earlier cut is tried, and
  failing all, the whole text is tokenized);
- the piece tokenized from the cut starts with that same added token's id.

A slow (Python) tokenizer is always tokenized whole. Equal messages (the rollouts of one GRPO
group share their prompt) are rendered once. Entries are kept by messages, tools and whether the
generation prompt is on (`LocalModel.give` renders a reply without it), least
recently used dropped first. `stats` counts renders and the characters tokenized.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from rlvr.clients.local_load import encodable
from rlvr.types import Messages

ENTRIES = 4096
"""Conversations kept (least recently used dropped first)."""


@dataclass(frozen=True)
class Rendered:
    """One conversation's prompt: its text (lone surrogates replaced), its ids, and its cuts:
    `(start, end, index)` of each added token, its characters in `text` and its place in `ids`."""

    text: str
    ids: tuple[int, ...]
    cuts: tuple[tuple[int, int, int], ...]


@dataclass
class TokenStats:
    """What `PromptTokens` did: template renders, prompts from a kept render (`repeats`), from
    a cut (`extended`) or tokenized whole (`whole`), and the characters it tokenized."""

    renders: int = 0
    repeats: int = 0
    extended: int = 0
    whole: int = 0
    chars: int = 0


class PromptTokens:
    """Prompt ids of chats (`ids`), equal to tokenizing the whole render, computed from the
    longest kept conversation that the chat extends."""

    def __init__(self, tokenizer: Any, *, entries: int = ENTRIES, incremental: bool = True) -> None:
        self.tokenizer = tokenizer
        self.entries = entries
        self.incremental = incremental and bool(getattr(tokenizer, "is_fast", False))
        self.added = frozenset(int(i) for i in getattr(tokenizer, "added_tokens_decoder", {}))
        self.stats = TokenStats()
        self._kept: OrderedDict[tuple[Any, ...], Rendered] = OrderedDict()

    def ids(
        self, messages: Messages, tools: list[dict[str, Any]] | None = None, *, generation_prompt: bool = True
    ) -> list[int]:
        """The chat template's text of `messages` (with the generation prompt, unless told not
        to: a given reply's render, which extends its prompt's), tokenized."""
        keys = _keys(messages, tools, generation_prompt)
        if keys is not None and (hit := self._kept.get(keys)) is not None:
            self._kept.move_to_end(keys)
            self.stats.repeats += 1
            return list(hit.ids)
        text = self.tokenizer.apply_chat_template(
            messages, tools=[*tools] if tools else None, add_generation_prompt=generation_prompt, tokenize=False
        )
        self.stats.renders += 1
        text = encodable(text)  # lone surrogates as U+FFFD, which the tokenizer refuses
        rendered = None
        if keys is not None and self.incremental:
            rendered = self._extend(keys, text)
        if rendered is None:
            self.stats.whole += 1
            rendered = self._whole(text)
        if keys is not None:
            self._kept[keys] = rendered
            if len(self._kept) > self.entries:
                self._kept.popitem(last=False)
        return list(rendered.ids)

    def _extend(self, keys: tuple[Any, ...], text: str) -> Rendered | None:
        """`text` tokenized from a cut of the longest kept conversation it extends, or None."""
        tools, *chat = keys  # a prompt (with the generation prompt) that the chat extends
        for n in range(len(chat) - (tools[0] == "+"), 0, -1):
            kept = self._kept.get(prefix := ("+" + tools[1:], *chat[:n]))
            if kept is None:
                continue
            self._kept.move_to_end(prefix)
            for start, end, index in reversed(kept.cuts):
                if text.startswith(kept.text[:end]):
                    self.stats.chars += len(text) - start
                    tail = self._encode(text[start:])
                    if tail is None or not tail[0] or tail[0][0] != kept.ids[index]:
                        return None
                    self.stats.extended += 1
                    ids, offsets = tail
                    cuts = [c for c in kept.cuts if c[2] < index]
                    cuts += self._cuts(ids, offsets, start, index)
                    return Rendered(text, (*kept.ids[:index], *ids), tuple(cuts))
            return None
        return None

    def _whole(self, text: str) -> Rendered:
        self.stats.chars += len(text)
        if self.incremental and (encoded := self._encode(text)) is not None:
            ids, offsets = encoded
            return Rendered(text, tuple(ids), tuple(self._cuts(ids, offsets, 0, 0)))
        return Rendered(text, tuple(self.tokenizer(text, add_special_tokens=False)["input_ids"]), ())

    def _encode(self, text: str) -> tuple[list[int], list[tuple[int, int]]] | None:
        """Ids of `text` and each one's character span (None where the tokenizer gives none)."""
        out = self.tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
        ids, offsets = list(out["input_ids"]), out.get("offset_mapping")
        if offsets is None or len(offsets) != len(ids):
            return None
        return ids, list(offsets)

    def _cuts(self, ids: list[int], offsets: list[tuple[int, int]], at: int, index: int) -> list[tuple[int, int, int]]:
        """The added tokens among `ids` (tokenized from character `at`, placed from `index`)."""
        return [(at + offsets[i][0], at + offsets[i][1], index + i) for i, t in enumerate(ids) if t in self.added]


def _keys(messages: Messages, tools: list[dict[str, Any]] | None, generation_prompt: bool) -> tuple[Any, ...] | None:
    """`+` (with the generation prompt) or `-` and the tools as JSON, then a key of each message
    (a prefix of messages is a prefix of keys), or None where a message is not JSON (such a chat
    is rendered and tokenized whole, not kept)."""
    try:
        head = "+-"[not generation_prompt] + json.dumps(tools or None, sort_keys=True)
        return (head, *(_message_key(m) for m in messages))
    except (TypeError, ValueError):
        return None


def _message_key(message: Any) -> Any:
    """A message of text fields only as its sorted items (5-10x quicker than JSON, and never
    equal to a JSON string), any other as JSON. Only str and None values: 1, 1.0 and True are
    equal in Python but render differently."""
    if type(message) is dict and all(type(k) is str and (type(v) is str or v is None) for k, v in message.items()):
        return tuple(sorted(message.items()))
    return json.dumps(message, sort_keys=True)
