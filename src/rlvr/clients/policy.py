"""Policy: a Python function used as a model (reference players, teachers, scripted tests)."""

from __future__ import annotations

import inspect
import random
from collections.abc import Awaitable, Callable
from typing import Any

from rlvr.types import Completion, Messages, SamplingArgs

PolicyFn = Callable[..., "str | Completion | Awaitable[str | Completion]"]


class Policy:
    """Wraps `fn(messages, rng)` (sync or async) returning the reply text or a `Completion`.

    `rng` is a `random.Random` seeded from the request's sampling seed, so a policy is
    reproducible under the engine's seeding. A function that also takes `tools` receives the
    tool schemas of the request.

    >>> import asyncio
    >>> echo = Policy(lambda messages, rng: messages[-1]["content"], name="echo")
    >>> asyncio.run(echo.chat([{"role": "user", "content": "hi"}], SamplingArgs())).text
    'hi'
    """

    def __init__(self, fn: PolicyFn, name: str = "policy") -> None:
        self.fn = fn
        self.name = f"policy:{name}"
        self._takes_tools = "tools" in inspect.signature(fn).parameters
        self.calls = 0

    async def chat(
        self,
        messages: Messages,
        sampling: SamplingArgs,
        tools: list[dict[str, Any]] | None = None,
    ) -> Completion:
        self.calls += 1
        rng = random.Random(sampling.seed)
        kwargs: dict[str, Any] = {"tools": tools} if self._takes_tools else {}
        out = self.fn(list(messages), rng, **kwargs)
        if inspect.isawaitable(out):
            out = await out
        if isinstance(out, Completion):
            return out
        if not isinstance(out, str):
            raise TypeError(f"policy {self.name} returned {type(out).__name__}; expected str or Completion")
        return Completion(text=out)

    async def aclose(self) -> None:
        """Nothing to release: a policy is a function (it goes on answering)."""
