"""A cap on the size of every HTTP response an `OpenAIClient` reads, compressed and decompressed.

A server decides how much it sends, and a compressed body how much it becomes: a 1.04 MB gzip
body that expands to 1 GiB took one request to 2.17 GB of memory, and concurrent requests and
retries multiply that. `CappedTransport` wraps the SDK's HTTP transport: it asks only for the
encodings it decodes itself (gzip, deflate), decodes them in bounded slices, and stops a
response (`ResponseTooLarge`, a malformed response: retried, then an error record) once its
bytes on the wire or its decoded bytes pass the cap. The SDK's own HTTP library (httpx, or
httpx2 in newer SDKs) is used through the module the SDK itself imports.
"""

from __future__ import annotations

import importlib
import zlib
from collections.abc import AsyncIterator
from typing import Any

import openai

from rlvr.clients.openai_response import MalformedResponse

MAX_RESPONSE_MB = 32
"""The default cap, in MiB: a chat completion of 32k tokens with their logprobs is a few MiB."""
ACCEPT_ENCODING = "gzip, deflate"
SLICE = 1 << 16
"""Decoded bytes taken from the decompressor at once."""
_WBITS = {"gzip": 16 + zlib.MAX_WBITS, "deflate": 32 + zlib.MAX_WBITS, "x-gzip": 16 + zlib.MAX_WBITS}

httpx: Any = importlib.import_module(type(openai.DEFAULT_CONNECTION_LIMITS).__module__.split(".")[0])
"""The HTTP library the SDK was built on (httpx or httpx2: the same interface)."""


class ResponseTooLarge(MalformedResponse):
    """A response passed the size cap (on the wire or decoded)."""


class CappedStream(httpx.AsyncByteStream):
    """A response body read through a cap: decoded here (gzip, deflate) a slice at a time."""

    def __init__(self, inner: Any, encoding: str, max_bytes: int, url: str) -> None:
        self.inner, self.max_bytes, self.url = inner, max_bytes, url
        self.decoder = zlib.decompressobj(_WBITS[encoding]) if encoding in _WBITS else None
        self.received = self.decoded = 0

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for part in self.inner:
            self.received += len(part)
            self._check(self.received, "on the wire")
            for piece in self._decode(part):
                yield piece
        if self.decoder is not None:
            rest = self.decoder.flush()
            self._count(rest)
            if rest:
                yield rest

    def _decode(self, data: bytes) -> list[bytes]:
        if self.decoder is None:
            return [data] if data else []
        pieces = []
        try:
            while data:
                piece = self.decoder.decompress(data, SLICE)
                data = self.decoder.unconsumed_tail
                self._count(piece)
                pieces.append(piece)
        except zlib.error as exc:
            raise MalformedResponse(f"a body that does not decompress ({exc}) from {self.url}") from None
        return pieces

    def _count(self, piece: bytes) -> None:
        self.decoded += len(piece)
        self._check(self.decoded, "decompressed")

    def _check(self, size: int, where: str) -> None:
        if size > self.max_bytes:
            raise ResponseTooLarge(
                f"the response from {self.url} is larger than {self.max_bytes / 2**20:g} MiB {where}; stopped reading"
            )

    async def aclose(self) -> None:
        await self.inner.aclose()


class CappedTransport(httpx.AsyncBaseTransport):
    """The SDK's transport with every response body read through `CappedStream`."""

    def __init__(self, inner: Any, max_bytes: int) -> None:
        self.inner, self.max_bytes = inner, max_bytes

    async def handle_async_request(self, request: Any) -> Any:
        request.headers["Accept-Encoding"] = ACCEPT_ENCODING
        response = await self.inner.handle_async_request(request)
        encoding = response.headers.get("content-encoding", "identity").strip().lower()
        if encoding not in ("identity", "", *_WBITS):
            await response.aclose()
            raise MalformedResponse(f"a body in {encoding!r}, which was not asked for, from {request.url}")
        headers = [(k, v) for k, v in response.headers.raw if k.lower() not in (b"content-encoding", b"content-length")]
        return httpx.Response(
            status_code=response.status_code,
            headers=headers,
            stream=CappedStream(response.stream, encoding, self.max_bytes, str(request.url)),
            extensions=response.extensions,
        )

    async def aclose(self) -> None:
        await self.inner.aclose()


def capped_http_client(connections: int, max_bytes: int) -> Any:
    """The SDK's default HTTP client with `connections` kept-alive connections, every response
    capped at `max_bytes`."""
    limits = httpx.Limits(max_connections=connections, max_keepalive_connections=connections)
    transport = CappedTransport(httpx.AsyncHTTPTransport(limits=limits), max_bytes)
    return openai.DefaultAsyncHttpxClient(limits=limits, transport=transport)
