"""Given replies: a rollout's first reply given rather than sampled (`restart_explore`).

The trainer's restarts (`rlvr.train.restarts`) choose, for some rollouts of a restart, a reply
the environment offers (`Explorable.other_replies`); `GivenFirst` wraps the step's client so
that each of those rollouts' first request is answered with that text, as the ids the model
would have sampled for it (`GivingClient.give`: `LocalModel` can), and the rest of the episode
is the model's own. The engine knows nothing of it.
"""

from __future__ import annotations

from typing import Any

from rlvr.clients.base import ChatClient
from rlvr.errors import UsageError
from rlvr.train.protocols import GivingClient
from rlvr.types import Completion, Messages, SamplingArgs


async def give_reply(
    client: ChatClient, messages: Messages, text: str, tools: list[dict[str, Any]] | None = None
) -> Completion:
    """`client.give(messages, text, tools)`: `text` as the reply, as the ids it would be sampled
    as; `UsageError` for a client that cannot give one (not a `GivingClient`)."""
    if not isinstance(client, GivingClient):
        raise UsageError(f"{type(client).__name__} cannot give a reply (it has no `give`); sample it instead")
    return await client.give(messages, text, tools)


class GivenFirst:
    """`client`, except that the first request of each rollout given a reply gets that reply,
    given (`give_reply`), and the rest of its episode is the model's own. A rollout is known by
    its first request as the engine sends it: the seed of its first turn (`MultiTurnEnv` seeds
    turn t of rollout i with `mix_seed(rollout_seed(task, i), t)`) and a conversation that
    begins with its task's prompt; each is given once. Restarts of one game share its seed, so a
    seed holds a list, and a request takes the entry of the longest prompt it begins with (a
    later restart's conversation begins with an earlier one's prompt). (An env whose `begin`
    asks the model something first would have that request given the text.)"""

    def __init__(self, client: ChatClient, firsts: dict[int, list[tuple[Messages, str]]]) -> None:
        self.client, self.name = client, client.name
        self.firsts = {seed: list(entries) for seed, entries in firsts.items()}

    async def chat(
        self, messages: Messages, sampling: SamplingArgs, tools: list[dict[str, Any]] | None = None
    ) -> Completion:
        entries = self.firsts.get(sampling.seed, []) if sampling.seed is not None else []
        fits = [e for e in entries if list(messages[: len(e[0])]) == e[0]]
        if not fits:
            return await self.client.chat(messages, sampling, tools)
        first = max(fits, key=lambda e: len(e[0]))
        entries.remove(first)
        return await give_reply(self.client, messages, first[1], tools)

    async def aclose(self) -> None:
        """The wrapped client is the caller's, who closes it."""
