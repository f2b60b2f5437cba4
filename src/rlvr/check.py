"""`check_env`: exercise an environment on sample tasks and say what to fix.

It sits above the envs (it plays rollouts through the engine), which is why it is not in
`rlvr.envs`: `from rlvr import check_env`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import math
from typing import Any

from rlvr.clients.base import ChatClient
from rlvr.clients.policy import Policy
from rlvr.engine import run_rollouts
from rlvr.envs.multiturn import MultiTurnEnv, checked_turn_rewards
from rlvr.errors import EnvError, UsageError
from rlvr.types import Rollout, State, Task


def _placeholder(messages: Any, rng: Any) -> str:
    return "I am not sure."


def check_env(env: MultiTurnEnv[Any], client: ChatClient | None = None, num_tasks: int = 3) -> None:
    """Raise `EnvError` naming the first broken contract, or return None when the env is sound.

    Checks: tasks exist with unique ids and prompts; `setup_state` returns a dataclass `State`;
    rollouts with `client` (default: the env's first reference policy, else a placeholder
    reply) finish without errors, end with a known stop reason, get a finite reward from
    every rubric function, and round-trip through JSON; an env that scores turns gives one
    finite number per model turn of each.
    """
    tasks = env.tasks("eval")[:num_tasks]
    if not tasks:
        raise EnvError("the environment has no tasks: give it a non-empty dataset")
    for task in tasks:
        if not isinstance(task, Task):
            raise EnvError(f"tasks must be rlvr.Task objects, got {type(task).__name__}")
        env.initial_prompt(task)  # raises when a task has neither prompt nor question
        state = env.setup_state(task)
        if not isinstance(state, State) or not dataclasses.is_dataclass(state):
            raise EnvError(
                f"setup_state returned {type(state).__name__}; expected a dataclass subclass of rlvr.State "
                "(decorate it with @dataclass(kw_only=True) and return YourState(task=task, ...))"
            )
        if state.task is not task:
            raise EnvError("setup_state must keep the task it was given: return YourState(task=task, ...)")
    if not env.rubric.funcs:
        raise EnvError("the rubric has no reward functions: pass rubric=Rubric([...]) to the environment")
    if client is None:
        policies = env.policies()
        client = next(iter(policies.values()))() if policies else Policy(_placeholder, name="placeholder")

    async def play() -> list[Rollout]:
        try:
            return await run_rollouts(env, client, tasks, rollouts_per_task=2, concurrency=4)
        finally:
            await env.aclose()

    rollouts = asyncio.run(play())
    known = set(env.stop_conditions()) | {"timeout", "error", "prompt_too_long"}
    by_id = {t.id: t for t in tasks}
    for r in rollouts:
        _check_rollout(r, env.member(by_id[r.task_id])[0], known)  # a mixture's rollout: its member's rubric
        turn_rewards = getattr(env, "turn_rewards", None)  # rlvr.train.protocols.TurnScored
        if turn_rewards is not None:  # what `rlvr train --turn-credit` will read
            where = f"task {r.task_id!r} rollout {r.rollout_index}"
            try:
                checked_turn_rewards(turn_rewards(by_id[r.task_id], r), len(r.turns), where)
            except UsageError as exc:
                raise EnvError(str(exc)) from None


def _check_rollout(r: Rollout, env: MultiTurnEnv[Any], known: set[str]) -> None:
    where = f"task {r.task_id!r} rollout {r.rollout_index}"
    if r.error is not None:
        raise EnvError(f"{where} failed: {r.error}")
    if r.stop_reason not in known:
        raise EnvError(f"{where} ended with unknown stop reason {r.stop_reason!r}; expected one of {sorted(known)}")
    if not r.turns:
        raise EnvError(
            f"{where} ended before the model's first turn ({r.stop_reason}): a stop condition is true "
            "at the start; make it depend on what happened in the episode"
        )
    missing = set(env.rubric.names) - set(r.rewards)
    if missing:
        raise EnvError(f"{where} has no score for {sorted(missing)}")
    bad = {k: v for k, v in r.rewards.items() if not math.isfinite(v)}
    if bad:
        raise EnvError(f"{where}: reward functions returned non-finite values {bad}")
    try:
        again = Rollout.from_dict(json.loads(json.dumps(r.to_dict())))
    except (TypeError, ValueError) as exc:
        raise EnvError(
            f"{where} is not JSON-serialisable ({exc}): keep info and messages to plain JSON types"
        ) from None
    if again.to_dict() != r.to_dict():
        raise EnvError(f"{where} does not round-trip through JSON: keep info and messages to plain JSON types")
