"""`GymEnv`: any Gymnasium environment as a multi-turn LLM environment (needs the `gym` extra).

    env = GymEnv(lambda: gymnasium.make("CliffWalking-v1", render_mode="ansi"),
                 action_names=["up", "right", "down", "left"], max_turns=30)

Task `i` is a reset seed (mixed from `seed` and i); its prompt is the description, the action
instructions and the rendered first observation. Each model turn is parsed into an action
(default: `<action>NAME or NUMBER</action>` for a `Discrete` action space) and passed to
``step``; the reply shows the reward and the next observation. An unreadable action wastes the
turn (no step) and is counted. Gymnasium's two endings map onto rlvr's: ``terminated`` ->
stop reason `terminated`, ``truncated`` (e.g. a time limit) -> stop reason `truncated`
(truncated=True); `max_turns` truncates too.

Rewards: `episode_return` (the sum of the step rewards, weight 1), `format_reward` (weight
`format_weight`, default 0: a metric), `invalid_action_rate` (a metric).

Randomness: ``reset(seed=task.seed)`` fixes the start; the dynamics (e.g. slippery ice) are
then reseeded from the rollout seed, so a group's rollouts are reproducible but independent.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from rlvr.clients.base import ChatClient
from rlvr.clients.policy import Policy
from rlvr.deprecation import renamed_arguments
from rlvr.envs.multiturn import MultiTurnEnv, stop
from rlvr.errors import EnvError, UsageError
from rlvr.parsers import Parser, XMLParser
from rlvr.rubric import Rubric
from rlvr.seeding import mix_seed
from rlvr.types import Messages, SamplingArgs, State, Task

Renderer = Callable[[Any, Any], str]
"""``(observation, env) -> text`` shown to the model."""
ActionParser = Callable[[str, Any], Any]
"""``(reply text, env) -> action``; raises ValueError (its message goes to the model) when unreadable."""

_ANSI = re.compile(r"\x1b\[[0-9;]*m")
KNOWN_ACTIONS: dict[str, list[str]] = {
    "FrozenLake": ["left", "down", "right", "up"],
    "CliffWalking": ["up", "right", "down", "left"],
    "Taxi": ["south", "north", "east", "west", "pickup", "dropoff"],
    "Blackjack": ["stick", "hit"],
}
"""Action names of Gymnasium's toy-text environments, by id prefix."""


def gymnasium_module() -> Any:
    """Import gymnasium, or say which extra to install."""
    try:
        import gymnasium
    except ImportError:
        raise UsageError("Gymnasium environments need gymnasium: pip install 'rlvr[gym]'") from None
    return gymnasium


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
    """The env's ``ansi`` render (colours stripped) when it has one, then the observation."""
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
            self.action_names = list(action_names) if action_names is not None else None
            n = getattr(self.action_space, "n", None)
            if self.action_names is not None and n is not None and len(self.action_names) != int(n):
                raise UsageError(f"action_names has {len(self.action_names)} names; the action space has {n} actions")
            if parse_action is None and n is None:
                raise UsageError(
                    "the default action parser needs a Discrete action space, "
                    f"got {self.action_space}; pass parse_action="
                )
            tasks = []
            for i in range(num_tasks):
                task_seed = mix_seed(seed, i)
                obs, _ = probe.reset(seed=task_seed)
                parts = [description, self.action_instructions(), self.render_observation(obs, probe)]
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
        if self.action_names is not None:
            choices = ", ".join(self.action_names)
            return f"Each turn, choose one action: {choices}. Reply with <action>NAME</action> {tail}"
        n, start = int(self.action_space.n), int(getattr(self.action_space, "start", 0))
        return (
            f"Each turn, choose one action, a number from {start} to {start + n - 1}. "
            f"Reply with <action>N</action> {tail}"
        )

    def parse_action(self, text: str, env: Any) -> Any:
        """The action in a reply; ValueError with a reason when there is none."""
        if self.action_parser is not None:
            return self.action_parser(text, env)
        value = self.parser.parse(text).last("action") if isinstance(self.parser, XMLParser) else None
        if value is None:
            raise ValueError("no <action>...</action> found")
        key = value.strip().lower()
        n, start = int(self.action_space.n), int(getattr(self.action_space, "start", 0))
        if self.action_names is not None and key in [a.lower() for a in self.action_names]:
            return start + [a.lower() for a in self.action_names].index(key)
        if key.lstrip("-").isdigit() and start <= int(key) < start + n:
            return int(key)
        allowed = ", ".join(self.action_names) if self.action_names else f"{start}..{start + n - 1}"
        raise ValueError(f"{value[:40]!r} is not an action; choose one of {allowed}")

    def format_action(self, action: int) -> str:
        """The reply that plays `action` (used by the random reference player)."""
        start = int(getattr(self.action_space, "start", 0))
        name = self.action_names[action - start] if self.action_names else str(action)
        return f"<action>{name}</action>"

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

    def policies(self) -> dict[str, Callable[[], ChatClient]]:
        if getattr(self.action_space, "n", None) is None:
            return {}
        n, start = int(self.action_space.n), int(getattr(self.action_space, "start", 0))
        return {
            "random": lambda: Policy(lambda messages, rng: self.format_action(start + rng.randrange(n)), name="random")
        }


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
    max_turns: int | None = 100,
    env_kwargs: dict[str, Any] | None = None,
    action_names: list[str] | None = None,
) -> GymEnv:
    """A registered Gymnasium env by id (rendered as ``ansi`` text when it supports it).

    Toy-text envs (FrozenLake, CliffWalking, Taxi, Blackjack) get their action names; others
    take numbers unless `action_names` is given.
    """
    gym = gymnasium_module()
    try:
        spec = gym.spec(env_id)
    except gym.error.Error as exc:
        raise UsageError(f"no Gymnasium env {env_id!r}: {exc}") from None
    kwargs = dict(env_kwargs or {})
    creator = spec.entry_point
    if not callable(creator):
        creator = gym.envs.registration.load_env_creator(creator)
    modes = getattr(creator, "metadata", {}).get("render_modes", [])
    if "ansi" in modes:
        kwargs.setdefault("render_mode", "ansi")
    names = action_names or next((v for k, v in KNOWN_ACTIONS.items() if spec.name.startswith(k)), None)
    return GymEnv(
        lambda: gym.make(env_id, **kwargs),
        num_tasks=num_tasks,
        seed=seed,
        max_turns=max_turns,
        description=f"You are playing the Gymnasium environment {env_id}.",
        action_names=names,
    )
