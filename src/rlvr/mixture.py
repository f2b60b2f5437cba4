"""Mixtures of environments: one environment made of several (`EnvGroup`), registered as `mix`.

    env = EnvGroup([load_environment("tictactoe"), load_environment("reverse_text")])
    rlvr eval mix -a '{"envs": {"tictactoe": {}, "reverse_text": {}}}' -m policy:optimal+oracle
    rlvr eval mix -a '{"envs": {"legs": {"env": "reasoning_gym", "dataset": "leg_counting"},
                                "words": {"env": "reasoning_gym", "dataset": "word_sorting"}}}'

- Members: named by the keys of `envs`; an `env` key among a member's arguments names its
  environment (else the member's name does), so one environment can be two members.

- Tasks: every member's tasks, taken in turn (one of each member, then the next of each), each
  under the id `NAME/ID`: the prefix is how a task, and its rollouts, remember their member.
- Episodes: `MultiTurnEnv.rollout` hands a task to its member's own `rollout` with the task as
  the member knows it (`member`), so each member keeps its prompt, parser, stop conditions,
  max_turns, tools and lifecycle; the engine scores it with the member's rubric.
- Sampling: a member samples with its own `sampling`, except the fields in which the caller's
  sampling differs from the mixture's own (`-t`, `-T`, the trainer's settings): those win.
- Reward scales: members whose rewards lie on different scales draw one warning (at the first
  summary that shows it); `normalize={"NAME": [low, high]}` maps a member's total onto [0, 1]
  (`rlvr.mixture_scale`).
- Summary: `summarize` gives, for each member, `NAME/rollouts`, `NAME/reward`, `NAME/<reward
  function>` and the member's own `summarize` numbers as `NAME/<key>`.
- Training batches: every (member, difficulty bucket of that member) is one stratum, and
  `difficulty(task)` is the task's stratum, so `StratifiedSampler.for_env(mixture)` puts the
  same number of tasks of each into every batch (a member without a difficulty is one stratum).
- Training protocols (`rlvr.train.protocols`: restarts, given replies, probes, turn scores):
  a mixture offers each one that at least one member offers, and forwards it to the task's
  member (a member without it gives none); it is always `Stratified`, by member.
- Players: `policies()` offers `A+B+...` (one reference player per member, in member order), and
  a name that every member offers, alone.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from rlvr.clients.base import ChatClient
from rlvr.envs.multiturn import MultiTurnEnv
from rlvr.envs.task_source import LazyTasks
from rlvr.errors import EnvError, UsageError
from rlvr.mixture_scale import normalized, warn_on_scales
from rlvr.rubric import Rubric
from rlvr.sampler import Stratified, bucket_index, difficulty_buckets, difficulty_span
from rlvr.types import Completion, Messages, SamplingArgs, State, Task

SEP = "/"
"""Between a member's name and its task id in a mixture's task id."""


class MixedPlayer:
    """A reference player for a mixture: one client per member, chosen by the member that plays
    (`EnvGroup.member_play`). It plays only inside its mixture."""

    def __init__(self, players: Mapping[str, ChatClient], name: str) -> None:
        self.players, self.name = dict(players), name

    async def chat(
        self, messages: Messages, sampling: SamplingArgs, tools: list[dict[str, Any]] | None = None
    ) -> Completion:
        raise EnvError(f"{self.name} has one player per member env; it plays only through its mixture's rollout")

    async def aclose(self) -> None:
        for player in self.players.values():
            await player.aclose()


class EnvGroup(MultiTurnEnv[State]):
    """Several environments as one; see the module docstring.

    `envs`: the members, as a list (each named by its `name`, which the registry sets) or as a
    mapping from name to environment. Names must be unique and contain no `/`. `normalize`:
    member name -> [low, high], that member's total reward mapped linearly from [low, high] onto
    [0, 1] (the member is copied with a `ScaledRubric`; the env passed in is left as it is).
    """

    def __new__(
        cls,
        envs: Sequence[MultiTurnEnv[Any]] | Mapping[str, MultiTurnEnv[Any]],
        normalize: Mapping[str, Sequence[float]] | None = None,
    ) -> EnvGroup:
        members = list(envs.values()) if isinstance(envs, Mapping) else list(envs)
        offered = tuple(name for name in FORWARDED if any(hasattr(e, name) for e in members))
        return super().__new__(_offering(cls, offered))

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickled through `EnvGroup` (the class `__new__` makes is not importable by its name)."""
        return (EnvGroup, (dict(self.members),), self.__dict__)

    def __init__(
        self,
        envs: Sequence[MultiTurnEnv[Any]] | Mapping[str, MultiTurnEnv[Any]],
        normalize: Mapping[str, Sequence[float]] | None = None,
    ) -> None:
        members = dict(envs) if isinstance(envs, Mapping) else {e.name: e for e in envs}
        if not envs:
            raise UsageError("a mixture needs at least one environment, got none")
        if len(members) != len(envs):
            names = [e.name for e in envs] if not isinstance(envs, Mapping) else list(envs)
            raise UsageError(f"member names must be unique, got {names}: pass a dict of name -> env")
        bad = [n for n in members if not n or SEP in n]
        if bad:
            raise UsageError(f"member name {bad[0]!r} must be non-empty and contain no {SEP!r}")
        self.members: dict[str, MultiTurnEnv[Any]] = normalized(members, normalize or {})
        self._scales_checked = False
        self._max_turns: int | None = None
        eval_sets = {n: e.tasks("eval") for n, e in members.items()}
        super().__init__(
            _interleave({n: e.tasks("train") for n, e in members.items()}),
            eval_dataset=_interleave(eval_sets),
            rubric=_union_rubric(members.values()),
        )
        self._strata = _strata(members)
        self.num_buckets = sum(count for _, _, count in self._strata.values())
        self.difficulty_range = (0.0, float(self.num_buckets))

    # ---- which member plays a task, and how ---------------------------------------------------

    def member(self, task: Task) -> tuple[MultiTurnEnv[Any], Task]:
        name, sep, own_id = task.id.partition(SEP)
        if not sep or name not in self.members:
            raise UsageError(
                f"task {task.id!r} is not a mixture task: its id must be MEMBER{SEP}ID, MEMBER one of {list(self.members)}"
            )
        return self.members[name], dataclasses.replace(task, id=own_id)

    def member_name(self, env: MultiTurnEnv[Any]) -> str:
        return next(n for n, e in self.members.items() if e is env)

    def member_play(
        self, env: MultiTurnEnv[Any], client: ChatClient, sampling: SamplingArgs
    ) -> tuple[ChatClient, SamplingArgs]:
        if isinstance(client, MixedPlayer):
            client = client.players[self.member_name(env)]
        changed = {
            f.name: getattr(sampling, f.name)
            for f in dataclasses.fields(SamplingArgs)
            if f.name != "seed" and getattr(sampling, f.name) != getattr(self.sampling, f.name)
        }
        return client, env.sampling.replace(**changed)

    @property
    def max_turns(self) -> int | None:
        """None, or the max_turns every member was given (a trainer's override)."""
        return self._max_turns

    @max_turns.setter
    def max_turns(self, value: int | None) -> None:
        self._max_turns = value
        if value is not None:
            for env in getattr(self, "members", {}).values():
                env.max_turns = value

    def initial_prompt(self, task: Task) -> Messages:
        env, own = self.member(task)
        return env.initial_prompt(own)

    def stop_conditions(self) -> list[str]:
        """Every member's stop conditions (a mixture's rollouts end by its members' stops)."""
        return list(dict.fromkeys(n for env in self.members.values() for n in env.stop_conditions()))

    # ---- what the CLI and the trainer read ----------------------------------------------------

    def policies(self) -> dict[str, Callable[[], ChatClient]]:
        per = [env.policies() for env in self.members.values()]
        out: dict[str, Callable[[], ChatClient]] = {}
        for combo in itertools.product(*per):
            out["+".join(combo)] = functools.partial(self._player, combo)
        for name in set.intersection(*(set(p) for p in per)) if per else ():
            out[name] = functools.partial(self._player, (name,) * len(per))
        return out

    def _player(self, names: tuple[str, ...]) -> MixedPlayer:
        players = {m: env.policies()[n]() for (m, env), n in zip(self.members.items(), names)}
        return MixedPlayer(players, "+".join(names))

    def summarize(self, rollouts: Sequence[Any]) -> dict[str, float] | None:
        from rlvr.summary import summarize

        out: dict[str, float] = {}
        if not self._scales_checked:
            self._scales_checked = warn_on_scales(self.members, rollouts, SEP)
        for name, env in self.members.items():
            prefix = name + SEP
            mine = [
                dataclasses.replace(r, task_id=r.task_id[len(prefix) :])
                for r in rollouts
                if r.task_id.startswith(prefix)
            ]
            if not mine:
                continue
            s = summarize(mine)
            out[f"{prefix}rollouts"] = float(len(mine))
            out[f"{prefix}reward"] = s["reward"]["mean"]
            for fn in env.rubric.names:
                out[f"{prefix}{fn}"] = s["rewards"].get(fn, {"mean": math.nan})["mean"]
            out.update({f"{prefix}{k}": float(v) for k, v in (env.summarize(mine) or {}).items()})
        return out or None

    def difficulty(self, task: Task) -> float:
        """The task's stratum (its member's offset plus its bucket in the member's difficulty),
        plus 0.5: the middle of equal-width bucket number `stratum` over [0, num_buckets]."""
        env, own = self.member(task)
        offset, span, count = self._strata[self.member_name(env)]
        value = env.difficulty(own) if span is not None and count > 1 and isinstance(env, Stratified) else None
        inner = 0 if value is None else bucket_index(value, span[0], span[1], count)  # type: ignore[index]
        return offset + inner + 0.5

    async def aclose(self) -> None:
        for env in self.members.values():
            await env.aclose()


# ---- the training protocols (`rlvr.train.protocols`), each offered when a member offers it ----


class _Restarts:
    def restart_tasks(self: Any, task: Task, rollout: Any) -> list[Task]:
        """The member's restarts of its own task, under the mixture's ids (`NAME/ID`); none
        from a member that cannot restart."""
        env, own = self.member(task)
        if not hasattr(env, "restart_tasks"):
            return []
        name = self.member_name(env)
        return [dataclasses.replace(t, id=f"{name}{SEP}{t.id}") for t in env.restart_tasks(own, rollout)]


class _Replies:
    def other_replies(self: Any, task: Task) -> list[str]:
        """The member's other replies at its own task (none from a member without any)."""
        env, own = self.member(task)
        return list(env.other_replies(own)) if hasattr(env, "other_replies") else []


class _TurnScores:
    def turn_rewards(self: Any, task: Task, rollout: Any) -> list[float] | None:
        """The member's scores of the turns of its own task (None from one that scores none)."""
        env, own = self.member(task)
        return env.turn_rewards(own, rollout) if hasattr(env, "turn_rewards") else None


class _Probes:
    def probe_task(self: Any, task: Task, seed: int) -> Task:
        """The member's probe of its own task (else the task with `seed`), under the mixture's id."""
        env, own = self.member(task)
        probe = env.probe_task(own, seed) if hasattr(env, "probe_task") else dataclasses.replace(own, seed=seed)
        return dataclasses.replace(probe, id=task.id)


FORWARDED: dict[str, type] = {
    "restart_tasks": _Restarts,
    "other_replies": _Replies,
    "turn_rewards": _TurnScores,
    "probe_task": _Probes,
}
"""The method of each training protocol a mixture forwards, and the mixin that forwards it.
(`rlvr.train.protocols` sits above this module, so a member is asked by the method's name,
which is all a runtime-checkable protocol asks.)"""


_CLASSES: dict[tuple[type, tuple[str, ...]], type] = {}


def _offering(cls: type[EnvGroup], offered: tuple[str, ...]) -> type[EnvGroup]:
    """`cls` with the forwarding methods of `offered` (one class per combination, kept)."""
    if not offered:
        return cls
    if (cls, offered) not in _CLASSES:
        bases = (*(FORWARDED[n] for n in offered), cls)
        _CLASSES[cls, offered] = type(cls.__name__, bases, {"__module__": cls.__module__})
    return _CLASSES[cls, offered]


def _interleave(sets: Mapping[str, Sequence[Task]]) -> LazyTasks:
    """Every member's tasks under `NAME/ID`, one of each member in turn; a member's task is
    built when the mixture's is first asked for (a lazy member stays lazy)."""
    rows = itertools.zip_longest(*([(n, i) for i in range(len(ts))] for n, ts in sets.items()))
    order = [p for row in rows for p in row if p is not None]
    return LazyTasks(len(order), functools.partial(_member_task, dict(sets), order))


def _member_task(sets: Mapping[str, Sequence[Task]], order: Sequence[tuple[str, int]], k: int) -> Task:
    """Task `k` of an interleaving: its member's task under `NAME/ID`."""
    name, i = order[k]
    task = sets[name][i]
    return dataclasses.replace(task, id=f"{name}{SEP}{task.id}")


def _union_rubric(envs: Any) -> Rubric:
    """Every member's reward functions by name, for filters, metadata and metric names; it scores
    nothing (each member's rubric scores its own tasks). A name in several members is graded
    (weight != 0) when any of them grades it."""
    rubric = Rubric()
    for env in envs:
        for fn, weight in zip(env.rubric.funcs, env.rubric.weights):
            if fn.__name__ not in rubric.names:
                rubric.add(fn, weight)
            elif weight != 0.0:
                rubric.weights[rubric.names.index(fn.__name__)] = weight
    return rubric


def _strata(members: Mapping[str, MultiTurnEnv[Any]]) -> dict[str, tuple[int, tuple[float, float] | None, int]]:
    """Each member's (first stratum, difficulty span, number of difficulty buckets)."""
    out, offset = {}, 0
    for name, env in members.items():
        count = difficulty_buckets(env)
        out[name] = (offset, difficulty_span(env), count)
        offset += count
    return out


DEFAULT_MEMBERS = ("tictactoe", "reverse_text")
"""The members of `mix` without arguments: two of the environments bundled with rlvr."""


def load_environment(
    envs: Mapping[str, Mapping[str, Any]] | None = None, normalize: Mapping[str, Sequence[float]] | None = None
) -> EnvGroup:
    """rlvr environment: a mixture of installed environments, each with its own arguments.

    Args:
        envs: member name -> that environment's arguments, e.g.
            {"tictactoe": {"num_tasks": 100}, "reverse_text": {}}; an `env` key among the
            arguments names the environment, so that two members can be one environment
            with other arguments: {"legs": {"env": "reasoning_gym", "dataset": "leg_counting"},
            "words": {"env": "reasoning_gym", "dataset": "word_sorting"}}; default: each of
            `DEFAULT_MEMBERS` with its default arguments.
        normalize: member name -> [low, high]: that member's total reward mapped from
            [low, high] onto [0, 1] (e.g. {"taxi": [-20, 20]}).
    """
    from rlvr.errors import EnvNotFoundError
    from rlvr.registry import load_environment as load

    if envs is None:
        envs = {name: {} for name in DEFAULT_MEMBERS}
    if not isinstance(envs, Mapping) or not all(isinstance(a, Mapping) for a in envs.values()):
        raise UsageError(
            f'envs must map environment names to argument objects, e.g. {{"reverse_text": {{}}}}, got {envs!r}'
        )
    members = {}
    for name, given in envs.items():
        args = dict(given)
        env = args.pop("env", name)
        try:
            members[name] = load(env, **args)
        except EnvNotFoundError as exc:
            if "env" in given:
                raise
            raise EnvNotFoundError(
                f'{exc}; to name a member apart from its environment, give the environment as "env": '
                f'{{"{name}": {{"env": "reasoning_gym", ...}}}}'
            ) from None
    return EnvGroup(members, normalize)
