"""What the trainer may read from an environment beyond the env contract: opt-in protocols.

An environment offers one by defining its method; nothing is inherited or registered
(structural typing, as `rlvr.exact.GameTree` and `rlvr.commands.play.PlayableEnv`). The
trainer asks `isinstance(env, Restartable)` and refuses a setting whose protocol the
environment lacks, with a message that names it. A mixture (`rlvr.mixture.EnvGroup`) offers
each one that at least one of its members offers, and forwards it to the member of the task.

    Stratified   difficulty(task), difficulty_range, num_buckets   stratified batches
                 (`rlvr.sampler`, where it lives: the sampler is below the trainer)
    Restartable  restart_tasks(task, rollout)    restart_frac: episodes played again from a later turn
    Explorable   other_replies(task)             restart_explore: first replies given, not sampled
    Probed       probe_task(task, seed)          restart_greedy: the task a greedy probe plays
    TurnScored   turn_rewards(task, rollout)     turn_credit: a score per model turn

A client that can give a reply rather than sample it (`LocalModel`) is a `GivingClient`.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

from rlvr.sampler import Stratified
from rlvr.types import Completion, Messages, Rollout, Task

__all__ = ["Explorable", "GivingClient", "Probed", "Restartable", "Stratified", "TurnScored"]


@runtime_checkable
class Restartable(Protocol):
    """An environment whose episodes can be played again from one of their later model turns."""

    def restart_tasks(self, task: Task, rollout: Rollout) -> list[Task]:
        """Tasks that play `rollout`'s episode (of `task`) again from one of its later model
        turns: the prompt is the conversation up to that turn, the env's state at that point is
        in the task (`rlvr.train.restarts`), in the order of the episode's turns
        (`restart_points = "backtrack"` relies on it). [] = none from this rollout."""
        ...


@runtime_checkable
class Explorable(Protocol):
    """An environment that names replies the policy could give, for exploration."""

    def other_replies(self, task: Task) -> list[str]:
        """Replies the policy could give at `task`'s next model turn: the trainer's
        `restart_explore` gives some rollouts of a restart one of them, drawn at random, in
        place of their own first reply (`rlvr.train.restarts`). E.g. a game's legal moves, each
        in a reference player's words. [] = none here."""
        ...


@runtime_checkable
class Probed(Protocol):
    """An environment that chooses what the trainer's greedy probes meet."""

    def probe_task(self, task: Task, seed: int) -> Task:
        """The task a greedy probe plays in place of the training task `task` (the trainer's
        `restart_greedy`). Without this protocol a probe plays `task` with the new `seed`,
        since a greedy game is a function of its task; the id is the trainer's to set."""
        ...


@runtime_checkable
class TurnScored(Protocol):
    """An environment that scores each model turn on its own, besides the episode."""

    def turn_rewards(self, task: Task, rollout: Rollout) -> list[float] | None:
        """One number per model turn of `rollout` (of `task`): how good that turn was on its
        own. The trainer's `turn_credit` adds them, normalised within the group, to the
        advantage of that turn's tokens alone (`rlvr.train.advantages.turn_advantages`).
        None = no score for this rollout."""
        ...


@runtime_checkable
class GivingClient(Protocol):
    """A chat client that can also give a reply: `text` as the ids it would have sampled."""

    async def give(self, messages: Messages, text: str, tools: list[dict[str, Any]] | None = None) -> Completion: ...
