"""The one interface the engine and the trainer use to talk to a model."""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

from rlvr.types import Completion, Messages, SamplingArgs


@runtime_checkable
class ChatClient(Protocol):
    """Anything that answers a conversation with one completion.

    Implementations: `OpenAIClient` (any OpenAI-compatible HTTP endpoint), `LocalModel`
    (transformers, in-process, batched), `Policy` (a Python function). `chat` raises
    `ClientError` once retries are exhausted and `PromptTooLongError` when the conversation no
    longer fits the context window.

    Lifecycle: a client is ready when built, and `aclose()` releases what it holds, for good.
    `OpenAIClient` holds HTTP connections and `LocalModel` a worker thread and KV caches: after
    `aclose()` their `chat` raises `ClientClosedError`. `Policy` holds nothing; its `aclose`
    does nothing and it goes on answering.
    """

    name: str
    """Model name, recorded in results metadata."""

    async def chat(
        self,
        messages: Messages,
        sampling: SamplingArgs,
        tools: list[dict[str, Any]] | None = None,
    ) -> Completion: ...

    async def aclose(self) -> None:
        """Release the client's connections, threads and caches (in the event loop that used
        it; calling it again does nothing)."""
        ...


@runtime_checkable
class RemoteClient(ChatClient, Protocol):
    """A `ChatClient` of a model behind a network endpoint, which a run can probe first."""

    async def check(self) -> None:
        """Fail fast, with one line (`ClientError`), when the endpoint cannot be reached."""
        ...
