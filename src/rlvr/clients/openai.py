"""OpenAIClient: any OpenAI-compatible chat endpoint (OpenAI, vLLM, SGLang, `transformers serve`).

Built on the official `openai` SDK (`AsyncOpenAI`), with the SDK's own retries turned off:
this client retries by itself so that the count is exact (`max_retries` retries = at most
`max_retries + 1` requests per `chat` call) and so that malformed responses and deadline
overruns are retried too.

- Retried, with exponential backoff and full jitter (a `Retry-After` header wins): 408, 409,
  429, 5xx, connection errors, per-request timeouts (`timeout_s`, a deadline on the whole
  request), malformed JSON or a response without choices.
- Not retried: a context-length 400 (`PromptTooLongError`), other 4xx (`ClientError`).
- Token ids (vLLM): when `sampling.logprobs` is set, the request asks for `logprobs` plus
  vLLM's `return_token_ids` (completion ids in `choices[0].token_ids`, prompt ids in
  `prompt_token_ids`) and `return_tokens_as_token_ids` (logprob tokens read `token_id:N`).
  A server that rejects those two fields gets them no more (one extra request, not counted
  as a retry); a server that ignores them gives text and logprobs only (`token_ids=None`).
- `max_tokens` is sent as `max_completion_tokens` once an endpoint refuses it (OpenAI's
  reasoning models do), the same way.
"""

from __future__ import annotations

import asyncio
import os
import random
import re
from collections.abc import AsyncGenerator
from typing import Any, Self
from urllib.parse import urlparse

import openai
from openai.types.chat import ChatCompletion

from rlvr.errors import ClientError, PromptTooLongError, UsageError
from rlvr.types import Completion, Messages, SamplingArgs, ToolCall, Usage

LOCAL_HOSTS = frozenset({"localhost", "127.0.0.1", "::1", "0.0.0.0"})
VLLM_TOKEN_FIELDS = {"return_token_ids": True, "return_tokens_as_token_ids": True}
RETRY_STATUS = frozenset({408, 409, 429})
MAX_RETRY_AFTER_S = 60.0
_CONTEXT_LENGTH = re.compile(
    r"context[ _]length|maximum context|context window|maximum model length|prompt is too long"
    r"|longer than the model's context",
    re.IGNORECASE,
)
_TOKEN_ID = re.compile(r"^token_id:(\d+)$")


class OpenAIClient:
    """A `ChatClient` for an OpenAI-compatible `/v1/chat/completions` endpoint.

    The API key is read from the environment variable `api_key_var`; for a `base_url` on this
    machine (localhost, 127.0.0.1) a missing key is fine. At most `concurrency` requests of
    this client are in flight at once (waiting out a backoff does not hold a slot). Close it
    with `await client.aclose()` (or `async with`) in the event loop that used it.
    """

    def __init__(
        self,
        model: str,
        *,
        base_url: str | None = None,
        api_key_var: str = "OPENAI_API_KEY",
        timeout_s: float = 120.0,
        max_retries: int = 5,
        concurrency: int = 64,
        backoff_s: float = 0.5,
        max_backoff_s: float = 8.0,
    ) -> None:
        if timeout_s <= 0:
            raise UsageError(f"timeout_s must be > 0, got {timeout_s}")
        if max_retries < 0:
            raise UsageError(f"max_retries must be >= 0, got {max_retries}")
        if concurrency < 1:
            raise UsageError(f"concurrency must be >= 1, got {concurrency}")
        self.name = model
        self.base_url = base_url
        self.timeout_s = timeout_s
        self.max_retries = max_retries
        self.concurrency = concurrency
        self.backoff_s = backoff_s
        self.max_backoff_s = max_backoff_s
        self.api_key = _api_key(api_key_var, base_url)
        self.omit: set[str] = set()
        """Optional request fields this endpoint refused (vLLM's token-id fields): not sent."""
        self.max_tokens_field = "max_tokens"
        """`max_completion_tokens` once the endpoint refused `max_tokens` (OpenAI's newer models)."""
        self.requests = 0
        """HTTP requests sent so far (first tries and retries)."""
        self.retries = 0
        """Requests that were retries of a failed one."""
        self._rng = random.Random()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._sdk: openai.AsyncOpenAI | None = None
        self._gate: asyncio.Semaphore | None = None
        self._closer: AsyncGenerator[None, None] | None = None

    # ---- lifecycle --------------------------------------------------------------------------

    async def _session(self) -> tuple[openai.AsyncOpenAI, asyncio.Semaphore]:
        """The SDK client and the concurrency gate of the running event loop (built lazily)."""
        loop = asyncio.get_running_loop()
        if self._sdk is None or self._gate is None or self._loop is not loop:
            self._loop = loop
            # keep as many idle connections as requests may be in flight (the SDK keeps 100);
            # the Limits class is the SDK's own (httpx or httpx2, depending on its version)
            limits = type(openai.DEFAULT_CONNECTION_LIMITS)(
                max_connections=None, max_keepalive_connections=self.concurrency
            )
            self._sdk = openai.AsyncOpenAI(
                api_key=self.api_key,
                base_url=self.base_url,
                timeout=self.timeout_s + 5.0,  # our own deadline (asyncio.timeout) comes first
                max_retries=0,
                http_client=openai.DefaultAsyncHttpxClient(limits=limits),
            )
            self._gate = asyncio.Semaphore(self.concurrency)
            self._closer = _close_at_loop_end(self._sdk)
            await anext(self._closer)
        return self._sdk, self._gate

    async def aclose(self) -> None:
        """Close the HTTP connections (call it in the loop that used the client).

        A client that is never closed is closed when its event loop shuts down (`asyncio.run`
        finalises async generators, and one of them holds the connections).
        """
        if self._closer is not None:
            await self._closer.aclose()
        self._sdk = self._gate = self._loop = self._closer = None

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def check(self) -> None:
        """Fail fast, with one line, when the endpoint cannot be reached at all.

        One `GET /models`, no retries, at most 10 s. Any HTTP answer counts as reachable (a
        server without that route answers 404); 401/403 means the API key was refused.
        """
        sdk, _ = await self._session()
        where = self.base_url or "https://api.openai.com/v1"
        try:
            async with asyncio.timeout(min(self.timeout_s, 10.0)):
                await sdk.models.list()
        except (openai.APIConnectionError, TimeoutError) as exc:
            reason = " ".join(str(exc).split()) or type(exc).__name__
            raise ClientError(f"cannot reach {where} ({reason}); check -b and that the server is running") from None
        except (openai.AuthenticationError, openai.PermissionDeniedError) as exc:
            raise ClientError(
                f"{where} refused the API key ({_error_message(exc)}); pass the right variable with -k"
            ) from None
        except openai.APIError:
            return

    # ---- the request ------------------------------------------------------------------------

    async def chat(
        self,
        messages: Messages,
        sampling: SamplingArgs,
        tools: list[dict[str, Any]] | None = None,
    ) -> Completion:
        sdk, gate = await self._session()
        reason = ""
        attempt = 0
        while attempt <= self.max_retries:
            request = self._request(messages, sampling, tools)
            self.requests += 1
            self.retries += attempt > 0
            try:
                async with gate, asyncio.timeout(self.timeout_s):
                    # `post` sends the body as is: the messages are JSON already, and skipping
                    # `chat.completions.create`'s param transform saves ~30% of client CPU
                    response = await sdk.post("/chat/completions", body=request, cast_to=ChatCompletion)
                return _parse(response, sampling)
            except Exception as exc:
                action, reason, wait = self._judge(exc, request)
                if action == "raise":
                    raise
                if action == "resend":  # the server refused an optional field: not a retry
                    continue
            attempt += 1
            if attempt <= self.max_retries:
                await asyncio.sleep(wait if wait is not None else self._backoff(attempt))
        where = f" at {self.base_url}" if self.base_url else ""
        raise ClientError(
            f"model {self.name}{where} failed {self.max_retries + 1} times; last: " + " ".join(reason.split())
        )

    def _request(
        self, messages: Messages, sampling: SamplingArgs, tools: list[dict[str, Any]] | None
    ) -> dict[str, Any]:
        request: dict[str, Any] = {
            "model": self.name,
            "messages": messages,
            "temperature": sampling.temperature,
            "top_p": sampling.top_p,
        }
        if sampling.max_tokens is not None:
            request[self.max_tokens_field] = sampling.max_tokens
        if sampling.seed is not None:
            request["seed"] = sampling.seed
        if sampling.stop:
            request["stop"] = sampling.stop
        if tools:
            request["tools"] = tools
        if sampling.logprobs:
            request["logprobs"] = True
            request.update({f: True for f in VLLM_TOKEN_FIELDS if f not in self.omit})
        return request

    def _judge(self, exc: Exception, request: dict[str, Any]) -> tuple[str, str, float | None]:
        """(`retry` | `resend` | `raise`, one-line reason, seconds to wait: None = backoff).

        Raises `PromptTooLongError` / `ClientError` itself for failures no retry can fix.
        """
        if isinstance(exc, (TimeoutError, openai.APITimeoutError)):
            return "retry", f"no answer within {self.timeout_s:g} s", None
        if isinstance(exc, openai.APIConnectionError):
            cause = exc.__cause__ or exc
            return "retry", f"connection failed ({type(cause).__name__}: {cause})", None
        if isinstance(exc, openai.APIStatusError):
            message = _error_message(exc)
            reason = f"HTTP {exc.status_code}: {message}"
            if exc.status_code in RETRY_STATUS or exc.status_code >= 500:
                return "retry", reason, _retry_after(exc)
            if _CONTEXT_LENGTH.search(message):
                raise PromptTooLongError(f"model {self.name}: {message}") from None
            if self._adapt(exc, request):
                return "resend", reason, None
            hint = " (check the API key variable, -k NAME)" if exc.status_code in (401, 403) else ""
            where = f" at {self.base_url}" if self.base_url else ""
            raise ClientError(f"model {self.name}{where} refused the request: {reason}{hint}") from None
        if isinstance(exc, (ValueError, MalformedResponse, openai.APIResponseValidationError)):
            return "retry", f"malformed response ({type(exc).__name__}: {exc})", None
        return "raise", "", None

    def _adapt(self, exc: openai.APIStatusError, request: dict[str, Any]) -> bool:
        """Learn from a 4xx that refused a field we can do without; True: resend the request."""
        if exc.param == "max_tokens" and "max_tokens" in request:
            self.max_tokens_field = "max_completion_tokens"
            return True
        if any(f in request and f in str(exc.body) for f in VLLM_TOKEN_FIELDS):
            self.omit |= set(VLLM_TOKEN_FIELDS)  # a server that refuses one knows neither
            return True
        return False

    def _backoff(self, attempt: int) -> float:
        """Full jitter: uniform in [0, min(max_backoff_s, backoff_s * 2**(attempt-1))]."""
        return self._rng.uniform(0.0, min(self.max_backoff_s, self.backoff_s * 2 ** (attempt - 1)))


async def _close_at_loop_end(sdk: openai.AsyncOpenAI) -> AsyncGenerator[None, None]:
    """Suspended until closed: by `aclose`, or by the loop's `shutdown_asyncgens`."""
    try:
        yield
    finally:
        await sdk.close()


class MalformedResponse(Exception):
    """The server answered 200 with something that is not a chat completion."""


def _api_key(var: str, base_url: str | None) -> str:
    key = os.environ.get(var)
    if key:
        return key
    host = urlparse(base_url).hostname if base_url else None
    if host in LOCAL_HOSTS:
        return "EMPTY"  # local servers (vLLM, transformers serve) usually need no key
    raise ClientError(
        f"no API key: the environment variable {var} is not set; export {var}=... "
        f"or pass -k NAME to read the key from another variable"
    )


def _error_message(exc: openai.APIStatusError) -> str:
    body = exc.body
    if isinstance(body, dict):
        body = body.get("error", body)
        if isinstance(body, dict):
            body = body.get("message", body)
    text = body if isinstance(body, str) else exc.message
    return " ".join(str(text).split())[:300]


def _retry_after(exc: openai.APIStatusError) -> float | None:
    raw = exc.response.headers.get("retry-after")
    try:
        seconds = float(raw) if raw is not None else None
    except ValueError:
        return None
    return None if seconds is None or seconds < 0 else min(seconds, MAX_RETRY_AFTER_S)


def _parse(response: Any, sampling: SamplingArgs) -> Completion:
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
    logprobs, token_ids = _tokens(choice)
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


def _tokens(choice: Any) -> tuple[list[float] | None, list[int] | None]:
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
