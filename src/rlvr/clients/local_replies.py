"""From finished rows to answers: `LocalModel`'s worker thread hands each finished `Request` a
`Completion` (its text decoded, cut at a stop string, tool calls parsed) or an exception, and
settles the caller's future on the caller's event loop."""

from __future__ import annotations

import asyncio
from collections.abc import Collection
from typing import Any

from rlvr.clients.local_batch import GenerationStats, Request
from rlvr.clients.local_load import encodable
from rlvr.clients.tool_calls import parse_tool_calls
from rlvr.types import Completion, ToolCall, Usage


def deliver(requests: list[Request], tokenizer: Any, eos_ids: Collection[int], stats: GenerationStats) -> None:
    """Answer finished requests, their texts decoded together (a final EOS left out); an error
    building one answer fails that request only."""
    if not requests:
        return
    stats.requests += len(requests)
    stats.tokens += sum(len(r.ids) for r in requests)
    ids = [r.ids[:-1] if r.ids and r.ids[-1] in eos_ids else r.ids for r in requests]
    try:
        texts = tokenizer.batch_decode(ids, skip_special_tokens=True)
    except Exception as exc:
        for request in requests:
            resolve(request, exc)
        return
    for request, text in zip(requests, texts):
        try:
            result: Completion | BaseException = completion(request, text)
        except Exception as exc:
            result = exc
        resolve(request, result)


def completion(r: Request, text: str) -> Completion:
    """The `Completion` of finished request `r`, whose ids decode to `text`."""
    text, calls = reply_text(text, r.stop_hit, f"call_{r.seed:08x}")
    finish = r.finish if r.finish == "length" or not calls else "tool_calls"
    return Completion(
        text=text,
        token_ids=list(r.ids),
        logprobs=list(r.logprobs),
        prompt_token_ids=list(r.prompt_ids),
        tool_calls=calls,
        finish_reason=finish or "stop",
        usage=Usage(prompt_tokens=len(r.prompt_ids), completion_tokens=len(r.ids)),
    )


def reply_text(text: str, stop_hit: str | None, call_id: str) -> tuple[str, list[ToolCall]]:
    """A decoded reply as `chat` answers it: cut before the stop string it hit, its tool calls
    (ids from `call_id`) taken out."""
    if stop_hit is not None:
        text = text[: text.find(stop_hit)]
    calls: list[ToolCall] = []
    if "<tool_call>" in text:
        text, calls = parse_tool_calls(text, call_id)
    return text, calls


def reply_ids(tokenizer: Any, eos_ids: Collection[int], ids: list[int], text: str, prompt_ids: list[int]) -> list[int]:
    """The chat template's ids of reply `text` after `prompt_ids`, through the first end-of-turn
    id (`LocalModel.give`), from `ids`: the conversation with the reply rendered and tokenized
    (no generation prompt); where the template does not extend the prompt so (or rewrites the
    text: some drop `<think>` blocks), the text's own ids and an EOS id."""
    tail = ids[len(prompt_ids) :] if ids[: len(prompt_ids)] == prompt_ids else []
    ends = [i for i, t in enumerate(tail) if t in eos_ids]
    if ends and tokenizer.decode(tail[: ends[0]], skip_special_tokens=True) == text:
        return tail[: ends[0] + 1]
    eos = tokenizer.eos_token_id
    own = list(tokenizer(encodable(text), add_special_tokens=False)["input_ids"])
    return [*own, eos if eos in eos_ids else min(eos_ids)]


def resolve(request: Request, result: Completion | BaseException) -> None:
    """Settle the request's future with `result`, from any thread (its loop closed: nothing)."""
    settle(request.loop, request.future, result)


def settle(loop: asyncio.AbstractEventLoop, future: asyncio.Future[Any], result: Any) -> None:
    """Set `future` (of `loop`) to `result`, or raise it there if it is an exception, from any
    thread; nothing if the future is done or its loop closed."""

    def done() -> None:
        if future.done():
            return
        if isinstance(result, BaseException):
            future.set_exception(result)
        else:
            future.set_result(result)

    try:
        loop.call_soon_threadsafe(done)
    except RuntimeError:  # the caller's event loop has closed
        pass
