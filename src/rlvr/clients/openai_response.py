"""Reading an OpenAI-compatible server's answers: a chat completion into `rlvr.types.Completion`
(with vLLM's token ids when it sends them), and an error response into one line and a
`Retry-After` delay; and what a conversation holding a server's text needs before it goes back
on the wire (`utf8_safe`)."""

from __future__ import annotations

import json
import re
from types import SimpleNamespace
from typing import Any

import openai

from rlvr.clients.api_key import redact
from rlvr.clients.tool_calls import parse_tool_calls
from rlvr.types import Completion, SamplingArgs, ToolCall, Usage

MAX_RETRY_AFTER_S = 60.0
_TOKEN_ID = re.compile(r"^token_id:(\d+)$")


class MalformedResponse(Exception):
    """The server answered 200 with something that is not a chat completion (retried; never
    reaches the user: a `ClientError` does once the retries run out)."""


def error_message(exc: openai.APIError, secret: str | None = None) -> str:
    """The server's own reason, on one line (at most 300 characters), with `secret` (the API
    key: some servers echo it) replaced by `REDACTED` before the line is cut: OpenAI's
    `{"error": {"message": ...}}`, FastAPI's `{"detail": ...}` (transformers serve), any other
    JSON as it is, or the body's text.

    >>> from types import SimpleNamespace as NS
    >>> error_message(NS(body={"detail": "Server is pinned to 'tiny'; requested 'gpt'."}, message="Error code: 400"))
    "Server is pinned to 'tiny'; requested 'gpt'."
    >>> error_message(NS(body={"detail": [{"loc": ["body", "x"], "msg": "Field required"}]}, message=""))
    'body.x: Field required'
    >>> error_message(NS(body=None, message="Error code: 502"))
    'Error code: 502'
    """
    text = redact(str(_reason(exc.body) or exc.message), secret)
    return " ".join(text.split())[:300]


CONTEXT_LENGTH = re.compile(
    r"context[ _]length|maximum context|context window|maximum model length|prompt is too long"
    r"|longer than the model's context",
    re.IGNORECASE,
)
"""A refusal's reason that says the prompt does not fit the model's context."""
_TOOL_CALL_PARSE = re.compile(r"json parser could not parse|json: could not parse after dialect", re.IGNORECASE)
"""transformers serve's reason when its response parser fails on a `<tool_call>` the model wrote."""


def unparsed_tool_call(message: str) -> str | None:
    """What to do about a 400 whose reason (`message`) is transformers serve's failure to parse a
    `<tool_call>` the model wrote; None for any other reason."""
    if not _TOOL_CALL_PARSE.search(message):
        return None
    return (
        f"wrote a <tool_call> that the server could not parse (HTTP 400: {message[:80]}...): transformers serve "
        "parses tool calls in every reply, tools or not, by the model's response template (its tokenizer's, else "
        "transformers' own for Qwen and Gemma); give the model's tokenizer_config.json a response_template without "
        "tool_calls (as `rlvr model new` writes), or drop -b to run the model here"
    )


_SURROGATE = re.compile("[\ud800-\udfff]")


def utf8_safe(value: Any) -> Any:
    """`value` (messages: dicts, lists, strings) with each lone surrogate replaced by U+FFFD, so
    that it encodes as UTF-8; `value` itself when it holds none. A server may send one (`"\\ud800"`
    is valid JSON) in a reply's text or a tool call's arguments, and the conversation sends it
    back: the SDK's UTF-8 encoding of the request failed on it, and with it the rollout.

    >>> utf8_safe([{"content": "ok", "tool_calls": [{"arguments": '{"a": "\\ud800"}'}]}])
    [{'content': 'ok', 'tool_calls': [{'arguments': '{"a": "\ufffd"}'}]}]
    """
    if isinstance(value, str):
        return value if value.isascii() or not _SURROGATE.search(value) else _SURROGATE.sub("\ufffd", value)
    if isinstance(value, dict):
        items = {k: utf8_safe(v) for k, v in value.items()}
        return value if all(items[k] is v for k, v in value.items()) else items
    if isinstance(value, list):
        values = [utf8_safe(v) for v in value]
        return value if all(a is b for a, b in zip(values, value, strict=True)) else values
    return value


def _reason(body: Any) -> str:
    if isinstance(body, dict):
        for key in ("message", "detail", "error"):
            value = body.get(key)
            if isinstance(value, (str, dict, list)) and value:
                return _reason(value)
        return json.dumps(body, ensure_ascii=False) if body else ""
    if isinstance(body, list):  # FastAPI's validation errors
        parts = [
            ".".join(map(str, e.get("loc") or ())) + ": " + str(e.get("msg", "")) if isinstance(e, dict) else str(e)
            for e in body
        ]
        return "; ".join(parts)
    return "" if body is None else str(body)


def retry_after(exc: openai.APIStatusError) -> float | None:
    """Seconds the server asks us to wait (`Retry-After`, capped at a minute), if it says."""
    raw = exc.response.headers.get("retry-after")
    try:
        seconds = float(raw) if raw is not None else None
    except ValueError:
        return None
    return None if seconds is None or seconds < 0 else min(seconds, MAX_RETRY_AFTER_S)


def parse_completion(response: Any, sampling: SamplingArgs, split_tool_calls: bool = False) -> Completion:
    """Map an SDK `ChatCompletion` onto `rlvr.types.Completion`; `MalformedResponse` if it
    is not one (the SDK builds models from unexpected JSON without validating it).
    `split_tool_calls` (the request offered tools): a reply without structured tool calls has
    the `<tool_call>` blocks of its text split off into calls, as `LocalModel` does."""
    try:
        completion = _completion(response, sampling)
    except (AttributeError, TypeError, KeyError, ValueError) as exc:
        raise MalformedResponse(f"{type(exc).__name__}: {exc}") from exc
    if split_tool_calls and not completion.tool_calls and "<tool_call>" in completion.text:
        completion.text, completion.tool_calls = parse_tool_calls(
            completion.text, f"call_{getattr(response, 'id', '')}"
        )
        completion.finish_reason = "tool_calls" if completion.finish_reason == "stop" else completion.finish_reason
    return completion


def _completion(response: Any, sampling: SamplingArgs) -> Completion:
    choices = getattr(response, "choices", None)
    if not choices:
        raise MalformedResponse(f"no choices in the response ({type(response).__name__})")
    choice = choices[0]
    message = getattr(choice, "message", None)
    if message is None:
        raise MalformedResponse("the first choice has no message")
    calls = [
        ToolCall(id=c.id, name=c.function.name, arguments=c.function.arguments or "")
        for c in message.tool_calls or []
        if getattr(c, "function", None) is not None
    ]
    finish = choice.finish_reason or "stop"
    usage = getattr(response, "usage", None)
    logprobs, token_ids = sampled_tokens(choice)
    prompt_ids = getattr(response, "prompt_token_ids", None) or getattr(choice, "prompt_token_ids", None)
    return Completion(
        text=message.content or "",
        token_ids=token_ids,
        logprobs=logprobs if sampling.logprobs else None,
        prompt_token_ids=_int_list(prompt_ids),
        tool_calls=calls,
        finish_reason="tool_calls" if finish == "function_call" else finish,
        usage=Usage(
            prompt_tokens=int(getattr(usage, "prompt_tokens", 0) or 0),
            completion_tokens=int(getattr(usage, "completion_tokens", 0) or 0),
        ),
    )


def sampled_tokens(choice: Any) -> tuple[list[float] | None, list[int] | None]:
    """(logprobs, token ids) of the sampled tokens, each None when the server gave none."""
    content = getattr(getattr(choice, "logprobs", None), "content", None)
    logprobs = [float(c.logprob) for c in content] if content is not None else None
    ids = _int_list(getattr(choice, "token_ids", None))
    if content is not None:
        parsed = [_TOKEN_ID.match(c.token or "") for c in content]
        from_tokens = [int(m.group(1)) for m in parsed if m] if all(parsed) else None
        if ids is None or (from_tokens is not None and len(ids) != len(content)):
            ids = from_tokens
        if ids is not None and len(ids) != len(content):
            logprobs = None  # never hand out logprobs that are not aligned with the ids
    return logprobs, ids


def _int_list(value: Any) -> list[int] | None:
    if isinstance(value, list) and all(isinstance(v, int) for v in value):
        return list(value)
    return None


def assemble_stream(chunks: list[Any]) -> Any:
    """One chat completion from the chunks of a streamed one (text, tool calls, logprobs,
    vLLM's token ids, finish reason, usage), shaped like the SDK's `ChatCompletion` as far as
    `parse_completion` reads it."""
    text: list[str] = []
    calls: dict[int, dict[str, Any]] = {}
    logprobs: list[Any] | None = None
    token_ids: list[int] | None = None
    prompt_ids, finish, usage = None, None, None
    for chunk in chunks:
        usage = getattr(chunk, "usage", None) or usage
        prompt_ids = getattr(chunk, "prompt_token_ids", None) or prompt_ids
        for choice in getattr(chunk, "choices", None) or []:
            if getattr(choice, "index", 0) != 0:
                continue
            delta = choice.delta
            text.append(getattr(delta, "content", None) or "")
            for call in getattr(delta, "tool_calls", None) or []:
                slot = calls.setdefault(call.index, {"id": "", "name": "", "arguments": ""})
                slot["id"] = call.id or slot["id"]
                if call.function is not None:
                    slot["name"] += call.function.name or ""
                    slot["arguments"] += call.function.arguments or ""
            content = getattr(getattr(choice, "logprobs", None), "content", None)
            if content is not None:
                logprobs = (logprobs or []) + list(content)
            ids = _int_list(getattr(choice, "token_ids", None))
            if ids is not None:
                token_ids = (token_ids or []) + ids
            prompt_ids = getattr(choice, "prompt_token_ids", None) or prompt_ids
            finish = choice.finish_reason or finish
    if chunks and finish is None:
        raise MalformedResponse("the stream ended without a finish reason")
    tool_calls = [
        SimpleNamespace(id=c["id"], function=SimpleNamespace(name=c["name"], arguments=c["arguments"]))
        for _, c in sorted(calls.items())
    ]
    choice = SimpleNamespace(
        message=SimpleNamespace(content="".join(text), tool_calls=tool_calls),
        finish_reason=finish,
        logprobs=SimpleNamespace(content=logprobs) if logprobs is not None else None,
        token_ids=token_ids,
    )
    return SimpleNamespace(choices=[choice] if chunks else [], usage=usage, prompt_token_ids=prompt_ids)
