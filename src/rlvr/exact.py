"""Exact evaluation: a deterministic policy against every line of play of an enumerable opponent.

A sample of 200 games measures a loss rate to about +-3 points and can miss a rare lost line
altogether. Where an environment's opponent has finitely many replies at every position (a
board game), the games a deterministic policy can reach form a finite tree, and every rate is
a weighted sum over its leaves: no sampling at all.

How the tree is walked, through the ordinary pieces (the env's real messages, `env.rollout`,
the rubric, the batched client):

- every open line of play is a task whose opponent plays a fixed list of replies; when the
  list runs out at the opponent's turn, the env ends the episode and `tree_children` turns it
  into one task per legal reply (a line one reply longer);
- a line replays its earlier turns, but the policy's replies are memoised by conversation, so
  the model answers each distinct position once; lines run concurrently and children start as
  soon as their parent ends, so all open lines advance together through the client's batches;
- a finished game (a leaf) is scored by the rubric and carries its probability under each
  opponent model the env names (the product of that opponent's move probabilities along the
  line), so `rates(opponent)` is exact.

The policy must be deterministic (temperature 0): the memo keeps the first reply to each
conversation, so a sampling policy would be evaluated as one arbitrary draw of itself.

Memory: lines in flight cost little (a task and its messages), the positions the model answers
at once cost its batch (a local model's KV slots, its prefill, the reuse cache). `positions`
bounds the latter apart from `concurrency`: waiting positions go to the model deepest first,
so a line's next position follows its last one while that one's keys and values are still in
the client's reuse cache, and games finish (and are saved) all along the walk instead of
together at its end.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import json
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from rlvr.clients.base import ChatClient
from rlvr.engine import rollout_seed, score_group
from rlvr.envs.multiturn import MultiTurnEnv
from rlvr.errors import UsageError
from rlvr.types import Completion, Messages, Rollout, SamplingArgs, State, Task

ERROR = "error"
"""The outcome of a game whose rollout failed (an error record): counted as a failure."""


@runtime_checkable
class GameTree(Protocol):
    """What an environment implements to offer exact evaluation (`rlvr eval --exhaustive`)."""

    tree_opponents: tuple[str, ...]
    """Names of the opponent models whose line probabilities `tree_weights` gives."""
    tree_failures: tuple[str, ...]
    """Outcomes that mean the policy was beaten (e.g. loss, timeout)."""

    def tree_roots(self, seed: int) -> list[Task]:
        """The first lines: one task per opening (the opponent's first moves, or none)."""
        ...

    def tree_children(self, state: Any) -> list[Task]:
        """One task per legal opponent reply when `state` ended because its line ran out;
        [] when it is a finished game (a leaf)."""
        ...

    def tree_weights(self, task: Task) -> dict[str, float]:
        """The line's probability under each opponent model in `tree_opponents`."""
        ...

    def tree_leaf(self, state: Any) -> dict[str, Any]:
        """A finished game's record: `outcome` (a label such as win/draw/loss/timeout) and any
        details worth listing (the moves, the final position). A beaten game may name the
        policy's decision that lost it as `mistake` (a label: the position and the move), so
        that every game lost through one decision shares it."""
        ...


@dataclass
class ExactResult:
    """Every finished game of a tree walk, with its outcome and per-opponent probabilities."""

    games: list[Rollout]
    """The leaves, sorted by task id; each has `info["exact"]` (outcome, weights, details)."""
    opponents: tuple[str, ...]
    failures: tuple[str, ...]
    model_calls: int = 0
    """Distinct conversations the policy answered (memo misses)."""
    lines: int = 0
    """Rollouts played: leaves plus lines that branched."""
    seconds: float = 0.0
    outcomes: list[str] = field(init=False)

    def __post_init__(self) -> None:
        self.outcomes = [g.info["exact"]["outcome"] for g in self.games]

    def weight(self, game: Rollout, opponent: str) -> float:
        return float(game.info["exact"]["weights"][opponent])

    def rates(self, opponent: str) -> dict[str, float]:
        """Outcome -> exact probability against `opponent` (the weights of its games)."""
        out: dict[str, float] = {}
        for game, outcome in zip(self.games, self.outcomes):
            out[outcome] = out.get(outcome, 0.0) + self.weight(game, opponent)
        return out

    def total_weight(self, opponent: str) -> float:
        """Sum of the games' probabilities against `opponent`: 1 for a complete tree."""
        return sum(self.weight(g, opponent) for g in self.games)

    @property
    def beaten(self) -> list[Rollout]:
        """Games the policy did not hold: a failure outcome or an error, whatever the weight."""
        return [g for g, o in zip(self.games, self.outcomes) if o in self.failures or o == ERROR]

    @property
    def mistakes(self) -> dict[str, int]:
        """The decisions that beat the policy: each beaten game's `mistake` label (its own id
        when the env names none) -> how many beaten games went through it, most first."""
        labels = [str(g.info["exact"].get("mistake") or g.task_id) for g in self.beaten]
        return dict(sorted(Counter(labels).items(), key=lambda kv: (-kv[1], kv[0])))

    @property
    def unbeatable(self) -> bool:
        """True when no line of play at all beats the policy."""
        return not self.beaten

    def summary(self) -> dict[str, Any]:
        """JSON-ready numbers: rates per opponent (in %), counts, the beaten games' ids."""
        return {
            "games": len(self.games),
            "lines": self.lines,
            "model_calls": self.model_calls,
            "seconds": round(self.seconds, 3),
            "unbeatable": self.unbeatable,
            "beaten": [g.task_id for g in self.beaten],
            "mistakes": self.mistakes,
            "rejected_move_games": sum(1 for g in self.games if g.info["exact"].get("rejected_moves", 0)),
            "rates_pct": {o: {k: 100.0 * v for k, v in sorted(self.rates(o).items())} for o in self.opponents},
            "total_weight": {o: self.total_weight(o) for o in self.opponents},
        }


class _Gate:
    """At most `size` holders at once (None: no bound); waiters enter highest `rank` first, then
    in arrival order. A waiter that enters brings in every waiter of its `family` with it, past
    the bound if need be: a model's batch then admits siblings together (the positions that
    extend one answered position), and they all start from that position's kept keys and
    values (a reuse cache keeps an entry until a request extends it)."""

    def __init__(self, size: int | None) -> None:
        self._free = size
        self._waiting: list[tuple[int, int, str | None, asyncio.Future[None]]] = []  # (-rank, arrival, family, wake)
        self._order = itertools.count()

    async def take(self, rank: int, family: str | None = None) -> None:
        if self._free is None:
            return
        if self._free > 0 and not self._waiting:
            self._free -= 1
            return
        wake = asyncio.get_running_loop().create_future()
        heapq.heappush(self._waiting, (-rank, next(self._order), family, wake))
        await wake  # the place is taken for it by `give`

    def give(self) -> None:
        if self._free is None:
            return
        self._free += 1
        while self._free > 0 and self._waiting:
            _, _, family, wake = heapq.heappop(self._waiting)
            if wake.done():  # (a waiter cancelled meanwhile is passed over)
                continue
            entering = [wake]
            if family is not None:
                entering += [w for _, _, f, w in self._waiting if f == family and not w.done()]
                self._waiting = [entry for entry in self._waiting if entry[2] != family]
                heapq.heapify(self._waiting)
            self._free -= len(entering)
            for each in entering:
                each.set_result(None)


class _Memo:
    """A client that answers each distinct conversation once (concurrent duplicates share one
    call), at most `positions` at once (None: no bound), the longest conversation first."""

    def __init__(
        self, client: ChatClient, positions: int | None = None, on_answer: Callable[[int], Any] | None = None
    ) -> None:
        self.client = client
        self.name = client.name
        self.answered = 0
        self._replies: dict[str, asyncio.Future[Completion]] = {}
        self._gate = _Gate(positions)
        self._on_answer = on_answer

    @property
    def calls(self) -> int:
        return len(self._replies)

    async def chat(
        self, messages: Messages, sampling: SamplingArgs, tools: list[dict[str, Any]] | None = None
    ) -> Completion:
        key = json.dumps([messages, tools], sort_keys=True, default=str)
        reply = self._replies.get(key)
        if reply is None:
            reply = self._replies[key] = asyncio.ensure_future(self._ask(messages, sampling, tools))
        return await asyncio.shield(reply)

    async def _ask(self, messages: Messages, sampling: SamplingArgs, tools: list[dict[str, Any]] | None) -> Completion:
        family = json.dumps([messages[:-1], tools], sort_keys=True, default=str)  # all but the last message
        await self._gate.take(len(messages), family)
        try:
            return await self.client.chat(messages, sampling, tools)
        finally:
            self.answered += 1
            self._gate.give()
            if self._on_answer is not None:
                self._on_answer(self.answered)

    async def aclose(self) -> None:
        """The wrapped client belongs to the caller, who closes it."""


async def enumerate_games(
    env: MultiTurnEnv[Any],
    client: ChatClient,
    sampling: SamplingArgs,
    *,
    seed: int = 0,
    concurrency: int = 256,
    positions: int | None = None,
    on_game: Callable[[Rollout], Any] | None = None,
    on_answer: Callable[[int], Any] | None = None,
) -> ExactResult:
    """Walk `env`'s game tree with `client` (see the module docstring): `concurrency` lines in
    flight, at most `positions` of them waiting on the model (None: as many as the lines).
    `on_game` gets each finished, scored game as it ends, `on_answer` the number of positions
    answered so far after each answer."""
    if not isinstance(env, GameTree):
        raise UsageError(f"environment {getattr(env, 'name', env)!r} offers no exact evaluation (no game tree)")
    if sampling.temperature != 0:
        raise UsageError(
            f"exact evaluation needs a deterministic policy: temperature 0, got {sampling.temperature} (pass -T 0)"
        )
    if concurrency < 1:
        raise UsageError(f"concurrency must be >= 1, got {concurrency}")
    if positions is not None and positions < 1:
        raise UsageError(f"positions must be >= 1 (or None: no bound), got {positions}")
    memo = _Memo(client, positions, on_answer)
    gate = _Gate(concurrency)  # the deepest lines first, as the positions
    games: list[Rollout] = []
    played = 0
    start = time.monotonic()

    async def line(task: Task, depth: int, tg: asyncio.TaskGroup) -> None:
        nonlocal played
        await gate.take(depth)
        try:
            state: State = await env.rollout(memo, task, sampling, rollout_seed(task, 0))
        finally:
            gate.give()
        played += 1
        children = [] if state.error is not None else env.tree_children(state)
        if children:
            for child in children:
                tg.create_task(line(child, depth + 1, tg))
            return
        (game,) = await score_group(env, task, [0], [state])
        leaf: dict[str, Any] = {"outcome": ERROR} if game.error is not None else dict(env.tree_leaf(state))
        leaf["weights"] = env.tree_weights(task)
        game.info["exact"] = leaf
        games.append(game)
        if on_game is not None:
            on_game(game)

    async with asyncio.TaskGroup() as tg:
        for root in env.tree_roots(seed):
            tg.create_task(line(root, 0, tg))
    games.sort(key=lambda g: g.task_id)
    return ExactResult(
        games,
        tuple(env.tree_opponents),
        tuple(env.tree_failures),
        model_calls=memo.calls,
        lines=played,
        seconds=time.monotonic() - start,
    )


def print_exact(result: ExactResult, *, title: str, console: Any = None, show: int = 10) -> None:
    """The exact table: outcome rates per opponent, counts, the verdict, the beaten games."""
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    console = console or Console(emoji=False)
    s = result.summary()
    labels = sorted({o for o in result.outcomes}, key=_outcome_order)
    # the heading is a line of its own: as the table's title it wrapped to the table's width
    # (29 columns) when the output is not a terminal
    console.print(
        escape(f"{title}: exact, {s['games']} games (every line of play), {s['model_calls']} model calls"),
        highlight=False,
        soft_wrap=True,
    )
    table = Table()
    table.add_column("opponent")
    for label in labels:
        table.add_column(f"{label} %", justify="right")
    for opponent in result.opponents:
        rates = result.rates(opponent)
        table.add_row(opponent, *(f"{100.0 * rates.get(label, 0.0):.2f}" for label in labels))
    console.print(table)
    beaten = result.beaten
    console.print(
        f"games with a rejected move: {s['rejected_move_games']}   beaten in {len(beaten)} of {s['games']} games"
        f"   time: {s['seconds']:.1f} s"
    )
    mistakes = result.mistakes
    verdict = (
        "yes: no line of play beats it"
        if result.unbeatable
        else f"no: {len(beaten)} games beat it, through {len(mistakes)} decision(s)"
    )
    console.print(f"unbeatable: {verdict}", style="bold")
    for label, count in list(mistakes.items())[:show]:
        console.print(escape(f"  decision {label}: {count} game(s)"), highlight=False)
    for game in beaten[:show]:
        detail = game.info["exact"]
        extra = "  ".join(f"{k}={v}" for k, v in detail.items() if k not in ("outcome", "weights"))
        console.print(escape(f"  {detail['outcome']}: {game.task_id}  {extra}"), highlight=False)
    if len(beaten) > show:
        console.print(f"  ... and {len(beaten) - show} more (every game is in the results file)")


_ORDER = ("win", "draw", "loss", "timeout", ERROR)


def _outcome_order(label: str) -> tuple[int, str]:
    return (_ORDER.index(label) if label in _ORDER else len(_ORDER), label)


def lost_games(games: Sequence[Rollout], failures: Sequence[str]) -> list[Rollout]:
    """The games of an exact run (read back from its results file) that beat the policy."""
    return [g for g in games if g.info.get("exact", {}).get("outcome") in (*failures, ERROR)]
