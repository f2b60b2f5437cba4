"""Reading an OpenAI-compatible server's answers: a chat completion into `rlvr.types.Completion`
(with vLLM's token ids when it sends them), and an error response into one line and a
`Retry-After` delay."""

from __future__ import annotations

import re
from typing import Any

import openai

from rlvr.types import Completion, SamplingArgs, ToolCall, Usage

MAX_RETRY_AFTER_S = 60.0
_TOKEN_ID = re.compile(r"^token_id:(\d+)$")


class MalformedResponse(Exception):
    """The server answered 200 with something that is not a chat completion (retried; never
    reaches the user: a `ClientError` does once the retries run out)."""


REDACTED = "[API key redacted]"


def error_message(exc: openai.APIStatusError, secret: str | None = None) -> str:
    """The server's own error message, on one line (at most 300 characters), with `secret` (the
    API key: some servers echo it) replaced by `REDACTED` before the line is cut."""
    body = exc.body
    if isinstance(body, dict):
        body = body.get("error", body)
        if isinstance(body, dict):
            body = body.get("message", body)
    text = redact(str(body if isinstance(body, str) else exc.message), secret)
    return " ".join(text.split())[:300]


def redact(text: str, secret: str | None) -> str:
    """`text` with every occurrence of `secret` (when there is one) replaced by `REDACTED`.

    >>> redact("Incorrect API key provided: sk-1234. Not sk-123.", "sk-1234"), redact("sk-1234", None)
    ('Incorrect API key provided: [API key redacted]. Not sk-123.', 'sk-1234')
    """
    return text.replace(secret, REDACTED) if secret else text


def retry_after(exc: openai.APIStatusError) -> float | None:
    """Seconds the server asks us to wait (`Retry-After`, capped at a minute), if it says."""
    raw = exc.response.headers.get("retry-after")
    try:
        seconds = float(raw) if raw is not None else None
    except ValueError:
        return None
    return None if seconds is None or seconds < 0 else min(seconds, MAX_RETRY_AFTER_S)


def parse_completion(response: Any, sampling: SamplingArgs) -> Completion:
    """Map an SDK `ChatCompletion` onto `rlvr.types.Completion`; `MalformedResponse` if it
    is not one (the SDK builds models from unexpected JSON without validating it)."""
    try:
        return _completion(response, sampling)
    except (AttributeError, TypeError, KeyError, ValueError) as exc:
        raise MalformedResponse(f"{type(exc).__name__}: {exc}") from exc


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
