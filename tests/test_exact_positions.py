"""Exact evaluation's bound on the positions a model answers at once (`enumerate_games(positions=)`)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from rlvr.errors import UsageError
from rlvr.exact import enumerate_games
from rlvr.registry import load_environment
from rlvr.types import Completion, Messages, SamplingArgs

GREEDY = SamplingArgs(temperature=0.0, max_tokens=48)


class Counting:
    """A client that answers as `inner` does, after a few turns of the event loop, and records
    how many calls were in flight at once and how long each conversation was."""

    def __init__(self, inner: Any) -> None:
        self.inner, self.name = inner, "counting"
        self.now = self.most = 0
        self.lengths: list[int] = []

    async def chat(self, messages: Messages, sampling: SamplingArgs, tools: Any = None) -> Completion:
        self.now += 1
        self.most = max(self.most, self.now)
        self.lengths.append(len(messages))
        try:
            for _ in range(3):
                await asyncio.sleep(0)
            return await self.inner.chat(messages, sampling, tools)
        finally:
            self.now -= 1

    async def aclose(self) -> None:
        pass


def walk(positions: int | None) -> tuple[Any, Counting, list[int]]:
    env = load_environment("tictactoe")
    client = Counting(env.policies()["teacher"]())
    answers: list[int] = []
    result = asyncio.run(
        enumerate_games(env, client, GREEDY, concurrency=256, positions=positions, on_answer=answers.append)
    )
    return result, client, answers


def test_a_bound_on_positions_holds_and_changes_no_number() -> None:
    free, free_client, _ = walk(None)
    bounded, client, answers = walk(4)
    # bounded: the bound, and past it only the siblings that enter together (at most the 8
    # replies O has to X's first move, so 7 past it); unbounded, the lines in flight all ask
    assert 4 <= client.most <= 4 + 7 < free_client.most
    assert bounded.summary()["rates_pct"] == free.summary()["rates_pct"]
    assert [g.task_id for g in bounded.games] == [g.task_id for g in free.games]
    assert bounded.model_calls == free.model_calls == len(client.lengths)
    assert answers == list(range(1, bounded.model_calls + 1))  # a count after each answer


def test_the_longest_conversation_goes_first_so_games_end_all_along() -> None:
    env = load_environment("tictactoe")
    teacher = env.policies()["teacher"]()

    class Slow:  # a model takes a while to answer: the lines it answered move on meanwhile
        name = "slow"

        async def chat(self, messages: Messages, sampling: SamplingArgs, tools: Any = None) -> Completion:
            await asyncio.sleep(0.002)
            return await teacher.chat(messages, sampling, tools)

        async def aclose(self) -> None:
            pass

    answers: list[int] = []
    first_game: list[int] = []
    asyncio.run(
        enumerate_games(
            env,
            Slow(),
            GREEDY,
            concurrency=256,
            positions=1,
            on_answer=answers.append,
            on_game=lambda game: first_game.append(len(answers)) if not first_game else None,
        )
    )
    # depth first: a game ends after the positions of its own line and their siblings; in arrival
    # order it would end only after every position of the first two moves (82)
    assert first_game and first_game[0] <= 40, first_game


def test_a_bound_below_one_is_refused() -> None:
    env = load_environment("tictactoe")
    with pytest.raises(UsageError, match="positions must be >= 1"):
        asyncio.run(enumerate_games(env, env.policies()["teacher"](), GREEDY, positions=0))


@pytest.fixture(scope="module")
def shipped() -> Any:
    pytest.importorskip("torch")
    from rlvr.clients.local import LocalModel

    return LocalModel("models/tictactoe-tiny", device="cpu", max_batch_size=1024)


def test_a_local_model_on_the_cpu_walks_with_a_bounded_batch_and_cache(shipped: Any) -> None:
    from rlvr.commands.exact import CPU_CACHE_BYTES, CPU_POSITIONS, walk_client

    client = shipped
    walker, positions = walk_client(client, 1024)
    assert positions == CPU_POSITIONS and walker is not client and walker.model is client.model
    assert walker.max_batch_size == 2 * CPU_POSITIONS and walker.prefix is not None
    assert walker.prefix.max_bytes == CPU_CACHE_BYTES < (client.prefix.max_bytes if client.prefix else 0)
    # siblings in several admissions each find their parent; the client's own cache drops it
    assert not walker.prefix.drop_extended and client.prefix is not None and client.prefix.drop_extended
    assert walk_client(client, 8)[1] == 8  # fewer lines than the bound: the lines bound it
    policy = load_environment("tictactoe").policies()["teacher"]()
    assert walk_client(policy, 1024) == (policy, None)


def test_kept_keys_and_values_hold_only_their_own_bytes(shipped: Any) -> None:
    """Rows that finish together are copied out of their slots at once; each reuse-cache entry
    must then be a copy of its own part, not a view that keeps the whole copy alive (the cache
    counts an entry's own bytes: views made it hold several times its bound)."""
    from rlvr.clients.local import LocalModel

    client = LocalModel("shipped", model=shipped.model, tokenizer=shipped.tokenizer, max_batch_size=8)
    sampling = SamplingArgs(temperature=0.0, max_tokens=6)

    async def play() -> list[Any]:
        prompts = [[{"role": "user", "content": f"Take cell {i}."}] for i in range(4)]
        await asyncio.gather(*(client.chat(p, sampling) for p in prompts))
        await client.chat([{"role": "user", "content": "One more, to keep the others."}], sampling)
        assert client.prefix is not None
        kept = [entry.kv for entry in client.prefix.entries.values()]
        await client.aclose()
        return kept

    kept = asyncio.run(play())
    assert len(kept) >= 4
    for t in (t for kv in kept for t in kv):
        assert t.untyped_storage().nbytes() == t.numel() * t.element_size()
