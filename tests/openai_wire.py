"""How tests/openai_server.py and tests/vllm_server.py serve: uvicorn on a free port in a
thread, request bodies read, JSON bodies, server-sent-event streams of chat-completion chunks,
and OpenAI's error objects."""

from __future__ import annotations

import json
import socket
import threading
import time
from typing import Any

import uvicorn


def serve_in_thread(app: Any, **settings: Any) -> tuple[uvicorn.Server, threading.Thread, int]:
    """Run ASGI `app` with uvicorn on a free port of 127.0.0.1 in a daemon thread; returns once
    it accepts connections: (server, thread, port). Stop it with `server.should_exit = True`."""
    # IPPROTO_TCP explicitly: asyncio sets TCP_NODELAY only then (else +40 ms a request)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    config = uvicorn.Config(app, lifespan="off", ws="none", http="h11", log_level="error", access_log=False, **settings)
    server = uvicorn.Server(config)

    def serve() -> None:
        try:
            server.run(sockets=[sock])
        finally:
            sock.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError(f"the test server {type(app).__name__} did not start")
        time.sleep(0.005)
    return server, thread, port


class ThreadedServer:
    """Base of the test servers: an ASGI app (the subclass's `__call__`) that `start` serves with
    `serve_in_thread` (uvicorn settings from `SETTINGS`) and `stop` stops; `with` does both."""

    SETTINGS: dict[str, Any] = {}
    port = 0
    _server: uvicorn.Server | None = None
    _thread: threading.Thread | None = None

    def start(self) -> Any:
        self._server, self._thread, self.port = serve_in_thread(self, **self.SETTINGS)
        return self

    def stop(self) -> None:
        if self._server is not None and self._thread is not None:
            self._server.should_exit = True
            self._thread.join(timeout=10)
            self._server = self._thread = None

    def __enter__(self) -> Any:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


async def read_body(receive: Any) -> bytes:
    """The whole body of an ASGI HTTP request."""
    chunks = []
    while True:
        message = await receive()
        chunks.append(message.get("body", b""))
        if not message.get("more_body"):
            return b"".join(chunks)


def reasoning_refusal(body: dict[str, Any]) -> dict[str, Any] | None:
    """OpenAI's answer (message, param, code) to what its reasoning models refuse."""
    if "max_tokens" in body:
        message = "Unsupported parameter: 'max_tokens' is not supported with this model. "
        message += "Use 'max_completion_tokens' instead."
        return error(message, "invalid_request_error", "max_tokens", "unsupported_parameter")
    for name in ("temperature", "top_p"):
        if body.get(name, 1) != 1:
            message = f"Unsupported value: '{name}' does not support {body[name]} with this model. "
            message += "Only the default (1) value is supported."
            return error(message, "invalid_request_error", name, "unsupported_value")
    return None


def context_error(limit: int, tokens: int) -> dict[str, Any]:
    """OpenAI's answer to a prompt longer than the model's context."""
    message = f"This model's maximum context length is {limit} tokens. However, your request has {tokens} "
    return error(message + "input tokens. Please reduce the length of the input messages.", "BadRequestError")


def token_logprob(index: int) -> float:
    """The logprob the server reports for the completion token at `index`."""
    return -0.125 * (index % 4)


def logprob_content(ids: list[int], as_ids: bool) -> list[dict[str, Any]]:
    """`choices[0].logprobs.content` for completion tokens `ids` (one character each); tokens
    read `token_id:N` when `as_ids` (vLLM's `return_tokens_as_token_ids`)."""
    return [
        {
            "token": f"token_id:{t}" if as_ids else chr(t),
            "logprob": token_logprob(i),
            "bytes": list(chr(t).encode("utf-8", "surrogatepass")),  # a lone surrogate too
            "top_logprobs": [],
        }
        for i, t in enumerate(ids)
    ]


def error(message: str, kind: str, param: str | None = None, code: str | None = None) -> dict:
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


async def send_json(send: Any, status: int, payload: Any) -> None:
    data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(data)).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": data})


def stream_chunks(completion: dict[str, Any], body: dict[str, Any]) -> list[dict[str, Any]]:
    """A chat completion as the chunks of a stream: role, text in up to three pieces (with
    their logprobs and token ids), each tool call's arguments in two parts, the finish reason,
    and the usage last when the request asks for it."""
    choice = completion["choices"][0]
    text = choice["message"]["content"] or ""
    logprobs = (choice.get("logprobs") or {}).get("content")
    ids = choice.get("token_ids")
    base = {k: completion[k] for k in ("id", "created", "model")} | {"object": "chat.completion.chunk"}

    def chunk(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> dict[str, Any]:
        return base | {"choices": [{"index": 0, "delta": delta, "finish_reason": finish, **extra}]}

    first = chunk({"role": "assistant", "content": ""})
    if ids is not None:
        first["prompt_token_ids"] = completion.get("prompt_token_ids")
    out = [first]
    step = max(1, -(-len(text) // 3))
    for start in range(0, len(text), step):
        end = min(start + step, len(text))
        extra: dict[str, Any] = {}
        if logprobs is not None:
            extra["logprobs"] = {"content": logprobs[start:end]}
        if ids is not None:
            extra["token_ids"] = ids[start:end]
        out.append(chunk({"content": text[start:end]}, **extra))
    done = len(text)
    for i, call in enumerate(choice["message"].get("tool_calls") or []):
        args = call["function"]["arguments"]
        half = len(args) // 2
        head = {"index": i, "id": call["id"], "type": "function", "function": {"name": call["function"]["name"]}}
        for part, more in ((args[:half], head), (args[half:], {"index": i, "function": {}})):
            extra = {}
            if logprobs is not None:
                extra["logprobs"] = {"content": logprobs[done : done + len(part)]}
            if ids is not None:
                extra["token_ids"] = ids[done : done + len(part)]
            done += len(part)
            delta_call = {**more, "function": {**more["function"], "arguments": part}}
            out.append(chunk({"tool_calls": [delta_call]}, **extra))
    out.append(chunk({}, choice["finish_reason"]))
    if (body.get("stream_options") or {}).get("include_usage"):
        out.append(base | {"choices": [], "usage": completion["usage"]})
    return out


async def send_stream(send: Any, chunks: list[dict[str, Any]]) -> None:
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/event-stream")]})
    for c in chunks:
        await send({"type": "http.response.body", "body": f"data: {json.dumps(c)}\n\n".encode(), "more_body": True})
    await send({"type": "http.response.body", "body": b"data: [DONE]\n\n"})
