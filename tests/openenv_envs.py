"""Three small OpenEnv environments, written with OpenEnv's own server classes (`Environment`,
`Action`, `Observation`, `create_fastapi_app`) as OpenEnv's template and its envs are: OpenEnv's
own environments live in its repository, not on PyPI.

- echo: the action's `message` is echoed back; reward 0.1 a character (at most 1); 3 steps.
- guess: find a number in 1..100 (`guess: int`, a JSON action); feedback higher / lower;
  reward 1 when found; 7 attempts.
- arithmetic: one question `a + b` (seeded); `answer: str`; reward 1 when right; one step.
"""

from __future__ import annotations

import random
from typing import Any

from openenv.core.env_server.http_server import create_fastapi_app
from openenv.core.env_server.interfaces import Environment
from openenv.core.env_server.types import Action, Observation, State
from pydantic import Field


class EchoAction(Action):
    message: str = Field(..., description="Message to echo back")


class EchoObservation(Observation):
    echoed_message: str = ""
    message_length: int = 0


class EchoEnvironment(Environment):
    SUPPORTS_CONCURRENT_SESSIONS = True
    STEPS = 3

    def __init__(self) -> None:
        super().__init__()
        self._state = State(episode_id="", step_count=0)

    def reset(self, seed: int | None = None, episode_id: str | None = None, **kwargs: Any) -> EchoObservation:
        self._state = State(episode_id=episode_id or "echo", step_count=0)
        return EchoObservation(echoed_message="Echo environment ready! Say something.", reward=0.0)

    def step(self, action: EchoAction, timeout_s: float | None = None, **kwargs: Any) -> EchoObservation:  # type: ignore[override]
        self._state.step_count += 1
        message = action.message
        reward = min(len(message) * 0.1, 1.0)
        done = self._state.step_count >= self.STEPS
        return EchoObservation(echoed_message=message, message_length=len(message), reward=reward, done=done)

    @property
    def state(self) -> State:
        return self._state


class GuessAction(Action):
    guess: int = Field(..., ge=1, le=100, description="Your guess, 1..100")


class GuessObservation(Observation):
    feedback: str = ""
    attempts_left: int = 0


class GuessEnvironment(Environment):
    SUPPORTS_CONCURRENT_SESSIONS = True
    ATTEMPTS = 7

    def __init__(self) -> None:
        super().__init__()
        self._state = State(episode_id="", step_count=0)
        self.secret = 0

    def reset(self, seed: int | None = None, episode_id: str | None = None, **kwargs: Any) -> GuessObservation:
        self._state = State(episode_id=episode_id or "guess", step_count=0)
        self.secret = random.Random(seed).randint(1, 100)
        return GuessObservation(feedback="I am thinking of a number from 1 to 100.", attempts_left=self.ATTEMPTS)

    def step(self, action: GuessAction, timeout_s: float | None = None, **kwargs: Any) -> GuessObservation:  # type: ignore[override]
        self._state.step_count += 1
        left = self.ATTEMPTS - self._state.step_count
        if action.guess == self.secret:
            return GuessObservation(feedback="correct", attempts_left=left, reward=1.0, done=True)
        feedback = "higher" if action.guess < self.secret else "lower"
        return GuessObservation(feedback=feedback, attempts_left=left, reward=0.0, done=left == 0)

    @property
    def state(self) -> State:
        return self._state


class ArithmeticAction(Action):
    answer: str = Field(..., description="The answer, a number")


class ArithmeticObservation(Observation):
    question: str = ""


class ArithmeticEnvironment(Environment):
    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self) -> None:
        super().__init__()
        self._state = State(episode_id="", step_count=0)
        self.expected = 0

    def reset(self, seed: int | None = None, episode_id: str | None = None, **kwargs: Any) -> ArithmeticObservation:
        self._state = State(episode_id=episode_id or "arithmetic", step_count=0)
        rng = random.Random(seed)
        a, b = rng.randint(10, 99), rng.randint(10, 99)
        self.expected = a + b
        return ArithmeticObservation(question=f"What is {a} + {b}?")

    def step(self, action: ArithmeticAction, timeout_s: float | None = None, **kwargs: Any) -> ArithmeticObservation:  # type: ignore[override]
        self._state.step_count += 1
        right = action.answer.strip() == str(self.expected)
        return ArithmeticObservation(question="", reward=1.0 if right else 0.0, done=True)

    @property
    def state(self) -> State:
        return self._state


echo_app = create_fastapi_app(EchoEnvironment, EchoAction, EchoObservation, max_concurrent_envs=16)
guess_app = create_fastapi_app(GuessEnvironment, GuessAction, GuessObservation, max_concurrent_envs=16)
guess_app_one_session = create_fastapi_app(GuessEnvironment, GuessAction, GuessObservation)  # OpenEnv's default: 1
arithmetic_app = create_fastapi_app(
    ArithmeticEnvironment, ArithmeticAction, ArithmeticObservation, max_concurrent_envs=16
)
