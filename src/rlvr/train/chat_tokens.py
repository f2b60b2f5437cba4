"""Conversations and rollouts as token ids with a loss mask (1 = train on this token).

Two sources of training tokens:

- `tokenize_chat(tokenizer, messages)` for SFT: OpenAI-style message dicts (teacher games, a
  dataset) are rendered with the tokenizer's chat template and tokenised here. The mask covers
  each assistant turn's text as the template writes it after the role header (content,
  tool calls, end-of-turn marker), never the header, never trailing whitespace after the
  marker, never system/user/tool turns.
- `rollout_tokens(prompt_ids, turns)` for RL: the token ids the model saw and sampled,
  concatenated. Completion text is never re-tokenised: the trainer trains on exactly the ids
  that were sampled.

How `tokenize_chat` renders
---------------------------
It renders the conversation incrementally and tokenises it in segments: before each assistant
turn i, the prompt `render(messages[:i], add_generation_prompt=True)`; then that turn as the
template writes it when it is the *last* turn, `render(messages[:i + 1])`; each render
contributes only what it adds beyond the previous one. For templates that never change earlier
turns (rlvr's tiny-model template, ChatML, Llama 3), the result is the final render, tokenised.

Some templates rewrite history: Qwen3 drops `<think>...</think>` from assistant turns before
the last user message, so `render(messages[:k])` is then no prefix of `render(messages[:k+1])`.
`tokenize_chat` detects this (`TokenizedChat.history_rewritten`) and locates the end of the
earlier render inside the later one (the longest tail of the earlier turn found in the later
render; in practice the turn's answer and end marker, which rewriting keeps), then goes on.
Each assistant turn is thus trained exactly as the model writes it when it is the latest turn,
thinking included. The trade-off: later turns see earlier thinking in their context, which the
template would have removed at inference. Where that matters, `tokenize_chat_turns` gives one
sample per assistant turn, each exactly the inference-time context plus that turn, at the cost
of repeating the shared history once per turn (quadratic in the number of turns).

Token boundaries: each segment is tokenised on its own, as at inference (prompt ids, then the
generated ids). With special-token turn markers this equals tokenising the whole text.
"""

from __future__ import annotations

import operator
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from rlvr.errors import ModelError

Render = Callable[[list[dict[str, Any]], bool], str]


@dataclass(frozen=True)
class TokenizedChat:
    """A conversation as token ids and a loss mask of the same length."""

    input_ids: list[int]
    """Token ids of the whole conversation."""
    loss_mask: list[int]
    """1 on the assistant tokens to train on, 0 elsewhere."""
    history_rewritten: bool = False
    """True when the chat template rewrote earlier turns (see the module docstring)."""

    def __post_init__(self) -> None:
        if len(self.input_ids) != len(self.loss_mask):
            raise ValueError(
                f"input_ids and loss_mask differ in length: {len(self.input_ids)} != {len(self.loss_mask)}"
            )


@dataclass(frozen=True)
class TurnTokens:
    """One model turn of a rollout, as the ids the model saw and the ids it sampled.

    The sequence of a rollout is `prompt_ids + turns[0].prompt_ids + turns[0].completion_ids +
    turns[1].prompt_ids + turns[1].completion_ids + ...`.
    """

    prompt_ids: Sequence[int]
    """Ids added to the model's context just before this completion and not yet in the
    sequence: empty for the first turn (the rollout prompt is passed on its own); for later
    turns the environment's reply (user/tool turn) and the next assistant header. Mask 0."""
    completion_ids: Sequence[int]
    """Ids the model sampled in this turn, its end-of-turn token included if it emitted one.
    Mask 1."""


def rollout_tokens(
    prompt_ids: Sequence[int], turns: Sequence[TurnTokens], *, max_length: int | None = None
) -> tuple[list[int], list[int]]:
    """Concatenate a rollout's ids; the mask is 1 exactly on the sampled completion ids.

    >>> rollout_tokens([1, 2], [TurnTokens([], [7, 8]), TurnTokens([3], [9])])
    ([1, 2, 7, 8, 3, 9], [0, 0, 1, 1, 0, 1])
    >>> rollout_tokens([1, 2], [TurnTokens([], [7, 8])], max_length=3)
    ([1, 2, 7], [0, 0, 1])
    """
    input_ids: list[int] = []
    loss_mask: list[int] = []
    for ids, trainable in _rollout_segments(prompt_ids, turns):
        checked = [_token_id(i) for i in ids]
        input_ids += checked
        loss_mask += [int(trainable)] * len(checked)
    return _truncate(input_ids, max_length), _truncate(loss_mask, max_length)


def _rollout_segments(prompt_ids: Sequence[int], turns: Sequence[TurnTokens]) -> list[tuple[Sequence[int], bool]]:
    segments: list[tuple[Sequence[int], bool]] = [(prompt_ids, False)]
    for turn in turns:
        segments += [(turn.prompt_ids, False), (turn.completion_ids, True)]
    return segments


def tokenize_chat(
    tokenizer: Any,
    messages: Sequence[Mapping[str, Any]],
    tools: Sequence[Any] | None = None,
    max_length: int | None = None,
    *,
    chat_template_kwargs: Mapping[str, Any] | None = None,
) -> TokenizedChat:
    """Render `messages` with the tokenizer's chat template; mask the assistant turns.

    Args:
        tokenizer: a transformers tokenizer with a chat template.
        messages: OpenAI-style dicts (`role`, `content`, optional `tool_calls`, `tool_call_id`).
        tools: tool schemas (or Python functions) passed on to the chat template.
        max_length: keep only the first `max_length` tokens (mask cut alike).
        chat_template_kwargs: extra template variables, e.g. `{"enable_thinking": False}`.
    """
    render = _renderer(tokenizer, tools, chat_template_kwargs)
    chat: list[dict[str, Any]] = [dict(m) for m in messages]
    segments: list[tuple[str, bool]] = []
    done = ""  # the latest render, cut where the segments so far end
    rewritten = False
    previous = -1  # index of the previous assistant message
    for i in [k for k, m in enumerate(chat) if m.get("role") == "assistant"]:
        prompt, full, reply_start, reply_end, moved = _assistant_turn(render, chat, i)
        start, moved_before = _continue(done, prompt, chat[previous + 1 : i])
        segments += [(prompt[start:], False), (full[reply_start:reply_end], True)]
        rewritten |= moved or moved_before
        done, previous = full[:reply_end], i
    final = render(chat, False)
    start, moved = _continue(done, final, chat[previous + 1 :])
    segments.append((final[start:], False))
    rewritten |= moved
    ids, mask = _encode_segments(tokenizer, segments)
    return TokenizedChat(_truncate(ids, max_length), _truncate(mask, max_length), rewritten)


def tokenize_chat_turns(
    tokenizer: Any,
    messages: Sequence[Mapping[str, Any]],
    tools: Sequence[Any] | None = None,
    max_length: int | None = None,
    *,
    chat_template_kwargs: Mapping[str, Any] | None = None,
) -> list[TokenizedChat]:
    """One sample per assistant turn: its inference-time prompt (mask 0) and the turn (mask 1).

    Each sample is exactly what the model sees and writes at that turn, even under templates
    that rewrite history; earlier assistant turns appear in it as context only. Arguments as
    in `tokenize_chat`.
    """
    render = _renderer(tokenizer, tools, chat_template_kwargs)
    chat: list[dict[str, Any]] = [dict(m) for m in messages]
    samples = []
    for i, message in enumerate(chat):
        if message.get("role") != "assistant":
            continue
        prompt, full, reply_start, reply_end, moved = _assistant_turn(render, chat, i)
        ids, mask = _encode_segments(tokenizer, [(prompt, False), (full[reply_start:reply_end], True)])
        samples.append(TokenizedChat(_truncate(ids, max_length), _truncate(mask, max_length), moved))
    return samples


def _renderer(tokenizer: Any, tools: Sequence[Any] | None, kwargs: Mapping[str, Any] | None) -> Render:
    if getattr(tokenizer, "chat_template", None) is None:
        raise ModelError(
            f"tokenizer {getattr(tokenizer, 'name_or_path', '')!r} has no chat template; "
            "use a chat model's tokenizer or set tokenizer.chat_template"
        )

    def render(messages: list[dict[str, Any]], add_generation_prompt: bool) -> str:
        return tokenizer.apply_chat_template(
            messages,
            tools=list(tools) if tools else None,
            tokenize=False,
            add_generation_prompt=add_generation_prompt,
            **dict(kwargs or {}),
        )

    return render


def _assistant_turn(render: Render, messages: list[dict[str, Any]], i: int) -> tuple[str, str, int, int, bool]:
    """Render assistant turn i as the last turn.

    Returns the prompt before it, the render ending with it, where the reply starts and ends
    in that render (the end-of-turn marker included, whitespace after it not), and whether the
    render rewrote the prompt.
    """
    prompt = render(messages[:i], True)
    full = render(messages[: i + 1], False)
    reply_start, moved = _align_end(prompt, full)
    reply_end = len(full.rstrip())
    if reply_end <= reply_start:
        raise ModelError(
            f"the chat template renders assistant message {i} as nothing after its header "
            f"{prompt[-40:]!r}; expected its content and an end-of-turn marker"
        )
    return prompt, full, reply_start, reply_end, moved


def _align_end(before: str, after: str) -> tuple[int, bool]:
    """Where the end of `before` lies in `after`, and whether `after` rewrote `before`.

    When `before` is no prefix of `after`, skip their common prefix and find the longest tail
    of the rest of `before` in the rest of `after` (its first occurrence).
    """
    if after.startswith(before):
        return len(before), False
    common = len(os.path.commonprefix([before, after]))
    rest_before, rest_after = before[common:], after[common:]
    low, high = 0, len(rest_before)  # a tail of length `low` occurs; longer ones may not
    while low < high:
        mid = (low + high + 1) // 2
        if rest_before[-mid:] in rest_after:
            low = mid
        else:
            high = mid - 1
    if low == 0:
        raise ModelError(
            "the chat template rewrites earlier turns beyond recognition; "
            f"expected {rest_before[-40:]!r} to survive in {rest_after[:80]!r}. "
            "Use tokenize_chat_turns (one sample per assistant turn) for this template"
        )
    return common + rest_after.index(rest_before[-low:]) + low, True


def _continue(done: str, render: str, new_messages: list[dict[str, Any]]) -> tuple[int, bool]:
    """Where `render` goes on from `done`; checks a rewritten render kept the new messages."""
    start, moved = _align_end(done, render)
    if not moved:
        return start, False
    text = render[start:]
    for message in new_messages:
        content = message.get("content")
        if isinstance(content, str) and content.strip() not in text:
            raise ModelError(
                "the chat template rewrites earlier turns in a way tokenize_chat cannot follow: "
                f"expected the {message.get('role')} message {content.strip()[:40]!r} in the "
                f"text after the previous assistant turn, got {text[:80]!r}. "
                "Use tokenize_chat_turns (one sample per assistant turn) for this template"
            )
    return start, True


def _encode_segments(tokenizer: Any, segments: list[tuple[str, bool]]) -> tuple[list[int], list[int]]:
    ids: list[int] = []
    mask: list[int] = []
    for text, trainable in segments:
        if text:
            piece = tokenizer.encode(text, add_special_tokens=False)
            ids += piece
            mask += [int(trainable)] * len(piece)
    return ids, mask


def _token_id(value: Any) -> int:
    index = None if isinstance(value, bool) else _as_index(value)
    if index is None or index < 0:
        raise ValueError(f"token ids must be non-negative ints, got {value!r}")
    return index


def _as_index(value: Any) -> int | None:
    try:
        return operator.index(value)  # int, numpy and 0-d torch integers
    except TypeError:
        return None


def _truncate(values: list[int], max_length: int | None) -> list[int]:
    if max_length is None:
        return values
    if max_length < 1:
        raise ValueError(f"max_length must be at least 1 or None, got {max_length}")
    return values[:max_length]
