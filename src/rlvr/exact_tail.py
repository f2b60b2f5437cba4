"""The tail of an exact walk, sampled: what the games it did not play add to each number
(`rlvr eval ENV --exhaustive -T 1 --tail-games N`).

A walk over exact reply distributions (`rlvr.exact_sampled`, every decision enumerated) knows
each number's probability over the games it played exactly. What it did not play is known as a
mass, not as games: replies an enumeration left unlisted (`Decision.unexplored`) and listed
replies whose reach fell below `min_reach`. `rlvr.exact_bounds` puts that whole mass on the
upper side of every number: for a model whose rare wordings are many, the tail's mass (a few
points) is the width of the interval. Here the tail is played, by sampling its own law:

1. an exit, a decision with unplayed mass and which part of it, drawn in proportion to that
   mass against the opponent (the opponent's line weight x the policy's reach x the part);
2. a reply from that part: an unplayed listed reply as it is; for the unlisted part, one drawn
   from the unlisted replies' own law by a client that can (`draw_unlisted`: a local model,
   `rlvr.clients.local_unlisted`), else `chat` drawn at the decision's conversation until a
   reply the list lacks comes (the first such is a draw from that law), at most `max_tries`;
3. the game played on from there: each later decision of the policy one `chat` draw, each
   opponent move drawn by the opponent's line weights (`tree_children`, `tree_weights`).

Each of the N games so drawn is an independent draw of a game given that it leaves the played
tree, so a number's probability is the played part (exact) plus the tail's mass times the
number's share among these games, and the KL bound on that share with N draws bounds it. A game
that could not be had (no unlisted reply within `max_tries`, or a client error) counts as 0 on
the lower side and 1 on the upper. Cost: a game's decisions, plus for each unlisted exit one
direct draw, or about 1 / (the decision's unlisted share) `chat` draws by rejection.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlvr.engine import rollout_seed, score_group
from rlvr.errors import ClientError
from rlvr.exact import ERROR
from rlvr.exact_bounds import Decision, kl_lower, kl_upper, numbers_of
from rlvr.seeding import mix_seed
from rlvr.types import Completion, Messages, SamplingArgs, Task

MAX_TRIES = 4096
"""`chat` draws at most for one reply from a decision's unlisted part."""


@dataclass
class Context:
    """Where a decision was met: the line's task, the policy's replies before it, and the
    conversation it was asked (to draw more replies there)."""

    task: Task
    replies: list[str]
    messages: Messages
    tools: Any = None


@dataclass
class Tail:
    """The tail against one opponent: its mass and what its drawn games showed."""

    mass: float
    games: int = 0
    hits: dict[str, int] = field(default_factory=dict)
    """number -> drawn games with it"""
    unknown: int = 0
    """drawn games that could not be had (counted 0 below, 1 above)"""
    tries: int = 0
    """`chat` draws spent on unlisted replies"""

    def to_dict(self) -> dict[str, Any]:
        return {"mass": self.mass, "games": self.games, "hits": self.hits, "unknown": self.unknown, "tries": self.tries}


@dataclass
class TailRecords:
    """Tail games kept across runs (`rlvr eval --exhaustive --resume`): each game is a record
    {opponent, game (its number), exit (a digest of where it left the played tree), leaf, tries}."""

    done: dict[tuple[str, int], dict[str, Any]] = field(default_factory=dict)
    """an earlier run's games by (opponent, number): taken again where the same exit was drawn"""
    write: Callable[[dict[str, Any]], None] | None = None
    """called with each game played"""

    @classmethod
    def read(cls, path: Path, write: Callable[[dict[str, Any]], None] | None = None) -> TailRecords:
        """The records in JSON-lines file `path` (none if it is missing; a line cut by a kill is skipped)."""
        done: dict[tuple[str, int], dict[str, Any]] = {}
        if path.exists():
            for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
                try:
                    r = json.loads(line)
                    done[(str(r["opponent"]), int(r["game"]))] = r
                except (ValueError, KeyError, TypeError):
                    continue
        return cls(done, write)


def exits(decisions: Sequence[Decision], opponent: str) -> list[tuple[float, int, int | None]]:
    """(mass, decision id, reply index or None for the unlisted part) of every unplayed part."""
    out: list[tuple[float, int, int | None]] = []
    for d in decisions:
        base = float(d.weights.get(opponent, 0.0)) * d.reach
        if base <= 0.0:
            continue
        if d.unexplored > 0.0:
            out.append((base * d.unexplored, d.id, None))
        played = d.played or [False] * len(d.probs)
        out.extend((base * p, d.id, j) for j, (p, on) in enumerate(zip(d.probs, played)) if p > 0.0 and not on)
    return out


class _Draws:
    """The policy of a tail game: the replies given, then one seeded `chat` draw a decision."""

    def __init__(self, client: Any, replies: list[str], seed: int) -> None:
        self.client, self.replies, self.seed, self.turn = client, replies, seed, 0
        self.name = client.name

    async def chat(self, messages: Messages, sampling: SamplingArgs, tools: Any = None) -> Completion:
        turn = self.turn
        self.turn += 1
        if turn < len(self.replies):
            return Completion(text=self.replies[turn], finish_reason="given")
        drawn = await self.client.chat(messages, sampling.replace(seed=mix_seed(self.seed, turn)), tools)
        self.replies.append(drawn.text)
        return Completion(text=drawn.text)

    async def aclose(self) -> None:
        """The wrapped client belongs to the caller."""


async def _unlisted(
    client: Any, ctx: Context, listed: set[str], sampling: SamplingArgs, seed: int, max_tries: int
) -> tuple[str | None, int]:
    """A reply from the unlisted part of the decision's law, and the draws spent: one, from a
    client that draws there directly (`draw_unlisted`, a local model); else the first of seeded
    `chat` draws that the list lacks, judged by the drawn ids where the client says which it
    listed (`listed_ids`: one text can come from ids its enumeration did not reach, and that
    mass is unlisted), else by the text."""
    if hasattr(client, "draw_unlisted"):
        direct = await client.draw_unlisted(ctx.messages, sampling, ctx.tools, seed=seed)
        if direct is not None:
            return direct.text, 1
    known = client.listed_ids(ctx.messages, ctx.tools) if hasattr(client, "listed_ids") else None
    tries = 0
    while tries < max_tries:
        n = min(16 if tries else 1, max_tries - tries)  # one first: a decision never enumerated lists nothing
        drawn = await asyncio.gather(
            *(client.chat(ctx.messages, sampling.replace(seed=mix_seed(seed, tries + i)), ctx.tools) for i in range(n))
        )
        tries += n
        for c in drawn:
            if c.text not in listed if known is None or c.token_ids is None else tuple(c.token_ids) not in known:
                return c.text, tries
    return None, tries


async def _play_on(
    env: Any, client: Any, ctx: Context, reply: str, opponent: str, seed: int, sampling: SamplingArgs
) -> dict[str, Any]:
    """The game after `reply` at the decision, drawn to its end; its leaf (outcome, rejected moves)."""
    rng, task, replies = random.Random(seed), ctx.task, [*ctx.replies, reply]
    while True:
        state = await env.rollout(_Draws(client, replies, seed), task, sampling, rollout_seed(task, 0))
        children = [] if state.error is not None else env.tree_children(state)
        weights = [float(env.tree_weights(c).get(opponent, 0.0)) for c in children]
        if not children or sum(weights) <= 0.0:
            break
        task = rng.choices(children, weights=weights)[0]
    (game,) = await score_group(env, task, [0], [state])
    return {"outcome": ERROR} if game.error is not None else dict(env.tree_leaf(state))


async def sample_tail(
    env: Any,
    client: Any,
    sampling: SamplingArgs,
    decisions: Sequence[Decision],
    contexts: dict[int, Context],
    opponents: Sequence[str],
    outcomes: Sequence[str],
    games: int,
    *,
    seed: int = 0,
    concurrency: int = 64,
    max_tries: int = MAX_TRIES,
    on_game: Callable[[str, Tail], None] | None = None,
    records: TailRecords | None = None,
) -> dict[str, Tail]:
    """`games` tail games against each opponent (see the module docstring); `on_game(opponent,
    tail)` after each. With `records`, a game an earlier run played from the same exit is taken
    from it, and each game played is written."""
    numbers = numbers_of(outcomes)
    by_id = {d.id: d for d in decisions}
    gate = asyncio.Semaphore(concurrency)
    tails: dict[str, Tail] = {}
    for o, opponent in enumerate(opponents):
        # in an order of their own, not the walk's (decisions are numbered as their replies
        # come): the same seed draws the same games
        parts = sorted(exits(decisions, opponent), key=lambda part: _key(by_id[part[1]], contexts[part[1]], part[2]))
        tail = tails[opponent] = Tail(sum(p[0] for p in parts), hits=dict.fromkeys(numbers, 0))
        if not parts or tail.mass <= 0.0:
            continue
        picks = random.Random(mix_seed(seed, o)).choices(parts, weights=[p[0] for p in parts], k=games)

        async def one(i: int, pick: tuple[float, int, int | None], opponent: str = opponent, tail: Tail = tail) -> None:
            _, n, j = pick
            d, ctx = by_id[n], contexts[n]
            where = hashlib.sha256(repr(_key(d, ctx, j)).encode()).hexdigest()[:16]
            saved = records.done.get((opponent, i)) if records is not None else None
            if saved is not None and saved.get("exit") == where and saved.get("leaf") is not None:
                leaf, tries = saved["leaf"], int(saved.get("tries", 0))  # an earlier run played it
            else:
                async with gate:
                    leaf, tries = await _game(
                        env, client, sampling, d, ctx, j, opponent, mix_seed(seed, 1 + o, i), max_tries
                    )
                if records is not None and records.write is not None:
                    records.write({"opponent": opponent, "game": i, "exit": where, "leaf": leaf, "tries": tries})
            tail.games += 1
            tail.tries += tries
            if leaf is None:
                tail.unknown += 1
            else:
                for name, fn in numbers.items():
                    tail.hits[name] += bool(fn(leaf))
            if on_game is not None:
                on_game(opponent, tail)

        await asyncio.gather(*(one(i, pick) for i, pick in enumerate(picks)))
    return tails


async def _game(
    env: Any, client: Any, sampling: SamplingArgs, d: Decision, ctx: Context, j: int | None, opponent: str,
    seed: int, max_tries: int,
) -> tuple[dict[str, Any] | None, int]:  # fmt: skip
    """One tail game from exit (decision `d`, reply `j` or None: unlisted): its leaf (None: not
    had) and the `chat` draws spent on its unlisted reply."""
    tries = 0
    try:
        if j is None:
            reply, tries = await _unlisted(client, ctx, set(d.replies), sampling, seed, max_tries)
        else:
            reply = d.replies[j]
        return (None if reply is None else await _play_on(env, client, ctx, reply, opponent, seed, sampling)), tries
    except ClientError:
        return None, tries


def _key(decision: Decision, ctx: Context, reply: int | None) -> tuple[str, str]:
    """An exit's place in the draw: its conversation, then its reply ("" first: the unlisted part)."""
    return json.dumps(ctx.messages, sort_keys=True, default=str), "" if reply is None else "+" + decision.replies[reply]


def tighten(table: dict[str, dict[str, Any]], tails: dict[str, Tail], delta: float) -> dict[str, dict[str, Any]]:
    """`Bounds.table`'s rows of an all-exact walk with the tail's share added: the estimate is
    the played part plus mass x the share among the tail games, each bound intersected with
    played part + mass x the KL bound on that share (level `delta` over every bound used)."""
    sides = 2 * sum(len(t.hits) for t in tails.values())
    level = delta / max(1, sides)
    out: dict[str, dict[str, Any]] = {}
    for opponent, rows in table.items():
        tail = tails.get(opponent)
        out[opponent] = dict(rows)
        if tail is None or tail.games == 0:
            continue
        for name, hits in tail.hits.items():
            if name not in rows:
                continue
            played, lo, hi = rows[name]
            share = hits / tail.games
            low = played + tail.mass * kl_lower(share, tail.games, level)
            high = played + tail.mass * kl_upper((hits + tail.unknown) / tail.games, tail.games, level)
            out[opponent][name] = (played + tail.mass * share, max(lo, low), min(hi, high, 1.0))
    return out


__all__ = ["MAX_TRIES", "Context", "Tail", "TailRecords", "exits", "sample_tail", "tighten"]
