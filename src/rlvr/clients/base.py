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
    """

    name: str
    """Model name, recorded in results metadata."""

    async def chat(
        self,
        messages: Messages,
        sampling: SamplingArgs,
        tools: list[dict[str, Any]] | None = None,
    ) -> Completion: ...
