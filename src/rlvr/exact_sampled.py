"""Exact evaluation of a sampling policy: its reply distribution at every decision, propagated
through the game tree (`rlvr eval ENV --exhaustive -T 1`).

The greedy walk (`rlvr.exact`) gives the policy one reply per conversation. Here a decision of
the policy has a distribution over replies, and each reply is a child of the decision with its
probability, so a game's probability against an opponent is the opponent's line weight times
the policy's reply probabilities along it. The same pieces as the greedy walk: every open line
is a task of the env's tree (`GameTree`) whose opponent plays a fixed list of replies, played
by `env.rollout` with the env's own messages and rubric, through the batched client.

- A line also fixes the policy's replies: a client for the line (`_LineClient`) gives them
  back in order, and at the first turn past them it asks the decision's distribution
  (memoised by conversation: each decision is evaluated once), continues with the first reply
  and forks one new line per other reply (a line one reply longer, replayed from the start
  without model calls). When the opponent's list runs out, `tree_children` extends the line
  as in the greedy walk, keeping the policy's replies.
- The distribution comes from the client: `reply_distribution(messages, sampling, tools)` when
  it has one (an exact list of (reply, probability); what is not listed is left unexplored),
  else K draws of `chat` with K seeds, each distinct reply weighted by its share. Replies are
  told apart by their whole text: the reasoning is part of the conversation the next decision
  sees, so two replies with one move but different reasoning are different children.
- A reply whose reach (policy probability times the opponent's largest line weight) falls
  below `min_reach` is not played; its mass goes into the bound.

`rlvr.exact_bounds` turns the record into rates, bounds and the risky decisions.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import math
import time
import zlib
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from rlvr.clients.base import ChatClient
from rlvr.engine import rollout_seed, score_group
from rlvr.envs.multiturn import MultiTurnEnv
from rlvr.errors import ClientError, UsageError
from rlvr.exact import ERROR, ExactResult, GameTree
from rlvr.exact_bounds import REJECTED, Bounds, Decision
from rlvr.exact_tail import Context, Tail, TailRecords, sample_tail, tighten
from rlvr.seeding import mix_seed
from rlvr.types import Completion, Messages, Rollout, SamplingArgs, State, Task


@runtime_checkable
class ReplyDistribution(Protocol):
    """A client that can say exactly how it replies (a scripted stochastic player, or a model
    whose reply tokens are enumerated: `LocalModel`): (reply text, probability) pairs; their sum
    may be < 1, the rest counted as unexplored.

    The method may also take a keyword `floor` (`takes_floor`): the walk then passes the
    smallest reply probability worth listing at this decision (`min_reach` over the decision's
    reach), so that an enumeration stops at prefixes no played reply can come from."""

    async def reply_distribution(
        self, messages: Messages, sampling: SamplingArgs, tools: list[dict[str, Any]] | None = None
    ) -> list[tuple[str, float]]: ...


def takes_floor(client: ReplyDistribution) -> bool:
    """Whether `client.reply_distribution` takes the keyword `floor` (or any keyword)."""
    try:
        params = inspect.signature(client.reply_distribution).parameters.values()
    except (TypeError, ValueError):
        return False
    return any(p.name == "floor" or p.kind is inspect.Parameter.VAR_KEYWORD for p in params)


@dataclass
class Settings:
    """How each decision's distribution is had, and what is pruned."""

    samples: int = 64
    """K: replies drawn at each decision (clients without `reply_distribution`)."""
    per_reach: int = 0
    """More draws where more games go: a decision reached with probability r gets
    max(samples, ceil(per_reach * r)) draws (0: `samples` everywhere). The bound's martingale
    term sums r^2 / K over the decisions, so draws in proportion to r cost about as many draws
    as `per_reach` whole games per decision of a game, and shrink that term far more than the
    same draws spread evenly (most decisions are reached rarely)."""
    min_reach: float = 1e-6
    """Replies reached with a smaller probability are not played (their mass goes to the bound)."""
    delta: float = 0.05
    """The bounds hold together with probability >= 1 - delta."""
    seed: int = 0
    """Base of the sampling seeds (each draw's seed mixes it with the conversation and the draw)."""
    concurrency: int = 256
    """Lines in flight at once."""
    enumerate: bool = True
    """Ask a client that has `reply_distribution` for its exact distribution (False: draw
    `samples` replies from it like from any other client)."""
    tail_games: int = 0
    """Games drawn, per opponent, from the mass an all-exact walk did not play, to bound that
    mass's share of each number (`rlvr.exact_tail`; 0: the whole mass on the upper side)."""

    def check(self) -> None:
        if self.samples < 1:
            raise UsageError(f"--samples must be >= 1, got {self.samples}")
        if not 0.0 <= self.min_reach < 1.0:
            raise UsageError(f"--min-reach must be in [0, 1), got {self.min_reach}")
        if not 0.0 < self.delta < 1.0:
            raise UsageError(f"--delta must be in (0, 1), got {self.delta}")
        if self.per_reach < 0:
            raise UsageError(f"--samples-per-reach must be >= 0, got {self.per_reach}")
        if self.tail_games < 0:
            raise UsageError(f"--tail-games must be >= 0, got {self.tail_games}")
        if self.concurrency < 1:
            raise UsageError(f"concurrency must be >= 1, got {self.concurrency}")


@dataclass
class SampledResult(ExactResult):
    """An `ExactResult` whose game weights include the policy's reply probabilities, with the
    decisions behind them."""

    decisions: list[Decision] = field(default_factory=list)
    settings: Settings = field(default_factory=Settings)
    samples_drawn: int = 0
    contexts: dict[int, Context] = field(default_factory=dict, repr=False)
    """Where each decision was met (to draw more replies there)."""
    tails: dict[str, Tail] = field(default_factory=dict)
    """Per opponent, the games drawn from the unplayed mass (`Settings.tail_games`)."""

    def bounds(self) -> Bounds:
        delta = self.settings.delta / 2 if self.tails else self.settings.delta  # half to the tail
        return Bounds(self.decisions, [g.info["exact"] for g in self.games], delta)

    def sampled_summary(self, risky_threshold: float = 1e-3) -> dict[str, Any]:
        """JSON-ready: the estimates with their bounds per opponent (in %), the decisions, the
        risky ones (>= `risky_threshold` on a rejected or losing reply)."""
        bounds = self.bounds()
        outcomes = sorted({*self.outcomes, *self.failures, "win", "draw"})
        table = bounds.table(self.opponents, outcomes)
        if self.tails:
            table = tighten(table, self.tails, self.settings.delta / 2)
        pct = {o: {k: [100.0 * x for x in v] for k, v in rows.items()} for o, rows in table.items()}
        return {
            "samples": self.settings.samples,
            "per_reach": self.settings.per_reach,
            "min_reach": self.settings.min_reach,
            "delta": self.settings.delta,
            "decisions": len(self.decisions),
            "sampled_decisions": bounds.sampled,
            "samples_drawn": self.samples_drawn,
            "bounds_pct": pct,
            "enumerate": self.settings.enumerate,
            "missing_pct": {o: {k: 100.0 * v for k, v in bounds.missing(o).items()} for o in self.opponents},
            "tail_games": self.settings.tail_games,
            "tail": {o: t.to_dict() for o, t in self.tails.items()},
            "risky_threshold": risky_threshold,
            "risky": {o: bounds.risky(o, self.failures, risky_threshold) for o in self.opponents},
        }


class _Line:
    """An open line: its task (the opponent's replies) and the policy's replies so far."""

    def __init__(self, task: Task, replies: list[str], path: list[list[int]], prob: float) -> None:
        self.task, self.replies, self.path, self.prob = task, replies, path, prob
        self.pruned = False


class _Pruned(Exception):
    """Every reply at a decision is below the reach threshold: the line ends unplayed."""


class _Walk:
    """The shared state of one walk: decisions by conversation, forks, counts."""

    def __init__(self, env: Any, client: ChatClient, settings: Settings, tg: asyncio.TaskGroup, play: Any) -> None:
        self.env, self.client, self.settings, self.tg, self.play = env, client, settings, tg, play
        self.decisions: list[Decision] = []
        self.contexts: dict[int, Context] = {}
        self._memo: dict[str, asyncio.Future[Decision]] = {}
        self.drawn = 0
        self.judge = getattr(env, "tree_judge", None)
        self.floored = isinstance(client, ReplyDistribution) and takes_floor(client)
        self.gate = asyncio.Semaphore(settings.concurrency)
        """draws in flight over all decisions: at most `concurrency` (K a decision times the open
        decisions would otherwise all reach the client at once)"""

    async def _draw(self, messages: Messages, sampling: SamplingArgs, tools: Any) -> Completion:
        async with self.gate:
            return await self.client.chat(messages, sampling, tools)

    async def decision(self, messages: Messages, sampling: SamplingArgs, tools: Any, line: _Line) -> Decision:
        key = json.dumps([messages, tools], sort_keys=True, default=str)
        found = self._memo.get(key)
        if found is None:
            found = self._memo[key] = asyncio.ensure_future(self._decide(key, messages, sampling, tools, line))
        return await asyncio.shield(found)

    async def _decide(self, key: str, messages: Messages, sampling: SamplingArgs, tools: Any, line: _Line) -> Decision:
        samples, unexplored = 0, 0.0
        if self.settings.enumerate and isinstance(self.client, ReplyDistribution):
            merged: dict[str, float] = {}
            reach = self.reach(line, 1.0)
            floor = {"floor": self.settings.min_reach / reach if reach > 0 else math.inf} if self.floored else {}
            for text, p in await self.client.reply_distribution(messages, sampling, tools, **floor):
                merged[text] = merged.get(text, 0.0) + float(p)
            replies, probs = list(merged), list(merged.values())
            if not all(math.isfinite(p) and p >= 0 for p in probs) or sum(probs) > 1 + 1e-9:
                raise ClientError(
                    f"{getattr(self.client, 'name', 'the client')}: reply_distribution gave probabilities "
                    f"{probs[:8]} (sum {sum(probs)}); expected finite values >= 0 that sum to at most 1"
                )
            unexplored = max(0.0, 1.0 - sum(probs))
        else:
            reach = line.prob * max(self.env.tree_weights(line.task).values(), default=0.0)
            samples = max(self.settings.samples, math.ceil(self.settings.per_reach * reach))
            base = mix_seed(self.settings.seed, zlib.crc32(key.encode()))
            drawn = await asyncio.gather(
                *(self._draw(messages, sampling.replace(seed=mix_seed(base, i)), tools) for i in range(samples))
            )
            self.drawn += samples
            counts = Counter(c.text for c in drawn)
            replies, probs = list(counts), [n / samples for n in counts.values()]
        board = str(messages[-1].get("content") or "") if messages else ""
        judged = [self.judge(messages, r) for r in replies] if self.judge else None
        decision = Decision(
            len(self.decisions), board, self.env.tree_weights(line.task), line.prob, replies, probs, samples,
            unexplored, judged,
        )  # fmt: skip
        self.decisions.append(decision)
        self.contexts[decision.id] = Context(line.task, list(line.replies), [dict(m) for m in messages], tools)
        return decision

    def reach(self, line: _Line, prob: float) -> float:
        return line.prob * prob * max(self.env.tree_weights(line.task).values(), default=0.0)

    def fork(self, line: _Line, decision: Decision) -> int:
        """The reply index the line goes on with; the other playable replies become new lines."""
        playable = [j for j, p in enumerate(decision.probs) if p > 0 and self.reach(line, p) >= self.settings.min_reach]
        decision.played = [j in playable for j in range(len(decision.probs))]
        if not playable:
            raise _Pruned
        for j in playable[1:]:
            child = _Line(line.task, [*line.replies, decision.replies[j]], [*line.path, [decision.id, j]],
                          line.prob * decision.probs[j])  # fmt: skip
            self.tg.create_task(self.play(child))
        return playable[0]


class _LineClient:
    """The policy of one line: its given replies in order, then a decision (see the module)."""

    def __init__(self, walk: _Walk, line: _Line) -> None:
        self.walk, self.line, self.turn = walk, line, 0
        self.name = walk.client.name

    async def chat(
        self, messages: Messages, sampling: SamplingArgs, tools: list[dict[str, Any]] | None = None
    ) -> Completion:
        line, turn = self.line, self.turn
        self.turn += 1
        if turn < len(line.replies):
            return Completion(text=line.replies[turn], finish_reason="given")
        decision = await self.walk.decision(messages, sampling, tools, line)
        try:
            j = self.walk.fork(line, decision)
        except _Pruned:
            line.pruned = True
            raise
        line.replies.append(decision.replies[j])
        line.path.append([decision.id, j])
        line.prob *= decision.probs[j]
        return Completion(text=decision.replies[j])

    async def aclose(self) -> None:
        """The wrapped client belongs to the caller."""


async def enumerate_sampled(
    env: MultiTurnEnv[Any],
    client: ChatClient,
    sampling: SamplingArgs,
    settings: Settings,
    *,
    on_game: Any = None,
    on_tail: Any = None,
    tail_records: TailRecords | None = None,
) -> SampledResult:
    """Walk `env`'s game tree with the policy's reply distributions (see the module docstring);
    `on_game` gets each finished, scored game as it ends, `on_tail(opponent, tail)` each tail
    game (`rlvr.exact_tail.sample_tail`, which keeps its games in `tail_records`)."""
    if not isinstance(env, GameTree):
        raise UsageError(f"environment {getattr(env, 'name', env)!r} offers no exact evaluation (no game tree)")
    settings.check()
    gate = asyncio.Semaphore(settings.concurrency)
    games: list[Rollout] = []
    played = 0
    start = time.monotonic()

    async def play(line: _Line) -> None:
        nonlocal played
        async with gate:
            state: State = await env.rollout(_LineClient(walk, line), line.task, sampling, rollout_seed(line.task, 0))
        played += 1
        if line.pruned:
            return
        children = [] if state.error is not None else env.tree_children(state)
        for child in children:
            walk.tg.create_task(play(_Line(child, list(line.replies), [list(s) for s in line.path], line.prob)))
        if not children:
            await finish(line, state)

    async def finish(line: _Line, state: State) -> None:
        (game,) = await score_group(env, line.task, [0], [state])
        leaf: dict[str, Any] = {"outcome": ERROR} if game.error is not None else dict(env.tree_leaf(state))
        opponent = env.tree_weights(line.task)
        leaf.update(
            line_weights=opponent, weights={o: w * line.prob for o, w in opponent.items()}, policy_prob=line.prob,
            path=line.path,
        )  # fmt: skip
        game.info["exact"] = leaf
        games.append(game)
        if on_game is not None:
            on_game(game)

    async with asyncio.TaskGroup() as tg:
        walk = _Walk(env, client, settings, tg, play)
        for root in env.tree_roots(settings.seed):
            tg.create_task(play(_Line(root, [], [], 1.0)))
    games.sort(key=lambda g: (g.task_id, -g.info["exact"]["policy_prob"]))
    result = SampledResult(
        games, tuple(env.tree_opponents), tuple(env.tree_failures), model_calls=len(walk.decisions), lines=played,
        seconds=time.monotonic() - start, decisions=walk.decisions, settings=settings, samples_drawn=walk.drawn,
        contexts=walk.contexts,
    )  # fmt: skip
    if settings.tail_games and not any(d.samples for d in walk.decisions):  # the played part is exact
        result.tails = await sample_tail(
            env, client, sampling, walk.decisions, walk.contexts, result.opponents,
            sorted({*result.outcomes, *result.failures, "win", "draw"}), settings.tail_games,
            seed=settings.seed, concurrency=settings.concurrency, on_game=on_tail, records=tail_records,
        )  # fmt: skip
        result.seconds = time.monotonic() - start
    return result


__all__ = ["REJECTED", "ReplyDistribution", "SampledResult", "Settings", "enumerate_sampled", "takes_floor"]
