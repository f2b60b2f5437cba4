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
from rlvr.errors import UsageError, import_extra
from rlvr.rubric import Rubric
from rlvr.seeding import mix_seed
from rlvr.types import Messages, SamplingArgs, State, Task

SYSTEM_PROMPT = (
    "You are playing a text game. Each message shows what happened since your last move. You may "
    "think inside <think>...</think> first; then give your move in square brackets as the game "
    "describes, e.g. [4]. Only the first bracketed move after your thinking counts."
)
_THINK = re.compile(r"<think>.*?</think>", re.DOTALL)


def textarena_module() -> Any:
    """Import textarena, or say which extra to install."""
    return import_extra("textarena", "textarena", "TextArena environments")


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
    ) -> None:
        self.game, self.num_players, self.seat = game, num_players, seat
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
        state = ArenaState(task=task, game=textarena_module().make(_raw_id(self.game)))
        with self._game_random(state):
            state.game.reset(num_players=self.num_players, seed=task.seed)
        return state

    async def begin(self, state: ArenaState, client: ChatClient, sampling: SamplingArgs) -> None:
        with self._game_random(state):
            random.seed(state.seed)  # the opening came from the task seed; the rest from the rollout's
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
        self._step(state, reply, self.seat)
        text = await self._play_others(state)
        if state.done:
            text = f"{text}\n\nGame over: {state.reason} Result: {state.outcome}.".strip()
        return [{"role": "user", "content": text}]

    def _step(self, state: ArenaState, action: str, seat: int) -> None:
        env = state.game
        turn = env.state.turn
        with self._game_random(state):
            done, _ = env.step(action)
        info = env.state.game_info.get(seat, {})
        if env.state.turn == turn or info.get("invalid_move"):
            if seat == self.seat:
                state.invalid_moves += 1
            else:
                state.opponent_invalid_moves += 1
        if done:
            self._finish(state)

    def _finish(self, state: ArenaState) -> None:
        with self._game_random(state):
            rewards, info = state.game.close()
        state.done = True
        raw = None if rewards is None else rewards.get(self.seat)
        state.raw_reward = None if raw is None else float(raw)
        reasons = {str(i.get("reason")) for i in (info or {}).values() if i.get("reason")}
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
            if state.opponent is None:
                raise UsageError(f"{self.game}: seat {seat} has no player (opponent {self.opponent_name!r})")
            conversation = state.opponent_messages.setdefault(seat, [{"role": "system", "content": SYSTEM_PROMPT}])
            conversation.append({"role": "user", "content": observation_text(observation, seat)})
            base = state.opponent_sampling or self.sampling
            sampling = base.replace(seed=mix_seed(state.seed, 1000 + len(conversation)))
            completion = await state.opponent.chat(list(conversation), sampling)
            conversation.append({"role": "assistant", "content": completion.text or ""})
            self._step(state, _THINK.sub("", completion.text or "").strip(), seat)
        return observation_text(env.state.observations.get(self.seat, []), self.seat, rules=False)

    async def close_state(self, state: ArenaState) -> None:
        state.game = None

    @stop(priority=10)
    def game_over(self, state: ArenaState) -> bool:
        return state.done

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


def _raw_id(game: str) -> str:
    """The id of the game without TextArena's observation wrappers (rlvr formats the text)."""
    return game if game.endswith(("-raw", "-train")) else f"{game}-raw"


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


def seat_count(game: str, num_players: int | None) -> int:
    """The players `game` is played by: `num_players`, or the first of 1 and 2 it accepts."""
    ta = textarena_module()
    if (
        game.split("-raw")[0] not in ta.envs.registration.ENV_REGISTRY
        and _raw_id(game) not in ta.envs.registration.ENV_REGISTRY
    ):
        import difflib

        ids = sorted(k for k in ta.envs.registration.ENV_REGISTRY if not k.endswith(("-raw", "-train")))
        close = difflib.get_close_matches(game, ids, n=1)
        fix = f"did you mean {close[0]!r}?" if close else f"it has {len(ids)}: {', '.join(ids)}"
        raise UsageError(f"TextArena has no game {game!r}; {fix}")
    for n in [num_players] if num_players is not None else [1, 2]:
        try:
            ta.make(_raw_id(game)).reset(num_players=n, seed=0)
        except (AssertionError, ValueError) as exc:
            if num_players is not None:
                raise UsageError(f"TextArena game {game!r} cannot be played by {n} players: {exc}") from None
            continue
        return n
    raise UsageError(f"TextArena game {game!r} needs more than 2 players: pass num_players")


def make_tasks(game: str, num_players: int, seat: int, num_tasks: int, seed: int) -> list[Task]:
    """Task i: the game reset with seed `mix_seed(seed, i)`, its question the seat's rules."""
    ta = textarena_module()
    tasks = []
    saved = random.getstate()
    try:
        for i in range(num_tasks):
            task_seed = mix_seed(seed, i)
            env = ta.make(_raw_id(game))
            env.reset(num_players=num_players, seed=task_seed)
            rules = [m for _, m, kind in env.state.observations[seat] if kind.name == "PROMPT"]
            info = {"game": game, "seat": seat, "num_players": num_players}
            tasks.append(Task(id=f"game-{i}", question="\n\n".join(rules), info=info, seed=task_seed))
    finally:
        random.setstate(saved)
    return tasks


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
        num_players: players in the game (default: 1 if the game allows it, else 2).
        max_turns: most model turns; a game cut off there counts as a loss.
        max_tokens: most tokens in a reply, sent with every request.
    """
    if num_tasks < 1:
        raise UsageError(f"num_tasks must be >= 1, got {num_tasks}")
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
