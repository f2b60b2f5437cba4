"""What the model has done while rollouts are still in flight, for progress lines.

A rollout ends after all its turns, and a run's rollouts often finish together (32 in flight on
one batched local model), so counting finished rollouts alone leaves minutes without a line.
`CountingClient` wraps the run's `ChatClient` and counts each model turn as it comes back, with
its completion tokens; its `activity()` is what `rlvr.progress.Progress` shows beside the count.
"""

from __future__ import annotations

from typing import Any

from rlvr.types import Completion, Messages, SamplingArgs


class CountingClient:
    """`client`, counting finished turns, their tokens and the turns in flight (anything else is
    the wrapped client's: its name, endpoints and stats).

    >>> import asyncio
    >>> from rlvr import Policy
    >>> client = CountingClient(Policy(lambda messages, rng: "hi", name="echo"))
    >>> _ = asyncio.run(client.chat([{"role": "user", "content": "x"}], SamplingArgs()))
    >>> client.name, client.activity()
    ('policy:echo', 'turns 1 done, 0 in flight')
    """

    def __init__(self, client: Any, counter: CountingClient | None = None) -> None:
        self.client = client
        self.name: str = client.name
        self.turns = 0
        self.in_flight = 0
        self.tokens = 0
        self.counter = counter or self
        """where the counts go: itself, or the counter of the mixture player it is a member of"""

    def player(self) -> Any:
        """What the run plays with: this client, or, for a mixture's per-member player (which only
        its mixture may call, as itself), the same player with each member counted here."""
        from rlvr.mixture import MixedPlayer

        if not isinstance(self.client, MixedPlayer):
            return self
        members = {name: CountingClient(p, counter=self) for name, p in self.client.players.items()}
        return MixedPlayer(members, self.client.name)

    async def chat(
        self, messages: Messages, sampling: SamplingArgs, tools: list[dict[str, Any]] | None = None
    ) -> Completion:
        counter = self.counter
        counter.in_flight += 1
        try:
            completion = await self.client.chat(messages, sampling, tools)
        finally:
            counter.in_flight -= 1
        counter.turns += 1
        counter.tokens += completion.usage.completion_tokens
        return completion

    async def aclose(self) -> None:
        await self.client.aclose()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.client, name)

    def activity(self) -> str:
        """Turns done and in flight, tokens of the finished ones where the client counts them, and
        a local model's decode steps (which move while a turn is being written)."""
        parts = [f"turns {self.turns:,} done, {self.in_flight} in flight"]
        if self.tokens:
            parts.append(f"{self.tokens:,} tokens")
        steps = getattr(getattr(self.client, "stats", None), "decode_steps", None)
        if isinstance(steps, int) and steps:
            parts.append(f"{steps:,} decode steps")
        return ", ".join(parts)
