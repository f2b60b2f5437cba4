"""`TextGymEnv`: any rlvr environment as a Gymnasium env, text in and text out.

    from rlvr.envs.gym.adapter import TextGymEnv
    env = TextGymEnv(load_environment("tictactoe"))
    observation, info = env.reset(seed=0)          # the system prompt and the task's prompt
    observation, reward, terminated, truncated, info = env.step("<move>5</move>")

An action is the text of one model turn; an observation is the text the environment sends
back (the contents of its new messages, joined by blank lines; at reset, the system prompt and
the task's prompt). The episode is the env's own rollout, played by the env's final
``rollout`` loop with the Gym caller as its client: the same stop conditions, ``max_turns``,
timeouts and error records as under ``rlvr eval``. So the turn a Gym agent takes and the turn a
model takes are the same thing, and a policy's returns agree between the two.

- ``reset(seed=s)`` draws a task of `split` and the rollout's seed from ``np_random``, so a
  seed fixes the episode; ``options={"task": i}`` picks task `i` instead, and
  ``options={"rollout_seed": s}`` the rollout seed (``rlvr.engine.rollout_seed(task, k)``
  replays rollout `k` of ``rlvr eval``).
- Reward: 0 on every step but the last; the last gets the rubric's total (the reward
  ``rlvr eval`` would record: in a mixture, the rubric of the task's member), and
  ``info["rewards"]`` every function's score.
- ``info["messages"]``: the conversation so far as chat messages (the system prompt apart),
  for an agent that wants them rather than the joined text.
- ``terminated`` / ``truncated`` mirror the rollout's stop (``info["stop_reason"]``); an
  error inside the env ends the episode truncated, with ``info["error"]``.
- Spaces: ``Text`` over the Basic Multilingual Plane (a character beyond it is shown as
  U+FFFD), observations up to `max_chars` characters, actions up to `max_action_chars`.

Importing this module registers ``rlvr/TextEnv-v0``, so Gymnasium tooling that wants an id
(``check_env`` tries other render modes through ``env.spec``) gets one:
``gymnasium.make("rlvr/TextEnv-v0", env=load_environment("tictactoe"))``; a ``TextGymEnv``
built directly carries the same spec.

Text actions only: an env that expects tool calls cannot be played through this adapter.
"""

from __future__ import annotations

import asyncio
from typing import Any

try:
    import gymnasium
    from gymnasium import spaces
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ImportError("rlvr.envs.gym.adapter needs gymnasium: pip install 'rlvr[gym]'") from exc

from rlvr.envs.multiturn import MultiTurnEnv
from rlvr.errors import EnvError, UsageError
from rlvr.types import Completion, Messages, SamplingArgs

CHARSET = "".join(chr(i) for i in range(0x10000) if not 0xD800 <= i < 0xE000)
"""Every character of the Basic Multilingual Plane (no lone surrogates)."""
_CHARS = frozenset(CHARSET)


class _Caller:
    """The rollout's client: each `chat` hands the conversation out and waits for the action."""

    name = "gymnasium"

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.asked: asyncio.Future[Messages] = loop.create_future()
        self.answer: asyncio.Future[str] | None = None

    async def chat(self, messages: Messages, sampling: SamplingArgs, tools: Any = None) -> Completion:
        if tools:
            raise EnvError("this env offers tools; TextGymEnv plays text actions only")
        self.answer = self.loop.create_future()
        self.asked.set_result(list(messages))
        return Completion(text=await self.answer)

    async def aclose(self) -> None:
        """Nothing to release."""


class TextGymEnv(gymnasium.Env):
    """See the module docstring."""

    metadata = {"render_modes": ["ansi"], "render_fps": 1}  # noqa: RUF012 (Gymnasium's convention)

    def __init__(
        self,
        env: MultiTurnEnv[Any],
        *,
        split: str = "eval",
        max_chars: int = 100_000,
        max_action_chars: int = 10_000,
        render_mode: str | None = None,
    ) -> None:
        if render_mode not in (None, "ansi"):
            raise UsageError(f"render_mode must be None or 'ansi', got {render_mode!r}")
        self.env = env
        self.tasks = env.tasks(split)
        if not self.tasks:
            raise UsageError(f"the environment has no {split} tasks")
        self.render_mode = render_mode
        self.max_chars = max_chars
        self.observation_space = spaces.Text(max_chars, min_length=0, charset=CHARSET)
        self.action_space = spaces.Text(max_action_chars, min_length=0, charset=CHARSET)
        self._loop = asyncio.new_event_loop()  # replaced by a fresh one on a reset after close()
        self._caller: _Caller | None = None
        self._episode: asyncio.Task[Any] | None = None
        self._rubric = env.rubric
        self._messages: Messages = []
        if self.spec is None:  # built directly: the spec `gymnasium.make` would give (check_env wants one)
            kwargs = {"env": env, "split": split, "max_chars": max_chars, "max_action_chars": max_action_chars}
            self.spec = gymnasium.envs.registration.EnvSpec(ENV_ID, entry_point=ENTRY_POINT, kwargs=kwargs)

    # ---- the Gymnasium API ------------------------------------------------------------------

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        super().reset(seed=seed)
        if self._loop.is_closed():
            self._loop = asyncio.new_event_loop()
        self._abandon()
        index = int((options or {}).get("task", self.np_random.integers(len(self.tasks))))
        if not 0 <= index < len(self.tasks):
            raise UsageError(f"options['task'] must be in 0..{len(self.tasks) - 1}, got {index}")
        task = self.tasks[index]
        rollout_seed = int((options or {}).get("rollout_seed", self.np_random.integers(2**31)))
        self._rubric = self.env.member(task)[0].rubric  # a mixture's task is scored by its member
        self._caller = _Caller(self._loop)
        episode = self.env.rollout(self._caller, task, self.env.sampling, rollout_seed)
        self._episode = self._loop.create_task(episode)
        asked = self._advance()
        if asked is None:
            state = self._episode.result()
            raise EnvError(f"task {task.id!r} ended before its first turn ({state.stop_reason}): {state.error}")
        self._messages = asked
        return self._text(asked), {"task_id": task.id, "turn": 0, "messages": list(asked)}

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        caller, episode = self._caller, self._episode
        if caller is None or episode is None or episode.done() or caller.answer is None:
            raise RuntimeError("the episode is over: call reset() before step()")
        if not isinstance(action, str):
            raise TypeError(f"an action is the text of one turn (str), got {type(action).__name__}")
        seen = len(self._messages) + 1  # the conversation so far, and the action itself
        caller.asked = self._loop.create_future()
        caller.answer.set_result(action)
        asked = self._advance()
        if asked is not None:
            new, self._messages = asked[seen:], asked
            turn = sum(m.get("role") == "assistant" for m in asked)
            return self._text(new), 0.0, False, False, {"turn": turn, "messages": list(asked)}
        state = episode.result()
        new = list(state.turns[-1].env_messages) if state.turns else []
        self._messages = list(state.messages)
        info: dict[str, Any] = {"turn": state.turn, "messages": list(state.messages), "stop_reason": state.stop_reason}
        reward = 0.0
        if state.error is not None:
            info["error"] = state.error
        else:
            scores = self._loop.run_until_complete(self._rubric.score_group([state]))[0]
            reward, info["rewards"] = self._rubric.total(scores), scores
        return self._text(new), float(reward), not state.truncated, bool(state.truncated), info

    def render(self) -> str | None:
        if self.render_mode != "ansi":
            return None
        return "\n\n".join(f"[{m.get('role')}] {m.get('content') or ''}" for m in self._messages) + "\n"

    def close(self) -> None:
        if self._loop.is_closed():
            return
        self._abandon()
        self._loop.run_until_complete(self.env.aclose())
        self._loop.close()

    # ---- helpers ----------------------------------------------------------------------------

    def _advance(self) -> Messages | None:
        """Run the rollout until it asks for the next action (its conversation) or ends (None)."""
        assert self._caller is not None and self._episode is not None
        asked = self._caller.asked
        pending: list[asyncio.Future[Any]] = [asked, self._episode]
        self._loop.run_until_complete(asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED))
        return asked.result() if asked.done() else None

    def _abandon(self) -> None:
        """Cancel an episode left unfinished (its env state is still closed by `rollout`)."""
        if self._episode is not None and not self._episode.done():
            self._episode.cancel()
            self._loop.run_until_complete(asyncio.gather(self._episode, return_exceptions=True))
        self._episode = self._caller = None

    def _text(self, messages: Messages) -> str:
        text = "\n\n".join(str(m.get("content") or "") for m in messages)
        if len(text) > self.max_chars:
            raise EnvError(
                f"an observation of {len(text)} characters exceeds max_chars={self.max_chars}; pass a larger one"
            )
        return "".join(c if c in _CHARS else "\ufffd" for c in text)


ENV_ID = "rlvr/TextEnv-v0"
ENTRY_POINT = "rlvr.envs.gym.adapter:TextGymEnv"


def register() -> None:
    """Register ``rlvr/TextEnv-v0`` (idempotent; importing this module does it)."""
    if ENV_ID not in gymnasium.registry:
        gymnasium.register(id=ENV_ID, entry_point=ENTRY_POINT)


register()
