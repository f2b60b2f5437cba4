"""OpenAIClient: any OpenAI-compatible chat endpoint (OpenAI, vLLM, SGLang, `transformers serve`).

Built on the official `openai` SDK (`AsyncOpenAI`), with the SDK's own retries turned off:
this client retries by itself so that the count is exact (`max_retries` retries = at most
`max_retries + 1` requests per `chat` call) and so that malformed responses and deadline
overruns are retried too.

- Retried, with exponential backoff and full jitter (a `Retry-After` header wins): 408, 409,
  429, 5xx, connection errors, per-request timeouts (`timeout_s`, a deadline on the whole
  request), malformed JSON or a response without choices, a response larger than
  `max_response_mb` (on the wire or decompressed: `rlvr.clients.response_cap`). A retry goes
  to another endpoint when there are several (`rlvr.clients.endpoints`). A timeout also halves the endpoint's
  limit on requests in flight and switches it to streamed requests, which a server cancels
  when the client hangs up: a slow server is not sent the same work again and again while it
  still computes the copies nobody waits for.
- Not retried: a context-length 400 (`PromptTooLongError`), other 4xx (`ClientError`, with the
  server's own reason, or what to do when transformers serve could not parse a `<tool_call>`).
- Tool-free requests carry no `tools`; `<tool_call>` text in a reply to tools is split off.
- A refused key (401/403) is retried like a 5xx, but `KEY_REFUSALS_TO_STOP` of them in a row
  (no success between, whichever requests they answer) stop the client for good: it raises
  `KeyRefusedError`, which ends the run, and sends nothing more.
- The API key never leaves: a server that echoes it (in a 401 body, say) has it replaced by
  `[API key redacted]` in every message this client builds from what it received, and in the
  completion's text and tool calls, as it is, URL-encoded or in base64. A key shorter than 16
  characters (not in a provider's format) is not redacted, with a warning: replacing it would
  rewrite ordinary text.
- Token ids (vLLM): when `sampling.logprobs` is set, the request asks for `logprobs` plus
  vLLM's `return_token_ids` (completion ids in `choices[0].token_ids`, prompt ids in
  `prompt_token_ids`) and `return_tokens_as_token_ids` (logprob tokens read `token_id:N`).
  A server that rejects those two fields gets them no more (one extra request, not counted
  as a retry); a server that ignores them gives text and logprobs only (`token_ids=None`).
- `max_tokens` is sent as `max_completion_tokens` once an endpoint refuses it (OpenAI's
  reasoning models do), the same way.

Lifecycle. HTTP connections belong to an event loop, so the client opens them in the loop of
its first request, as a `Session` (`rlvr.clients.openai_session`: pools of connections per
endpoint, the wait for a free one, the task that closes them at `aclose()` or when the loop
shuts down). A later event loop gets a new session. `aclose()` is for good: the next `chat`
raises `ClientClosedError` rather than opening new connections.
"""

from __future__ import annotations

import asyncio
import os
import random
import time
from collections.abc import Sequence
from typing import Any, Self

import openai
from openai.types.chat import ChatCompletion, ChatCompletionChunk

from rlvr.clients.api_key import api_key_for, redact, warn_if_unredactable
from rlvr.clients.endpoints import Endpoint, EndpointPool
from rlvr.clients.openai_response import (
    CONTEXT_LENGTH,
    MalformedResponse,
    assemble_stream,
    error_message,
    parse_completion,
    retry_after,
    unparsed_tool_call,
    utf8_safe,
)
from rlvr.clients.openai_session import Session
from rlvr.clients.response_cap import MAX_RESPONSE_MB, capped_http_client
from rlvr.errors import ClientClosedError, ClientError, KeyRefusedError, PromptTooLongError, UsageError
from rlvr.types import Completion, Messages, SamplingArgs

VLLM_TOKEN_FIELDS = {"return_token_ids": True, "return_tokens_as_token_ids": True}
RETRY_STATUS = frozenset({408, 409, 429})
KEY_REFUSED_STATUS = frozenset({401, 403})
KEY_REFUSALS_TO_STOP = 3
"""401/403 answers in a row after which the client stops: a wrong key fails every request."""


class OpenAIClient:
    """A `ChatClient` for an OpenAI-compatible `/v1/chat/completions` endpoint, or several.

    `base_url` is one URL or a list of them (servers of the same model; see
    `rlvr.clients.endpoints`). The API key is read from the environment variable
    `api_key_var`; for endpoints on this machine (localhost, 127.0.0.1) a missing key is fine.
    At most `concurrency` requests of this client are in flight at once over all endpoints
    (waiting out a backoff does not hold a slot). Close it with `await client.aclose()` (or
    `async with`) in the event loop that used it; a client left open is closed when that loop
    shuts down, and may go on in the next one.
    """

    def __init__(
        self,
        model: str,
        *,
        base_url: str | Sequence[str] | None = None,
        api_key_var: str = "OPENAI_API_KEY",
        timeout_s: float = 120.0,
        max_retries: int = 5,
        concurrency: int = 64,
        backoff_s: float = 0.5,
        max_backoff_s: float = 8.0,
        max_response_mb: int = MAX_RESPONSE_MB,
    ) -> None:
        if timeout_s <= 0:
            raise UsageError(f"timeout_s must be > 0, got {timeout_s}")
        if max_retries < 0:
            raise UsageError(f"max_retries must be >= 0, got {max_retries}")
        if concurrency < 1:
            raise UsageError(f"concurrency must be >= 1, got {concurrency}")
        if max_response_mb < 1:
            raise UsageError(f"max_response_mb must be >= 1, got {max_response_mb}")
        urls: list[str | None] = [base_url] if base_url is None or isinstance(base_url, str) else list(base_url)
        if not urls:
            raise UsageError("base_url: give at least one URL (or None for api.openai.com)")
        self.name = model
        self.base_url = urls[0] if len(urls) == 1 else None
        """The endpoint's URL (None: api.openai.com, or several endpoints: see `endpoints`)."""
        self.timeout_s = timeout_s
        self.max_retries = max_retries
        self.concurrency = concurrency
        self.backoff_s = backoff_s
        self.max_backoff_s = max_backoff_s
        self.max_response_mb = max_response_mb
        self.api_key_var = api_key_var
        self.api_key = api_key_for(api_key_var, urls)
        self._secret = os.environ.get(api_key_var) or None  # (not the placeholder of a local server)
        warn_if_unredactable(api_key_var, self._secret)
        self._refusals = 0  # 401/403 answers since the last success
        self.endpoints = EndpointPool(urls, concurrency)
        """The endpoints, their health and their counts (`endpoints.stats()`)."""
        self.omit: set[str] = set()
        """Optional request fields this endpoint refused (vLLM's token-id fields): not sent."""
        self.max_tokens_field = "max_tokens"
        """`max_completion_tokens` once the endpoint refused `max_tokens` (OpenAI's newer models)."""
        self.requests = 0
        """HTTP requests sent so far (first tries and retries)."""
        self.retries = 0
        """Requests that were retries of a failed one."""
        self._rng = random.Random()
        self._session: Session | None = None
        self._closed = False
        self._stopped: str | None = None  # why the client stopped for good (the key was refused)

    # ---- lifecycle --------------------------------------------------------------------------

    def _sdk(self, url: str | None, connections: int = 1) -> openai.AsyncOpenAI:
        """A new SDK client for one endpoint: a pool of `connections` kept-alive connections,
        no retries of its own, every response capped at `max_response_mb` (`rlvr.clients.response_cap`)."""
        return openai.AsyncOpenAI(
            api_key=self.api_key,
            base_url=url,
            timeout=self.timeout_s + 5.0,  # our own deadline (asyncio.timeout) comes first
            max_retries=0,
            http_client=capped_http_client(connections, self.max_response_mb * 2**20),
        )

    def _open(self) -> Session:
        """The running loop's session, opened on its first request; `ClientClosedError` after
        `aclose()`."""
        self._refuse_if_closed()
        loop = asyncio.get_running_loop()
        session = self._session
        if session is None or session.loop is not loop or session.holder.done():
            if session is not None:  # another loop's: that loop closes them (or did, at its end)
                session.release()
            session = self._session = Session(loop, self._sdk, self.endpoints, self.name)
        return session

    async def aclose(self) -> None:
        """Close the HTTP connections, for good, once the requests on the wire are answered; a
        later `chat`, and one still waiting for a slot, raises `ClientClosedError`. Call it in
        the event loop that used the client; calling it again does nothing."""
        self._closed = True
        session, self._session = self._session, None
        if session is None:
            return
        session.release()
        if session.loop is asyncio.get_running_loop():
            await asyncio.wait([session.holder])  # the connections are closed when it ends
            if not session.holder.cancelled():
                session.holder.result()  # an error while closing surfaces here

    async def __aenter__(self) -> Self:
        self._refuse_if_closed()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def _refuse_if_closed(self) -> None:
        if self._closed:
            raise ClientClosedError(f"the client of {self.name} has been closed (aclose); make a new one")
        if self._stopped is not None:
            raise KeyRefusedError(self._stopped)

    async def check(self) -> None:
        """Fail fast, with one line, when no endpoint can be reached at all.

        One `GET /models` per endpoint (all at once) on a connection of its own (closed before
        it returns), no retries, at most 10 s. Any HTTP answer counts as reachable (a server
        without that route answers 404); 401/403 means the API key was refused. Of several
        endpoints, one that answers is enough: one that cannot be reached starts out resting.
        """
        self._refuse_if_closed()
        reasons = await asyncio.gather(*(self._probe(ep) for ep in self.endpoints.endpoints))
        if all(reasons):
            raise ClientError(self._redact("; ".join(r for r in reasons if r)))

    async def _probe(self, ep: Endpoint) -> str | None:
        """Why `GET /models` at one endpoint failed (None: it answered)."""
        where = ep.url or "https://api.openai.com/v1"
        try:
            async with self._sdk(ep.url) as sdk, asyncio.timeout(min(self.timeout_s, 10.0)):
                await sdk.models.list()
        except (openai.APIConnectionError, TimeoutError) as exc:
            ep.on_probe("unreachable", self._backoff(1))  # no first wave of requests into a dead endpoint
            reason = " ".join(self._redact(str(exc)).split()) or type(exc).__name__
            return f"cannot reach {where} ({reason}); check -b and that the server is running"
        except (openai.AuthenticationError, openai.PermissionDeniedError) as exc:
            ep.on_probe("key refused")
            return f"{where} refused the API key ({error_message(exc, self._secret)}); pass the right variable with -k"
        except openai.APIError:
            pass
        ep.on_probe("answered")
        return None

    # ---- the request ------------------------------------------------------------------------

    async def chat(
        self,
        messages: Messages,
        sampling: SamplingArgs,
        tools: list[dict[str, Any]] | None = None,
    ) -> Completion:
        reason = ""
        attempt = 0
        failed_on: Endpoint | None = None
        while attempt <= self.max_retries:
            session = self._open()  # each attempt: the client may have been closed meanwhile
            request = self._request(messages, sampling, tools)
            ep = await session.acquire(avoid=failed_on)
            wait: float | None = None
            try:
                self._refuse_if_closed()  # closed while this request waited for an endpoint
                self.requests += 1
                self.retries += attempt > 0
                t0 = time.monotonic()
                async with asyncio.timeout(self.timeout_s):
                    with session.sending(ep) as sdk:
                        completion = await self._send(sdk, ep, request, sampling)
                ep.on_answer(time.monotonic() - t0)
                self._refusals = 0
                return self._redacted(completion)
            except openai.APIStatusError as exc:
                message = error_message(exc, self._secret)
                if exc.status_code in RETRY_STATUS or exc.status_code >= 500:
                    reason, wait = f"HTTP {exc.status_code}: {message}", retry_after(exc)
                    ep.on_failure(f"HTTP {exc.status_code}")
                elif exc.status_code in KEY_REFUSED_STATUS:
                    ep.on_failure(f"HTTP {exc.status_code}")
                    self._count_refusal(exc.status_code, message)
                    reason = f"HTTP {exc.status_code}: {message} (check the API key variable, -k NAME)"
                elif not CONTEXT_LENGTH.search(message) and self._adapt(exc, request):
                    continue  # sent again without a field the server refused: not a retry
                else:
                    ep.on_failure(f"HTTP {exc.status_code}")
                    raise self._refusal(exc, ep) from None
            except Exception as exc:
                transient = self._transient(exc, ep)
                if transient is None:
                    raise
                reason = transient
                if isinstance(exc, openai.APIConnectionError) and not isinstance(exc, openai.APITimeoutError):
                    wait = 0.0  # the endpoint rests: the next attempt waits for one that does not
            finally:
                session.give_back(ep)
            failed_on = ep
            attempt += 1
            if attempt <= self.max_retries and wait != 0.0:
                await asyncio.sleep(wait if wait is not None else self._backoff(attempt))
        where = f" at {self.base_url}" if self.base_url else ""
        raise ClientError(
            self._redact(
                f"model {self.name}{where} failed {self.max_retries + 1} times; last: " + " ".join(reason.split())
            )
        )

    async def _send(
        self, sdk: openai.AsyncOpenAI, ep: Endpoint, request: dict[str, Any], sampling: SamplingArgs
    ) -> Completion:
        """One request to one endpoint; streamed once that endpoint has timed out (a server
        cancels a stream the client hangs up on)."""
        if not ep.stream:
            # `post` sends the body as is: the messages are JSON already, and skipping
            # `chat.completions.create`'s param transform saves ~30% of client CPU
            response = await sdk.post("/chat/completions", body=request, cast_to=ChatCompletion)
            return parse_completion(response, sampling, split_tool_calls="tools" in request)
        body = {**request, "stream": True, "stream_options": {"include_usage": True}}
        stream = await sdk.post(
            "/chat/completions",
            body=body,
            cast_to=ChatCompletionChunk,
            stream=True,
            stream_cls=openai.AsyncStream[ChatCompletionChunk],
        )
        async with stream:  # closing it early (a timeout) hangs up: the server stops generating
            chunks = [chunk async for chunk in stream]
        return parse_completion(assemble_stream(chunks), sampling, split_tool_calls="tools" in request)

    def _request(
        self, messages: Messages, sampling: SamplingArgs, tools: list[dict[str, Any]] | None
    ) -> dict[str, Any]:
        request: dict[str, Any] = {
            "model": self.name,
            "messages": utf8_safe(messages),  # (a lone surrogate a server sent cannot go back as UTF-8)
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

    def _transient(self, exc: Exception, ep: Endpoint) -> str | None:
        """Why a request failed in a way that a retry may fix (a timeout, a connection error, a
        malformed response), in one line, after telling the endpoint; None for anything else
        (it propagates as it is)."""
        if isinstance(exc, (TimeoutError, openai.APITimeoutError)):
            ep.on_timeout()
            return f"no answer within {self.timeout_s:g} s"
        if isinstance(exc, openai.APIConnectionError) and isinstance(exc.__cause__, MalformedResponse):
            exc = exc.__cause__  # a body the response cap refused, as the SDK reports it
        elif isinstance(exc, openai.APIConnectionError):
            ep.on_unreachable(self._backoff(ep.unreachable + 1))
            cause = exc.__cause__ or exc
            return f"connection failed ({type(cause).__name__}: {cause})"
        if isinstance(exc, (ValueError, MalformedResponse, openai.APIResponseValidationError)):
            ep.on_failure("malformed")
            return f"malformed response ({type(exc).__name__}: {exc})"
        if isinstance(exc, openai.APIError):  # an error event inside a stream
            ep.on_failure("stream error")
            return f"the server broke off the stream ({error_message(exc, self._secret)})"
        return None

    def _refusal(self, exc: openai.APIStatusError, ep: Endpoint) -> ClientError:
        """The error for a 4xx that no retry can fix: `PromptTooLongError` for a context
        overflow, else `ClientError`."""
        message = error_message(exc, self._secret)
        if CONTEXT_LENGTH.search(message):
            return PromptTooLongError(f"model {self.name}: {message}")
        where = f" at {ep.url}" if ep.url else ""
        todo = unparsed_tool_call(message) or f"refused the request: HTTP {exc.status_code}: {message}"
        return ClientError(f"model {self.name}{where} {todo}")

    def _count_refusal(self, status: int, message: str) -> None:
        """Count a 401/403; at `KEY_REFUSALS_TO_STOP` in a row, stop for good (`KeyRefusedError`)."""
        self._refusals += 1
        if self._refusals >= KEY_REFUSALS_TO_STOP and self._stopped is None:
            where = f" at {self.base_url}" if self.base_url else ""
            self._stopped = (
                f"model {self.name}{where} refused the API key {self._refusals} times in a row "
                f"(HTTP {status}: {message}); stopped sending requests: check the key in ${self.api_key_var} "
                "or pass -k NAME to read it from another variable"
            )
        if self._stopped is not None:
            raise KeyRefusedError(self._stopped)

    def _redact(self, text: str) -> str:
        return redact(text, self._secret)

    def _redacted(self, completion: Completion) -> Completion:
        """`completion` with the API key replaced in its text and in its tool calls."""
        completion.text = self._redact(completion.text)
        for call in completion.tool_calls:
            call.name, call.arguments = self._redact(call.name), self._redact(call.arguments)
        return completion

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
