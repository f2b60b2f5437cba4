"""A small OpenAI-compatible chat server for tests and benchmarks: a scripted model, faults.

`OpenAIServer` serves `POST /v1/chat/completions` (plain ASGI, run by uvicorn on 127.0.0.1 in
a background thread). Its "model" is a function `(messages, tools) -> str | Reply`. It speaks
the vLLM dialect for token ids: one token per character (id = `ord(c)`), `choices[0].token_ids`
and `prompt_token_ids` when asked with `return_token_ids`, logprob tokens as `token_id:N` when
asked with `return_tokens_as_token_ids`. With `strict=True` it rejects those extra fields the
way api.openai.com does.

Faults: `Faults` gives the share of requests answered with 429, 500, a hang (no answer until
the client gives up), or malformed JSON. Each request's fate is a seeded function of its body
and how often that body was seen, not of the order in which concurrent requests arrive;
`max_per_request` caps the faults of one request body. `force([...])` queues outcomes for the
next requests (also `context`: a context-length 400; `401`: the key refused, its message
holding `echo_key` as servers that echo the key they were sent do; `refuse_key=True` answers
every request so); `permanent` picks requests that always get a 500. `counts` tallies what
was served, `bodies` keeps the requests.

Streaming (`"stream": true`) answers the same completion as server-sent chunks
(`openai_wire.stream_chunks`). `sequential=True` with `delay_s` plays `transformers serve`: one
request computed at a time, a plain one to the end even after its client hung up, a stream
dropped when its client hangs up (`counts["computed"]`, `counts["cancelled"]`).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import random
import threading
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from openai_wire import (
    ThreadedServer,
    context_error,
    error,
    logprob_content,
    read_body,
    reasoning_refusal,
    send_json,
    send_stream,
    stream_chunks,
)

Messages = list[dict[str, Any]]
OUTCOMES = ("ok", "429", "500", "hang", "malformed")


@dataclass
class Reply:
    """What the scripted model answers: text, tool calls `(name, arguments)`, or both."""

    text: str = ""
    tool_calls: list[tuple[str, dict[str, Any] | str]] = field(default_factory=list)
    """Each call's arguments: a dict (sent as JSON) or the arguments string exactly as sent."""


ModelFn = Callable[[Messages, "list[dict[str, Any]] | None"], "str | Reply"]


def echo_model(messages: Messages, tools: list[dict[str, Any]] | None) -> str:
    """Answers `echo: <last user message>`."""
    last = next((m for m in reversed(messages) if m.get("role") == "user"), {})
    return f"echo: {last.get('content') or ''}"


@dataclass
class Faults:
    """Shares of requests (0..1) answered with each fault; the rest are answered normally."""

    rate_limit: float = 0.0
    server_error: float = 0.0
    hang: float = 0.0
    malformed: float = 0.0
    seed: int = 0
    max_per_request: int | None = None
    """At most this many faults for one request body (its retries then succeed); None: no cap."""

    def draw(self, key: str, seen: int = 1) -> str:
        """The fate of the `seen`-th arrival of the request body hashed to `key`."""
        if self.max_per_request is not None and seen > self.max_per_request:
            return "ok"
        key = f"{key}:{seen}"
        u = random.Random(f"{self.seed}:{key}").random()
        for outcome, share in (
            ("429", self.rate_limit),
            ("500", self.server_error),
            ("hang", self.hang),
            ("malformed", self.malformed),
        ):
            if u < share:
                return outcome
            u -= share
        return "ok"


def render_prompt(messages: Messages) -> str:
    """The text the fake tokenizer sees for a conversation (one token per character)."""
    return "".join(f"<{m.get('role')}>{m.get('content') or ''}\n" for m in messages) + "<assistant>"


class OpenAIServer(ThreadedServer):
    """An OpenAI-compatible endpoint on a free port of 127.0.0.1 (see the module docstring)."""

    SETTINGS = {"timeout_graceful_shutdown": 2, "backlog": 4096}

    def __init__(self, model: ModelFn = echo_model, **settings: Any) -> None:
        self.counts: Counter[str] = Counter()
        self.bodies: list[dict[str, Any]] = []
        self.in_flight = 0
        self._forced: deque[str] = deque()
        self._seen: Counter[str] = Counter()
        self._lock = threading.Lock()
        self._one_at_a_time: asyncio.Lock | None = None
        self.reset(model, **settings)

    def reset(
        self,
        model: ModelFn = echo_model,
        *,
        faults: Faults | None = None,
        permanent: Callable[[Messages], bool] | None = None,
        max_context: int | None = None,
        strict: bool = False,
        reasoning: bool = False,
        hang_s: float = 30.0,
        delay_s: float = 0.0,
        refuse_key: bool = False,
        echo_key: str = "",
        sequential: bool = False,
    ) -> None:
        """Back to a clean state (zero counts, nothing forced) with these settings."""
        with self._lock:
            self.model = model
            self.faults = faults or Faults()
            self.permanent = permanent
            """Requests (by their messages) that always get a 500."""
            self.max_context = max_context
            """Longest prompt (in characters = tokens) accepted; longer ones get a 400."""
            self.strict = strict
            """Reject vLLM-only request fields with a 400, like api.openai.com."""
            self.reasoning = reasoning
            """Like OpenAI's reasoning models: a 400 for `max_tokens` (`max_completion_tokens`
            is the one) and for a temperature or top_p other than 1."""
            self.hang_s = hang_s
            """Longest hang (the client normally hangs up first)."""
            self.delay_s = delay_s
            """Seconds each normal answer takes (to hold requests in flight)."""
            self.refuse_key = refuse_key
            """Answer every chat request 401 (GET /models still answers: 404)."""
            self.echo_key = echo_key
            """The key a 401's message says was sent (the real header is not read: a proxy
            between client and server may rewrite it)."""
            self.sequential = sequential
            """Compute one request at a time, plain ones to the end even for a client that left."""
            self.max_in_flight = 0
            self.counts.clear()
            self.bodies.clear()
            self._forced.clear()
            self._seen.clear()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def force(self, outcomes: list[str]) -> None:
        """Answer the next requests with these outcomes (then back to drawing from `faults`)."""
        unknown = set(outcomes) - set(OUTCOMES) - {"context", "401"}
        if unknown:
            raise ValueError(f"unknown outcomes {sorted(unknown)}; expected some of {OUTCOMES}")
        with self._lock:
            self._forced.extend(outcomes)

    # ---- lifecycle ------------------------------------------------------------------------

    # ---- ASGI -----------------------------------------------------------------------------

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        raw = await read_body(receive)
        if scope["path"] != "/v1/chat/completions" or scope["method"] != "POST":
            await send_json(send, 404, error(f"no route {scope['method']} {scope['path']}", "NotFound"))
            return
        try:
            body = json.loads(raw)
        except json.JSONDecodeError as exc:
            await send_json(send, 400, error(f"request body is not JSON: {exc}", "BadRequestError"))
            return
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            await self._respond(body, receive, send)
        finally:
            self.in_flight -= 1

    async def _respond(self, body: dict[str, Any], receive: Any, send: Any) -> None:
        status, payload = self._answer(body)
        if status == 200 and (self.delay_s or self.sequential):
            if not await self._work(bool(body.get("stream")), receive):
                return
        if status == "hang":
            await self._hang(receive)
            return
        if status == "malformed":
            await send_json(send, 200, b'{"id": "chatcmpl-broken", "choices": [{"index": 0, "mess')
            return
        if status == 200 and body.get("stream"):
            await send_stream(send, stream_chunks(payload, body))
            return
        await send_json(send, status, payload)

    async def _work(self, streamed: bool, receive: Any) -> bool:
        """Spend `delay_s` on a request (one at a time when `sequential`); False when a stream's
        client hung up first (the work is dropped, as servers do for streams)."""
        if not streamed:
            await self._compute()
            return True
        work = asyncio.ensure_future(self._compute())
        gone = asyncio.ensure_future(self._disconnect(receive))
        await asyncio.wait({work, gone}, return_when=asyncio.FIRST_COMPLETED)
        if work.done():
            gone.cancel()
            return True
        work.cancel()
        self.counts["cancelled"] += 1
        return False

    async def _compute(self) -> None:
        if self._one_at_a_time is None:
            self._one_at_a_time = asyncio.Lock()
        async with self._one_at_a_time if self.sequential else contextlib.nullcontext():
            await asyncio.sleep(self.delay_s)
            self.counts["computed"] += 1

    @staticmethod
    async def _disconnect(receive: Any) -> None:
        while (await receive())["type"] != "http.disconnect":
            pass

    async def _hang(self, receive: Any) -> None:
        """Say nothing until the client hangs up (or `hang_s` passes)."""
        try:
            async with asyncio.timeout(self.hang_s):
                while (await receive())["type"] != "http.disconnect":
                    pass
        except TimeoutError:
            pass

    def _answer(self, body: dict[str, Any]) -> tuple[Any, Any]:
        """(status, JSON payload), or ("hang" | "malformed", None)."""
        messages = body.get("messages") or []
        with self._lock:
            self.counts["requests"] += 1
            self.bodies.append(body)
            key = hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()
            self._seen[key] += 1
            if self._forced:
                outcome = self._forced.popleft()
            elif self.refuse_key:
                outcome = "401"
            elif self.permanent is not None and self.permanent(messages):
                outcome = "500"
            else:
                outcome = self.faults.draw(key, self._seen[key])
            self.counts[outcome] += 1
        if outcome == "429":
            return 429, error("Rate limit reached; try again later.", "rate_limit_error")
        if outcome == "401":
            return 401, error(
                f"Incorrect API key provided: {self.echo_key}.", "invalid_request_error", code="invalid_api_key"
            )
        if outcome == "500":
            return 500, error("Internal server error (injected).", "server_error")
        if outcome in ("hang", "malformed"):
            return outcome, None
        if self.strict:
            extra = sorted(set(body) & {"return_token_ids", "return_tokens_as_token_ids"})
            if extra:
                return 400, error(f"Unrecognized request argument supplied: {extra[0]}", "invalid_request_error")
        if self.reasoning:
            refused = reasoning_refusal(body)
            if refused:
                return 400, refused
        prompt = render_prompt(messages)
        limit = self.max_context
        if outcome == "context" or (limit is not None and len(prompt) > limit):
            self.counts["context_length"] += 1
            return 400, context_error(limit or 0, len(prompt))
        return 200, self._completion(body, prompt)

    def _completion(self, body: dict[str, Any], prompt: str) -> dict[str, Any]:
        reply = self.model(body.get("messages") or [], body.get("tools"))
        if isinstance(reply, str):
            reply = Reply(text=reply)
        text, finish = reply.text, "tool_calls" if reply.tool_calls else "stop"
        for s in body.get("stop") or []:
            if s in text:
                text, finish = text[: text.index(s)], "stop"
        calls = [
            {
                "id": f"call_{self.counts['requests']}_{i}",
                "type": "function",
                "function": {"name": name, "arguments": args if isinstance(args, str) else json.dumps(args)},
            }
            for i, (name, args) in enumerate(reply.tool_calls)
        ]
        sampled = text + "".join(c["function"]["arguments"] for c in calls)
        cap = body.get("max_tokens", body.get("max_completion_tokens"))
        if cap is not None and len(sampled) > cap:
            text, calls, finish = text[:cap], [], "length"  # cut mid-reply
            sampled = text
        ids = [ord(c) for c in sampled]
        choice: dict[str, Any] = {
            "index": 0,
            "message": {
                "role": "assistant",
                "content": text or (None if calls else ""),
                **({"tool_calls": calls} if calls else {}),
            },
            "logprobs": None,
            "finish_reason": finish,
        }
        if body.get("logprobs"):
            as_ids = bool(body.get("return_tokens_as_token_ids"))
            choice["logprobs"] = {"content": logprob_content(ids, as_ids)}
        out: dict[str, Any] = {
            "id": f"chatcmpl-{self.counts['requests']}",
            "object": "chat.completion",
            "created": 0,
            "model": body.get("model", "scripted"),
            "choices": [choice],
            "usage": {
                "prompt_tokens": len(prompt),
                "completion_tokens": len(ids),
                "total_tokens": len(prompt) + len(ids),
            },
        }
        if body.get("return_token_ids"):
            choice["token_ids"] = ids
            out["prompt_token_ids"] = [ord(c) for c in prompt]
        return out
