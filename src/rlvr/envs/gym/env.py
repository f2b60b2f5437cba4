"""`GymEnv`: any Gymnasium environment as a multi-turn LLM environment (needs the `gym` extra).

    env = GymEnv(lambda: gymnasium.make("CliffWalking-v1", render_mode="ansi"),
                 action_names=["up", "right", "down", "left"], max_turns=30)

Task `i` is a reset seed (mixed from `seed` and i); its prompt is the description, the rules
(for Gymnasium's toy-text and classic-control envs, `RULES`), the action instructions, the turn limit
and the rendered first observation. Each model turn is parsed into an action and passed to
``step``: `<action>NAME or NUMBER</action>` for a `Discrete` action space, JSON for `Box`,
`MultiDiscrete`, `MultiBinary`, `Tuple` and `Dict`, the text itself for `Text`
(`rlvr.envs.gym.spaces`); the reply shows the
reward and the next observation. An unreadable action wastes the
turn (no step) and is counted. Gymnasium's two endings map onto rlvr's: ``terminated`` ->
stop reason `terminated`, ``truncated`` (e.g. a time limit) -> stop reason `truncated`
(truncated=True); `max_turns` truncates too.

Rewards: `episode_return` (the sum of the step rewards, weight 1), `format_reward` (weight
`format_weight`, default 0: a metric), `invalid_action_rate` (a metric).

Reference players (`-m policy:NAME`): `random` for every supported action space; FrozenLake
`optimal` and Taxi `planner`, which read only the text (`rlvr.envs.gym.players`).

Randomness: ``reset(seed=task.seed)`` fixes the start; the dynamics (e.g. slippery ice) are
then reseeded from the rollout seed, so a group's rollouts are reproducible but independent.
"""

from __future__ import annotations

import importlib
import random
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import rlvr.envs.gym.classic_control as classic_control
import rlvr.envs.gym.players as players
import rlvr.envs.gym.spaces as spaces
import rlvr.envs.gym.toy_text as toy_text
from rlvr.clients.base import ChatClient
from rlvr.clients.policy import Policy
from rlvr.deprecation import renamed_arguments
from rlvr.envs.gym.toy_text import KNOWN_ACTIONS
from rlvr.envs.multiturn import MultiTurnEnv, stop
from rlvr.errors import EnvError, UsageError, import_extra
from rlvr.parsers import Parser, XMLParser
from rlvr.rubric import Rubric
from rlvr.seeding import mix_seed
from rlvr.types import Messages, SamplingArgs, State, Task

Renderer = Callable[[Any, Any], str]
"""``(observation, env) -> text`` shown to the model."""
ActionParser = Callable[[str, Any], Any]
"""``(reply text, env) -> action``; raises ValueError (its message goes to the model) when unreadable."""

_ANSI = re.compile(r"\x1b\[[0-9;]*m")
DEFAULT_MAX_TURNS = 100
"""`load_environment`'s turn limit for an env without a time limit of its own (CliffWalking, Blackjack)."""

RULES = {**toy_text.RULES, **classic_control.RULES}
"""The rules written for Gymnasium's toy-text and classic-control envs, by unwrapped class name."""
RENDERERS = {**toy_text.RENDERERS, **classic_control.RENDERERS}
"""Their observations in words, by unwrapped class name."""


def known(env: Any) -> str | None:
    """The class name of `env` when this package describes it (`RULES`, `RENDERERS`)."""
    name = type(getattr(env, "unwrapped", env)).__name__
    return name if name in RENDERERS else None


def gymnasium_module() -> Any:
    """Import gymnasium, or say which extra to install."""
    return import_extra("gymnasium", "gym", "Gymnasium environments")


@dataclass(kw_only=True)
class GymState(State):
    env: Any = None
    """The Gymnasium env of this rollout (not serialised)."""
    observation: Any = None
    episode_return: float = 0.0
    steps: int = 0
    env_terminated: bool = False
    env_truncated: bool = False
    invalid_actions: int = 0
    reseeded: bool = False


def default_renderer(observation: Any, env: Any) -> str:
    """The env's ``ansi`` render (colours stripped) when it has one, then the observation.

    The toy-text envs get `toy_text`'s renders instead (the state their colours showed as
    letters, the observation decoded), the classic-control envs `classic_control`'s (each field
    by name)."""
    kind = known(env)
    if kind is not None:
        return RENDERERS[kind](observation, env)
    text = ""
    if getattr(env, "render_mode", None) == "ansi":
        text = _ANSI.sub("", str(env.render() or "")).strip("\n") + "\n"
    value = observation.tolist() if hasattr(observation, "tolist") else observation
    return f"{text}Observation: {value}"


class GymEnv(MultiTurnEnv[GymState]):
    """A Gymnasium env played by a model; see the module docstring."""

    def __init__(
        self,
        make_env: Callable[[], Any],
        *,
        num_tasks: int = 10,
        seed: int = 0,
        description: str = "",
        rules: str | None = None,
        action_names: Sequence[str] | None = None,
        render_observation: Renderer | None = None,
        parse_action: ActionParser | None = None,
        format_weight: float = 0.0,
        max_turns: int | None = None,
        system_prompt: str | None = None,
        sampling: SamplingArgs | None = None,
        max_completion_tokens: int | None = None,
        timeout_s: float | None = None,
    ) -> None:
        gymnasium_module()
        if num_tasks < 1:
            raise UsageError(f"num_tasks must be >= 1, got {num_tasks}")
        self.make_env = make_env
        self.render_observation = render_observation or default_renderer
        self.action_parser = parse_action
        probe = make_env()
        try:
            self.action_space = probe.action_space
            self.kind = known(probe)
            """The class name of a Gymnasium env this package describes (FrozenLakeEnv, CartPoleEnv, ...)."""
            if action_names is None and self.kind in classic_control.ACTION_NAMES:
                action_names = classic_control.ACTION_NAMES[self.kind]
            self.action_names = list(action_names) if action_names is not None else None
            n = getattr(self.action_space, "n", None)
            if self.action_names is not None and n is not None and len(self.action_names) != int(n):
                raise UsageError(f"action_names has {len(self.action_names)} names; the action space has {n} actions")
            if self.action_names is not None and n is None:
                raise UsageError(f"action_names needs a Discrete action space, got {self.action_space}")
            if parse_action is None:
                try:
                    spaces.check_supported(self.action_space)
                except ValueError as exc:
                    raise UsageError(str(exc)) from None
            if rules is None and self.kind is not None:
                rules = RULES[self.kind](probe)
            limit = getattr(getattr(probe, "spec", None), "max_episode_steps", None)
            self.time_limit: int | None = limit
            """The env's own time limit (``spec.max_episode_steps``), if it has one."""
            limits = [x for x in (max_turns, limit) if x is not None]
            self.horizon: int | None = min(limits) if limits else None
            """The most turns an episode can last (max_turns or the env's time limit), if known."""
            turns = f"The episode ends after at most {self.horizon} turns." if self.horizon else ""
            tasks = []
            for i in range(num_tasks):
                task_seed = mix_seed(seed, i)
                obs, _ = probe.reset(seed=task_seed)
                parts = [description, rules, self.action_instructions(), turns, self.render_observation(obs, probe)]
                prompt = "\n\n".join(p for p in parts if p)
                tasks.append(Task(id=f"episode-{i}", question=prompt, seed=task_seed))
        finally:
            probe.close()
        parser = XMLParser(["think", "action"], optional=["think"])
        rubric = Rubric(
            [episode_return, format_reward, invalid_action_rate], weights=[1.0, format_weight, 0.0], parser=parser
        )
        super().__init__(
            tasks,
            system_prompt=system_prompt,
            parser=parser,
            rubric=rubric,
            sampling=sampling,
            max_turns=max_turns,
            max_completion_tokens=max_completion_tokens,
            timeout_s=timeout_s,
        )

    # ---- actions ----------------------------------------------------------------------------

    def action_instructions(self) -> str:
        """The sentence of the prompt that says how to answer."""
        tail = "(optionally after <think>...</think>)."
        space = self.action_space
        if self.action_names is not None:
            choices = ", ".join(self.action_names)
            return f"Each turn, choose one action: {choices}. Reply with <action>NAME</action> {tail}"
        if type(space).__name__ == "Discrete":
            n, start = int(space.n), int(space.start)
            return (
                f"Each turn, choose one action, a number from {start} to {start + n - 1}. "
                f"Reply with <action>N</action> {tail}"
            )
        if self.action_parser is not None:
            return ""  # a custom parser: the description says how to answer
        if type(space).__name__ == "Text":
            return f"Each turn, write one action: {spaces.describe(space)}. Reply with <action>TEXT</action> {tail}"
        return (
            f"Each turn, choose one action: {spaces.describe(space)}. "
            f"Reply with it in JSON, e.g. <action>{spaces.example(space)}</action> {tail}"
        )

    def parse_action(self, text: str, env: Any) -> Any:
        """The action in a reply; ValueError with a reason when there is none."""
        if self.action_parser is not None:
            return self.action_parser(text, env)
        value = self.parser.parse(text).last("action") if isinstance(self.parser, XMLParser) else None
        if value is None:
            raise ValueError("no <action>...</action> found")
        return spaces.parse(value, self.action_space, self.action_names)

    def format_action(self, action: Any) -> str:
        """The reply that plays `action` (used by the reference players)."""
        return f"<action>{spaces.to_text(action, self.action_space, self.action_names)}</action>"

    # ---- the episode ------------------------------------------------------------------------

    def setup_state(self, task: Task) -> GymState:
        env = self.make_env()
        obs, _ = env.reset(seed=task.seed)
        if self.render_observation(obs, env) not in str(task.question):
            env.close()
            raise EnvError(
                f"reset(seed={task.seed}) gave another first observation than when the task was "
                "built; the Gymnasium env must be deterministic given the reset seed"
            )
        return GymState(task=task, env=env, observation=obs)

    async def close_state(self, state: GymState) -> None:
        if state.env is not None:
            state.env.close()

    async def env_response(self, messages: Messages, state: GymState) -> Messages:
        env = state.env
        if not state.reseeded:  # the start came from the task seed; the dynamics from the rollout's
            from gymnasium.utils.seeding import np_random

            env.unwrapped.np_random = np_random(state.seed)[0]
            state.reseeded = True
        try:
            action = self.parse_action(state.turns[-1].completion.text, env)
        except ValueError as exc:
            state.invalid_actions += 1
            head = f"Invalid action: {exc}. The turn is lost."
        else:
            obs, reward, terminated, truncated, _ = env.step(action)
            state.observation, state.steps = obs, state.steps + 1
            state.episode_return += float(reward)
            state.env_terminated, state.env_truncated = bool(terminated), bool(truncated)
            head = f"Reward: {float(reward):g}. Return so far: {state.episode_return:g}."
            if terminated:
                head += " The episode is over."
            elif truncated:
                head += " The episode was cut short (time limit)."
        return [{"role": "user", "content": f"{head}\n\n{self.render_observation(state.observation, env)}"}]

    @stop(priority=10)
    def terminated(self, state: GymState) -> bool:
        return state.env_terminated

    @stop(priority=5, truncated=True)
    def truncated(self, state: GymState) -> bool:
        return state.env_truncated

    def summarize(self, rollouts: Sequence[Any]) -> dict[str, float] | None:
        """When `max_turns` is below the env's own time limit (or the env has none): the share
        of scored episodes it cut, in % (``cut by max_turns %``), so a limit too short shows."""
        scored = [r for r in rollouts if r.error is None]
        if not scored or self.max_turns is None or (self.time_limit and self.max_turns >= self.time_limit):
            return None
        cut = sum(r.stop_reason == "max_turns_reached" for r in scored)
        return {"cut by max_turns %": 100.0 * cut / len(scored)}

    def policies(self) -> dict[str, Callable[[], ChatClient]]:
        if self.action_parser is not None:
            return {}
        found: dict[str, Callable[[], ChatClient]] = {"random": lambda: Policy(self.random_reply, name="random")}
        if self.kind == "FrozenLakeEnv" and self.horizon is not None:
            found["optimal"] = lambda: Policy(self._player(players.frozen_lake_optimal), name="optimal")
        if self.kind == "TaxiEnv":
            found["planner"] = lambda: Policy(self._player(players.taxi_planner), name="planner")
        return found

    def random_reply(self, messages: Messages, rng: random.Random) -> str:
        """A uniformly random action (drawn by the action space, seeded from `rng`)."""
        space = self.action_space
        if type(space).__name__ == "Discrete":
            return self.format_action(int(space.start) + rng.randrange(int(space.n)))
        space.seed(rng.randrange(2**32))
        return self.format_action(space.sample())

    def _player(self, choose: Callable[[Messages], int]) -> Callable[[Messages, random.Random], str]:
        return lambda messages, rng: self.format_action(int(self.action_space.start) + choose(messages))


# ---- reward functions -----------------------------------------------------------------------


def episode_return(state: GymState) -> float:
    """The sum of the env's step rewards."""
    return state.episode_return


def format_reward(completion: Messages, parser: Parser) -> float:
    """Share of turns that are exactly `[<think>...</think>] <action>...</action>`."""
    return parser.format_reward(completion)


def invalid_action_rate(state: GymState) -> float:
    """Share of turns without a readable action."""
    return state.invalid_actions / state.turn if state.turn else 0.0


@renamed_arguments(num_examples="num_tasks")
def load_environment(
    env_id: str = "FrozenLake-v1",
    num_tasks: int = 10,
    seed: int = 0,
    max_turns: int | None = None,
    env_kwargs: dict[str, Any] | None = None,
    action_names: list[str] | None = None,
) -> GymEnv:
    """A registered Gymnasium env by id (rendered as ``ansi`` text when it supports it).

    ``module:EnvId`` imports `module` first (which registers its envs), as ``gym.make`` does:
    ``ice_maze.gym:IceMaze-v0``. Toy-text envs (FrozenLake, CliffWalking, Taxi, Blackjack) and
    the Discrete classic-control ones (CartPole, MountainCar, Acrobot) get their action names;
    other Discrete spaces take numbers unless `action_names` is given. `max_turns`: None gives
    the env's own time limit (``spec.max_episode_steps``), else `DEFAULT_MAX_TURNS`.
    """
    gym = gymnasium_module()
    module, _, name = env_id.rpartition(":")
    if module:
        try:
            importlib.import_module(module)
        except ImportError as exc:
            raise UsageError(f"cannot import {module!r} (from env_id {env_id!r}): {exc}") from None
    try:
        spec = gym.spec(name)
    except gym.error.Error as exc:
        raise UsageError(f"no Gymnasium env {name!r}: {exc}") from None
    kwargs = dict(env_kwargs or {})
    creator = spec.entry_point
    if not callable(creator):
        creator = gym.envs.registration.load_env_creator(creator)
    modes = getattr(creator, "metadata", {}).get("render_modes", [])
    if "ansi" in modes:
        kwargs.setdefault("render_mode", "ansi")
    names = action_names or next((v for k, v in KNOWN_ACTIONS.items() if spec.name.startswith(k)), None)
    if max_turns is None:
        max_turns = kwargs.get("max_episode_steps", spec.max_episode_steps) or DEFAULT_MAX_TURNS

    def make() -> Any:
        try:
            return gym.make(name, **kwargs)
        except TypeError as exc:
            raise UsageError(f"Gymnasium env {name!r} rejected env_kwargs {kwargs}: {exc}") from None

    return GymEnv(
        make,
        num_tasks=num_tasks,
        seed=seed,
        max_turns=max_turns,
        description=f"You are playing the Gymnasium environment {name}.",
        action_names=names,
    )
