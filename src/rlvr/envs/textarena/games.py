"""What the bridge reads from TextArena's catalogue: a game made without TextArena's
observation wrappers, the number of players it is played by, its tasks, and, for a game that
cannot be made here, the reason in one line."""

from __future__ import annotations

import contextlib
import difflib
import functools
import importlib.metadata
import random
import sys
from collections.abc import Iterator
from typing import Any

from rlvr.errors import UsageError, import_extra
from rlvr.seeding import mix_seed
from rlvr.types import Task

MAX_PLAYERS = 15
"""The most players any TextArena game takes (its docs: "2-15 players")."""


BROKEN = {
    ("0.7.4", "CharacterConclave"): (
        "textarena 0.7.4's CharacterConclave calls State.add_observation without its observation_type: "
        "every move raises TypeError"
    ),
}
"""Games that load but cannot be played in a given textarena version (found by
benchmarks/textarena_catalogue.py), by (version, the game's name up to its first '-')."""


@functools.lru_cache(maxsize=1)
def textarena_version() -> str:
    return importlib.metadata.version("textarena")


def textarena_module() -> Any:
    """Import textarena, or say which extra to install."""
    return import_extra("textarena", "textarena", "TextArena environments")


def game_ids() -> list[str]:
    """The ids of TextArena's games, without the `-raw` / `-train` copies of each."""
    registry = textarena_module().envs.registration.ENV_REGISTRY
    return sorted(k for k in registry if not k.endswith(("-raw", "-train")) and "-raw-" not in k and "-train-" not in k)


def raw_id(game: str) -> str:
    """The id of `game` without TextArena's observation wrappers (rlvr formats the text itself):
    its `-raw` copy where TextArena registers one."""
    registry = textarena_module().envs.registration.ENV_REGISTRY
    if game.endswith(("-raw", "-train")) or f"{game}-raw" not in registry:
        return game
    return f"{game}-raw"


def check_id(game: str) -> None:
    """Raise UsageError naming the closest id when TextArena has no game `game`."""
    registry = textarena_module().envs.registration.ENV_REGISTRY
    if game in registry:
        return
    ids = game_ids()
    close = difflib.get_close_matches(game, ids, n=1)
    fix = f"did you mean {close[0]!r}?" if close else f"it has {len(ids)}: {', '.join(ids)}"
    raise UsageError(f"TextArena has no game {game!r}; {fix}")


def load_reason(exc: BaseException) -> str:
    """Why a game could not be made or reset, in words a user can act on.

    >>> load_reason(FileNotFoundError(2, "No such file", "blue_book.txt"))
    'the installed textarena package lacks a data file the game reads (blue_book.txt)'
    """
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    if isinstance(exc, SyntaxError):
        where = f"{exc.filename}, line {exc.lineno}" if exc.filename else "its source"
        version = f"{sys.version_info.major}.{sys.version_info.minor}"
        return (
            f"its code does not compile on Python {version} ({exc.msg}, {where}): TextArena writes "
            "f-strings that only Python 3.12 or later parses; run it on Python 3.12+"
        )
    if isinstance(exc, LookupError) and ("nltk" in str(exc).lower() or "Resource" in str(exc)):
        return "it needs NLTK data that it downloads when made, and the download failed: it needs the network"
    if "OPENROUTER_API_KEY" in str(exc):
        return "it calls a model through OpenRouter (a judge or a built-in player): set OPENROUTER_API_KEY; it needs the network"
    if isinstance(exc, FileNotFoundError):
        return f"the installed textarena package lacks a data file the game reads ({exc.filename or text})"
    if isinstance(exc, ImportError) and "No module named" in str(exc):
        missing = str(exc).rsplit("No module named", 1)[1].strip(" .'\"")
        if missing.split(".")[0] == "textarena":
            return f"TextArena registers it with a module the installed textarena lacks ({missing})"
        return f"it imports the package {missing!r}, which textarena does not install: pip install {missing}"
    return f"TextArena fails to make it: {type(exc).__name__}: {text}"


@contextlib.contextmanager
def kept_random() -> Iterator[None]:
    """Run game code (which seeds and draws from the module-level `random`), then put the
    caller's `random` state back."""
    saved = random.getstate()
    try:
        yield
    finally:
        random.setstate(saved)


def make_game(game: str) -> Any:
    """A fresh TextArena env of `game`, without observation wrappers; UsageError with the reason
    when TextArena cannot make it here."""
    ta = textarena_module()
    check_id(game)
    broken = BROKEN.get((textarena_version(), game.split("-")[0]))
    if broken is not None:
        raise UsageError(f"TextArena game {game!r} cannot be played: {broken}")
    try:
        env = ta.make(raw_id(game))
    except Exception as exc:
        raise UsageError(f"TextArena game {game!r} cannot be loaded: {load_reason(exc)}") from None
    while isinstance(env, ta.Wrapper):  # a game with no -raw copy (BabyAiText): its wrappers off
        env = env.env
    return env


def _refusal(env: Any, n: int) -> str | None:
    """Why `env` cannot be played by `n` players (None: it can); `env` is reset to `n`."""
    ta = textarena_module()
    try:
        env.reset(num_players=n, seed=0)
    except (AssertionError, ValueError) as exc:
        return str(exc) or type(exc).__name__
    if env.state.num_players != n:
        return f"it always makes a game of {env.state.num_players} players"
    if n == 1 and not isinstance(env.state, ta.SinglePlayerState):
        return "it is a game of several players (a game of one never ends)"
    return None


def seat_count(game: str, num_players: int | None) -> int:
    """The players `game` is played by: `num_players` when the game accepts it, else the game's
    own default (`default_num_players`) or the fewest it accepts (1 to 15), checked by
    resetting it: a game must accept the count and keep it, and only single-player games
    (TextArena's `SinglePlayerState`) are played by one."""
    env = make_game(game)
    candidates = [num_players] if num_players is not None else [getattr(env, "default_num_players", None)]
    candidates += [] if num_players is not None else list(range(1, MAX_PLAYERS + 1))
    reasons: dict[int, str] = {}
    with kept_random():
        for n in candidates:
            if n is None or n in reasons:
                continue
            try:
                reason = _refusal(make_game(game), n)
            except UsageError:
                raise
            except Exception as exc:  # not about the count: the game cannot be played here
                raise UsageError(f"TextArena game {game!r} cannot be loaded: {load_reason(exc)}") from None
            if reason is None:
                return n
            reasons[n] = reason
    if num_players is not None:
        raise UsageError(f"TextArena game {game!r} cannot be played by {num_players} players: {reasons[num_players]}")
    raise UsageError(f"TextArena game {game!r} accepts no count of 1 to {MAX_PLAYERS} players: {reasons[1]}")


def make_tasks(game: str, num_players: int, seat: int, num_tasks: int, seed: int) -> list[Task]:
    """Task i: the game reset with seed `mix_seed(seed, i)`, its question the seat's rules."""
    tasks = []
    with kept_random():
        for i in range(num_tasks):
            task_seed = mix_seed(seed, i)
            env = make_game(game)
            env.reset(num_players=num_players, seed=task_seed)
            rules = [m for _, m, kind in env.state.observations[seat] if kind.name == "PROMPT"]
            info = {"game": game, "seat": seat, "num_players": num_players}
            tasks.append(Task(id=f"game-{i}", question="\n\n".join(rules), info=info, seed=task_seed))
    return tasks
