"""The TextArena bridge: one game, the model in one seat, any other seat played inside the env."""

from __future__ import annotations

import contextlib
import functools
import random
import re
import statistics
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import rlvr.envs.textarena.players as players
from rlvr.clients.base import ChatClient
from rlvr.clients.policy import Policy
from rlvr.envs.multiturn import MultiTurnEnv, stop
from rlvr.envs.textarena.games import make_game, make_tasks, seat_count
from rlvr.envs.textarena.steps import call_game
from rlvr.errors import UsageError
from rlvr.rubric import Rubric
from rlvr.seeding import mix_seed
from rlvr.types import Messages, SamplingArgs, State, Task

SYSTEM_PROMPT = (
    "You are playing a text game. Each message shows what happened since your last move. You may "
    "think inside <think>...</think> first; then give your move in square brackets as the game "
    "describes, e.g. [4]. Only the first bracketed move after your thinking counts."
)
_THINK = re.compile(r"<think>.*?</think>", re.DOTALL)


@dataclass(kw_only=True)
class ArenaState(State):
    game: Any = None
    """The TextArena env of this rollout (not serialised)."""
    random_state: Any = None
    """The state of `random` this game draws from (TextArena games use the module's own)."""
    opponent: ChatClient | None = None
    opponent_sampling: SamplingArgs | None = None
    opponent_messages: dict[int, Messages] = field(default_factory=dict)
    """Each other seat's own conversation, as its player saw it."""
    done: bool = False
    raw_reward: float | None = None
    """The game's reward for the model's seat (None: the game did not end)."""
    outcome: str | None = None
    """win, draw or loss (single-player: win when the game's reward is 1, else loss)."""
    reason: str = ""
    invalid_moves: int = 0
    opponent_invalid_moves: int = 0
    opponent_moves: int = 0
    """Moves the other seats made (refused ones included); see `TextArenaEnv.max_opponent_moves`."""


class TextArenaEnv(MultiTurnEnv[ArenaState]):
    """One TextArena game; see `rlvr.envs.textarena`."""

    def __init__(
        self,
        game: str,
        *,
        num_players: int,
        tasks: list[Task],
        seat: int = 0,
        opponent: str = "random",
        opponent_client: Callable[[], ChatClient] | None = None,
        max_turns: int | None = 100,
        sampling: SamplingArgs | None = None,
        step_timeout_s: float = 60.0,
    ) -> None:
        self.game, self.num_players, self.seat = game, num_players, seat
        self.max_opponent_moves = (max_turns or 100) * (num_players - 1)
        """The other seats share the episode's budget: as many moves each as the model's
        `max_turns` (100 without one); a game they have not ended by then is cut off."""
        self.step_timeout_s = step_timeout_s
        """The most seconds one of TextArena's reset / step calls may take (`steps.call_game`)."""
        self.opponent_name = opponent
        self._opponent_factory = opponent_client
        self._opponent: ChatClient | None = None
        super().__init__(
            tasks,
            system_prompt=SYSTEM_PROMPT,
            rubric=Rubric([outcome_reward, game_reward, invalid_moves], weights=[1.0, 0.0, 0.0]),
            sampling=sampling,
            max_turns=max_turns,
        )

    # ---- players ------------------------------------------------------------------------------

    def policies(self) -> dict[str, Callable[[], ChatClient]]:
        found = {"random": players.random_player, **players.PLAYERS.get(self.game.split("-")[0], {})}
        return {name: functools.partial(Policy, fn, name=name) for name, fn in found.items()}

    async def start(self) -> None:
        if self._opponent is None and self._opponent_factory is not None:
            self._opponent = self._opponent_factory()

    async def aclose(self) -> None:
        if self._opponent is not None:
            await self._opponent.aclose()
            self._opponent = None

    # ---- the episode --------------------------------------------------------------------------

    @contextlib.contextmanager
    def _game_random(self, state: ArenaState) -> Iterator[None]:
        """Run game code on this rollout's own `random` stream, then put the caller's back."""
        saved = random.getstate()
        if state.random_state is not None:
            random.setstate(state.random_state)
        try:
            yield
        finally:
            state.random_state = random.getstate()
            random.setstate(saved)

    def setup_state(self, task: Task) -> ArenaState:
        return ArenaState(task=task, game=make_game(self.game))

    async def _call(self, state: ArenaState, fn: Callable[[], Any], what: str) -> Any:
        """Game code on this rollout's `random` stream, in a worker thread with a deadline."""

        def run() -> Any:
            with self._game_random(state):
                return fn()

        return await call_game(run, timeout_s=self.step_timeout_s, what=f"{self.game}: TextArena's {what}")

    async def begin(self, state: ArenaState, client: ChatClient, sampling: SamplingArgs) -> None:
        game, seed = state.game, state.task.seed

        def reset() -> None:
            game.reset(num_players=self.num_players, seed=seed)
            random.seed(state.seed)  # the opening came from the task seed; the rest from the rollout's

        await self._call(state, reset, "reset")
        state.opponent = client if self.opponent_name == "self" else self._opponent
        state.opponent_sampling = sampling
        opening = await self._play_others(state)
        if opening:
            state.prompt[-1] = {"role": "user", "content": f"{state.prompt[-1]['content']}\n\n{opening}"}
            state.messages = list(state.prompt)

    def initial_prompt(self, task: Task) -> Messages:
        return [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": str(task.question)}]

    async def env_response(self, messages: Messages, state: ArenaState) -> Messages:
        reply = _THINK.sub("", str(state.turns[-1].completion.text or "")).strip()
        await self._step(state, reply, self.seat)
        text = await self._play_others(state)
        if state.done:
            text = f"{text}\n\nGame over: {state.reason} Result: {state.outcome}.".strip()
        elif self.others_out_of_moves(state):
            text = f"{text}\n\nGame cut off: {state.reason}".strip()
        return [{"role": "user", "content": text}]

    async def _step(self, state: ArenaState, action: str, seat: int) -> None:
        env = state.game
        turn = env.state.turn

        def step() -> tuple[bool, Any]:
            done, _ = env.step(action)
            return done, env.close() if done else None

        done, closed = await self._call(state, step, "step")
        info = env.state.game_info.get(seat, {})
        if env.state.turn == turn or info.get("invalid_move"):
            if seat == self.seat:
                state.invalid_moves += 1
            else:
                state.opponent_invalid_moves += 1
        if done:
            self._finish(state, *closed)

    def _finish(self, state: ArenaState, rewards: dict[int, Any] | None, info: dict[int, Any] | None) -> None:
        state.done = True
        reasons = {str(i.get("reason")) for i in (info or {}).values() if i.get("reason")}
        raw = None if rewards is None else rewards.get(self.seat)
        if raw is not None and not isinstance(raw, (int, float)):
            # Countdown, Cryptarithm, Slitherlink, ThreeCardMonte (textarena 0.7.4) pass their
            # arguments to set_invalid_move the wrong way round: the reason arrives as the reward
            reasons.add(f"(the game gave the reward {str(raw)!r}, not a number: scored as its loss, -1)")
            raw = -1.0
        state.raw_reward = None if raw is None else float(raw)
        state.reason = " ".join(sorted(reasons))
        state.outcome = _outcome(state.raw_reward, self.num_players)

    async def _play_others(self, state: ArenaState) -> str:
        """Play the other seats until it is the model's turn or the game ends; the model's seat's
        new observations as text."""
        env = state.game
        while not state.done:
            seat, observation = env.get_observation()
            if seat == self.seat:
                return observation_text(observation, seat, rules=False)
            if state.opponent_moves >= self.max_opponent_moves:
                state.reason = f"the other seats made {state.opponent_moves} moves without ending the game"
                return observation_text(env.state.observations.get(self.seat, []), self.seat, rules=False)
            state.opponent_moves += 1
            if state.opponent is None:
                raise UsageError(f"{self.game}: seat {seat} has no player (opponent {self.opponent_name!r})")
            conversation = state.opponent_messages.setdefault(seat, [{"role": "system", "content": SYSTEM_PROMPT}])
            conversation.append({"role": "user", "content": observation_text(observation, seat)})
            base = state.opponent_sampling or self.sampling
            sampling = base.replace(seed=mix_seed(state.seed, 1000 + len(conversation)))
            completion = await state.opponent.chat(list(conversation), sampling)
            conversation.append({"role": "assistant", "content": completion.text or ""})
            await self._step(state, _THINK.sub("", completion.text or "").strip(), seat)
        return observation_text(env.state.observations.get(self.seat, []), self.seat, rules=False)

    async def close_state(self, state: ArenaState) -> None:
        state.game = None

    @stop(priority=10)
    def game_over(self, state: ArenaState) -> bool:
        return state.done

    @stop(priority=9, truncated=True)
    def others_out_of_moves(self, state: ArenaState) -> bool:
        """The other seats used `max_opponent_moves` without ending the game (a loss)."""
        return self.num_players > 1 and not state.done and state.opponent_moves >= self.max_opponent_moves

    def summarize(self, rollouts: Sequence[Any]) -> dict[str, float] | None:
        scored = [r for r in rollouts if r.error is None]
        if not scored:
            return None
        outcomes = [r.reward for r in scored]
        return {
            "win %": 100.0 * statistics.fmean(o == 1.0 for o in outcomes),
            "draw %": 100.0 * statistics.fmean(o == 0.5 for o in outcomes),
            "loss %": 100.0 * statistics.fmean(o == 0.0 for o in outcomes),
            "mean game reward": statistics.fmean(r.rewards.get("game_reward", 0.0) for r in scored),
            "invalid %": 100.0 * statistics.fmean(r.rewards.get("invalid_moves", 0.0) > 0 for r in scored),
        }


def _outcome(raw: float | None, num_players: int) -> str:
    """win / draw / loss from the game's reward for the model's seat.

    >>> [_outcome(r, 2) for r in (1, 0, -1, None)], [_outcome(r, 1) for r in (1.0, 0.4)]
    (['win', 'draw', 'loss', 'loss'], ['win', 'loss'])
    """
    if raw is None:
        return "loss"
    if num_players == 1:
        return "win" if raw >= 1.0 else "loss"
    return "win" if raw > 0 else "draw" if raw == 0 else "loss"


def observation_text(observation: Sequence[tuple[int, str, Any]], seat: int, *, rules: bool = True) -> str:
    """A seat's new observations as one message: the game's texts, and other players' moves as
    ``Player N: move`` (the seat's own moves, which it wrote, are left out; the rules too with
    `rules=False`: the model's seat has them in its task)."""
    parts = []
    for sender, message, kind in observation:
        name = getattr(kind, "name", "")
        if name == "PROMPT" and not rules:
            continue
        if name == "PLAYER_ACTION":
            if sender != seat:
                parts.append(f"Player {sender}: {message}")
        else:
            parts.append(str(message).strip())
    return "\n\n".join(p for p in parts if p)


# ---- reward functions -------------------------------------------------------------------------

OUTCOME_REWARD = {"win": 1.0, "draw": 0.5, "loss": 0.0}


def outcome_reward(state: ArenaState) -> float:
    """1 for a win, 0.5 for a draw, 0 for a loss or a game that did not end.

    >>> outcome_reward(ArenaState(task=Task(id="0", question="q"), outcome="draw"))
    0.5
    """
    return OUTCOME_REWARD.get(state.outcome or "loss", 0.0)


def game_reward(state: ArenaState) -> float:
    """The game's own reward for the model's seat (0 when the game did not end)."""
    return state.raw_reward if state.raw_reward is not None else 0.0


def invalid_moves(state: ArenaState) -> float:
    """Moves of the model that the game refused."""
    return float(state.invalid_moves)


# ---- entry point ------------------------------------------------------------------------------


def load_environment(
    game: str = "TicTacToe-v0",
    num_tasks: int = 20,
    seed: int = 0,
    seat: int = 0,
    opponent: str = "random",
    opponent_model: str | None = None,
    opponent_base_url: str | None = None,
    num_players: int | None = None,
    max_turns: int | None = 100,
    max_tokens: int = 1024,
    step_timeout_s: float = 60.0,
) -> TextArenaEnv:
    """A TextArena game by id, the model in `seat`, the other seats played inside the env.

    Args:
        game: a TextArena env id (`textarena.envs.registration.ENV_REGISTRY`), e.g. TicTacToe-v0.
        num_tasks: games; game i is reset with seed mix_seed(seed, i).
        seed: the seed the task seeds are mixed from; same arguments, same tasks.
        seat: the player id the model plays (0 moves first in most games).
        opponent: who plays the other seats: a reference player of this game (`random`, or
            one that `rlvr list` shows) or `self` (the model being evaluated or trained).
        opponent_model: instead, a second model: policy:NAME, a local model folder or an API
            model name (served at `opponent_base_url`).
        opponent_base_url: the OpenAI-compatible endpoint of `opponent_model`.
        num_players: players in the game (default: the game's own default, else the fewest it
            accepts, found by resetting it).
        max_turns: most model turns, and most moves of each other seat; a game cut off there
            counts as a loss.
        max_tokens: most tokens in a reply, sent with every request.
        step_timeout_s: most seconds one of TextArena's reset / step calls may take; past it
            the rollout fails with GameTimeout.
    """
    if num_tasks < 1:
        raise UsageError(f"num_tasks must be >= 1, got {num_tasks}")
    if step_timeout_s <= 0:
        raise UsageError(f"step_timeout_s must be > 0, got {step_timeout_s}")
    players_n = seat_count(game, num_players)
    if not 0 <= seat < players_n:
        raise UsageError(f"seat must be one of 0..{players_n - 1} for {game!r}, got {seat}")
    tasks = make_tasks(game, players_n, seat, num_tasks, seed)
    env = TextArenaEnv(
        game,
        num_players=players_n,
        tasks=tasks,
        seat=seat,
        opponent=opponent if opponent_model is None else opponent_model,
        max_turns=max_turns,
        sampling=SamplingArgs(max_tokens=max_tokens),
        step_timeout_s=step_timeout_s,
    )
    if opponent_model is not None:
        from rlvr.clients.resolve import make_client

        env._opponent_factory = functools.partial(make_client, opponent_model, env, base_url=opponent_base_url)
    elif opponent != "self" and players_n > 1:
        choices = env.policies()
        if opponent not in choices:
            names = ", ".join([*choices, "self"])
            raise UsageError(f"no opponent {opponent!r} for {game!r}; choose one of: {names}, or pass opponent_model")
        env._opponent_factory = choices[opponent]
    return env
