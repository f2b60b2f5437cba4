"""What an RL run holds from start to end besides the model: its environments, one event loop,
and the per-step seeding of generation requests.

- Environments are built once per distinct argument set (the training set and each
  evaluation set; equal arguments share one environment) and closed at the end.
- One `asyncio.Runner` serves the whole run: environments may hold resources bound to the
  loop that created them (servers, connections). `asyncio.run` per step would strand them.
- Each request's seed mixes the run seed, the step and the engine's per-rollout, per-turn seed,
  so a task drawn again later gets fresh samples while a resumed run replays exactly.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Callable, Coroutine, Iterator
from typing import Any, TypeVar

from rlvr.clients.base import ChatClient
from rlvr.envs.multiturn import MultiTurnEnv
from rlvr.seeding import mix_seed
from rlvr.train.given import give_reply
from rlvr.train.logging import MetricsLog
from rlvr.types import Completion, Messages, SamplingArgs

EnvFactory = Callable[..., MultiTurnEnv[Any]]
T = TypeVar("T")
RunAsync = Callable[[Coroutine[Any, Any, T]], T]


class Envs:
    """Environments by their arguments, each built once (`max_turns` overrides theirs)."""

    def __init__(self, make_env: EnvFactory, max_turns: int | None) -> None:
        self.make_env, self.max_turns = make_env, max_turns
        self.built: dict[str, MultiTurnEnv[Any]] = {}

    def get(self, args: dict[str, Any]) -> MultiTurnEnv[Any]:
        key = json.dumps(args, sort_keys=True, default=str)
        if key not in self.built:
            env = self.make_env(**args)
            if self.max_turns is not None:
                env.max_turns = self.max_turns
            self.built[key] = env
        return self.built[key]

    async def aclose(self) -> None:
        for env in self.built.values():
            await env.aclose()


@contextlib.contextmanager
def event_loop(envs: Envs, log: MetricsLog | None) -> Iterator[RunAsync[Any]]:
    """One event loop for the whole run (yields its `run`); closes the environments and the
    log whatever happens."""
    runner = asyncio.Runner()
    try:
        yield runner.run
    finally:
        try:
            runner.run(envs.aclose())
        finally:
            runner.close()
            if log is not None:
                log.close()  # waits for the plots being drawn


class StepSeeded:
    """A client whose request seeds also mix in (run seed, step)."""

    def __init__(self, client: ChatClient, seed: int, step: int) -> None:
        self.client, self.seed, self.step, self.name = client, seed, step, client.name

    async def chat(
        self, messages: Messages, sampling: SamplingArgs, tools: list[dict[str, Any]] | None = None
    ) -> Completion:
        seed = mix_seed(self.seed, self.step, sampling.seed or 0)
        return await self.client.chat(messages, sampling.replace(seed=seed), tools)

    async def give(self, messages: Messages, text: str, tools: list[dict[str, Any]] | None = None) -> Completion:
        """The wrapped client's `give` (a reply given, not sampled: no seed to mix)."""
        return await give_reply(self.client, messages, text, tools)

    async def aclose(self) -> None:
        """The wrapped client belongs to the trainer, which closes it."""
