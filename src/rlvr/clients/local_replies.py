"""From finished rows to answers: `LocalModel`'s worker thread hands each finished `Request` a
`Completion` (its text decoded, cut at a stop string, tool calls parsed) or an exception, and
settles the caller's future on the caller's event loop."""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from rlvr.clients.local_batch import GenerationStats, Request
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
    if r.stop_hit is not None:
        text = text[: text.find(r.stop_hit)]
    calls: list[ToolCall] = []
    if "<tool_call>" in text:
        text, calls = parse_tool_calls(text, f"call_{r.seed:08x}")
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


def resolve(request: Request, result: Completion | BaseException) -> None:
    """Settle the request's future with `result`, from any thread (its loop closed: nothing)."""

    def settle() -> None:
        if request.future.done():
            return
        if isinstance(result, BaseException):
            request.future.set_exception(result)
        else:
            request.future.set_result(result)

    try:
        request.loop.call_soon_threadsafe(settle)
    except RuntimeError:  # the caller's event loop has closed
        pass
