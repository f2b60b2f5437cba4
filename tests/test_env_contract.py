"""The environment contract around the loop: where things live, and the deprecated names."""

from __future__ import annotations

import asyncio
import importlib
import inspect
import typing
from importlib.metadata import entry_points
from typing import Any

import pytest

import rlvr
from rlvr import MultiTurnEnv, Policy, Rubric, SingleTurnEnv, State
from rlvr.check import check_env
from rlvr.envs.multiturn import EnvOptions
from rlvr.errors import EnvError, UsageError
from rlvr.registry import GROUP
from rlvr.types import Messages, SamplingArgs, Task


def test_check_env_is_exported_and_the_old_path_warns() -> None:
    assert rlvr.check_env is check_env
    with pytest.warns(DeprecationWarning, match="from rlvr import check_env"):
        from rlvr.envs.check import check_env as old
    assert old is check_env


# ---- rollout is final; the lifecycle hooks run around it -----------------------------------


def turns_taken(state: State) -> float:
    return float(state.turn)


class Lifecycle(MultiTurnEnv[State]):
    """Records each hook; its env reply succeeds, raises or hangs, as told."""

    def __init__(self, reply: str = "ok", fail_in: str = "", **kw: Any) -> None:
        super().__init__([{"question": "q"}], rubric=Rubric([turns_taken]), max_turns=2, **kw)
        self.reply, self.fail_in = reply, fail_in
        self.events: list[str] = []

    async def start(self) -> None:
        self.events.append("start")
        if self.fail_in == "start":
            raise EnvError("server 'x' failed to start")

    def setup_state(self, task: Task) -> State:
        self.events.append("setup")
        if self.fail_in == "setup":
            raise ValueError("bad task")
        return State(task=task)

    async def env_response(self, messages: Messages, state: State) -> Messages:
        if self.reply == "raise":
            raise RuntimeError("boom")
        if self.reply == "hang":
            await asyncio.sleep(30)
        return [{"role": "user", "content": "again"}]

    async def close_state(self, state: State) -> None:
        self.events.append(f"close after {state.stop_reason}")
        if self.fail_in == "close":
            raise OSError("cannot close")


def _rollout(env: MultiTurnEnv[Any]) -> State:
    return asyncio.run(env.rollout(SAY, env.tasks()[0], SamplingArgs(), seed=7))


SAY = Policy(lambda messages, rng: "ok", name="say")


@pytest.mark.parametrize(
    ("reply", "timeout_s", "stop_reason", "error"),
    [
        ("ok", None, "max_turns_reached", None),
        ("raise", None, "error", "RuntimeError: boom"),
        ("hang", 0.05, "timeout", None),
    ],
)
def test_close_state_runs_however_the_episode_ends(
    reply: str, timeout_s: float | None, stop_reason: str, error: str | None
) -> None:
    env = Lifecycle(reply, timeout_s=timeout_s)
    state = _rollout(env)
    assert env.events == ["start", "setup", f"close after {stop_reason}"]
    assert state.stop_reason == stop_reason and state.truncated and state.seed == 7
    assert (state.error or "").split(" [at ")[0] == (error or "")


def test_a_failed_start_or_setup_is_an_error_record_with_nothing_to_close() -> None:
    env = Lifecycle(fail_in="start")
    state = _rollout(env)
    assert env.events == ["start"] and state.stop_reason == "error" and state.truncated and state.seed == 7
    assert state.error is not None and state.error.startswith("EnvError: server 'x' failed to start")
    env = Lifecycle(fail_in="setup")
    state = _rollout(env)
    assert (
        env.events == ["start", "setup"] and state.error is not None and state.error.startswith("ValueError: bad task")
    )
    assert state.prompt == [] and state.turns == []


def test_a_failed_close_turns_the_rollout_into_an_error_record() -> None:
    env = Lifecycle(fail_in="close")
    state = _rollout(env)
    assert env.events[-1] == "close after max_turns_reached"
    assert state.stop_reason == "error" and state.truncated
    assert state.error is not None and state.error.startswith("OSError: cannot close")
    env = Lifecycle("raise", fail_in="close")  # the episode's own error is the one kept
    assert (_rollout(env).error or "").startswith("RuntimeError: boom")


def test_rollout_is_final() -> None:
    assert getattr(MultiTurnEnv.rollout, "__final__", False)
    with pytest.raises(EnvError, match="overrides rollout, which is final.*start / close_state"):

        class Sneaky(SingleTurnEnv[State]):
            async def rollout(self, client: Any, task: Task, sampling: SamplingArgs, seed: int) -> State:
                raise NotImplementedError


def _subclasses(cls: type) -> list[type]:
    return [cls, *(s for sub in cls.__subclasses__() for s in _subclasses(sub))]


def test_no_library_or_bundled_environment_overrides_rollout() -> None:
    for module in ("rlvr.envs.gym", "rlvr.envs.mcp", "rlvr.envs.tools"):
        importlib.import_module(module)
    packages = {"rlvr"}
    for ep in entry_points(group=GROUP):
        ep.load()
        packages.add(ep.module.split(".")[0])
    ours = [c for c in _subclasses(MultiTurnEnv) if c.__module__.split(".")[0] in packages]
    assert {"GymEnv", "MCPEnv", "ToolEnv", "TicTacToeEnv", "IceMazeEnv", "WikiSearchMCPEnv"} <= {
        c.__qualname__ for c in ours
    }
    assert [c.__qualname__ for c in ours if "rollout" in vars(c) and c is not MultiTurnEnv] == []


def test_an_env_that_still_defines_sampler_is_told_what_replaced_it() -> None:
    with pytest.warns(DeprecationWarning, match="sampler is no longer called: declare difficulty"):

        class OldStyle(SingleTurnEnv[State]):
            def sampler(self, seed: int = 0) -> None:
                return None


def test_rlvr_play_checks_a_declared_protocol() -> None:
    from rlvr.commands.play import PlayableEnv
    from rlvr.registry import load_environment

    assert isinstance(load_environment("tictactoe", num_tasks=8), PlayableEnv)
    assert not isinstance(SingleTurnEnv([{"question": "q"}]), PlayableEnv)


def test_env_options_are_exactly_the_keyword_options_of_the_base_class() -> None:
    """Subclasses pass `**options: Unpack[EnvOptions]` on to MultiTurnEnv: the two must agree."""
    params = inspect.signature(MultiTurnEnv.__init__).parameters
    hints = typing.get_type_hints(MultiTurnEnv.__init__)
    keyword = {name: hints[name] for name, p in params.items() if p.kind is p.KEYWORD_ONLY}
    assert keyword == typing.get_type_hints(EnvOptions)


# ---- env arguments say task and bucket; the old names still work, with a warning ------------

RENAMED = [  # environment, arguments under their old names, the same under the new ones
    (
        "tictactoe",
        {"num_examples": 16, "eval_examples": 4, "num_groups": 4},
        {"num_tasks": 16, "eval_tasks": 4, "num_buckets": 4},
    ),
    ("ice_maze", {"num_examples": 3, "eval_examples": 2}, {"num_tasks": 3, "eval_tasks": 2}),
    ("reverse_text", {"num_examples": 3, "num_eval_examples": 2}, {"num_tasks": 3, "eval_tasks": 2}),
    ("double_check", {"num_examples": 3, "num_eval_examples": 2}, {"num_tasks": 3, "eval_tasks": 2}),
    ("python_math", {"num_examples": 3, "num_eval_examples": 2}, {"num_tasks": 3, "eval_tasks": 2}),
    (
        "wiki_search",
        {"size": "small", "num_examples": 3, "num_eval_examples": 2},
        {"size": "small", "num_tasks": 3, "eval_tasks": 2},
    ),
    ("gym", {"env_id": "FrozenLake-v1", "num_examples": 2}, {"env_id": "FrozenLake-v1", "num_tasks": 2}),
]


@pytest.mark.parametrize(("name", "old", "new"), RENAMED, ids=[r[0] for r in RENAMED])
def test_old_argument_names_still_work_and_warn(
    name: str, old: dict[str, Any], new: dict[str, Any], tmp_path: Any
) -> None:
    from rlvr.registry import load_environment

    extra = {"cache_dir": str(tmp_path)} if name == "wiki_search" else {}
    with pytest.warns(DeprecationWarning) as caught:
        before = load_environment(name, **old, **extra)
    renames = [(o, n) for o, n in zip(old, new) if o != n]
    assert sorted(str(w.message) for w in caught) == sorted(f"{o} is deprecated; use {n}" for o, n in renames)
    after = load_environment(name, **new, **extra)
    for split in ("train", "eval"):
        assert [t.to_dict() for t in before.tasks(split)] == [t.to_dict() for t in after.tasks(split)]
    with pytest.raises(UsageError, match=f"got both {renames[0][1]} and its deprecated name {renames[0][0]}"):
        load_environment(name, **new, **{renames[0][0]: old[renames[0][0]]}, **extra)
    asyncio.run(before.aclose())
    asyncio.run(after.aclose())


# ---- every environment carries a per-turn token limit --------------------------------------

SMALL_ARGS: dict[str, dict[str, Any]] = {
    "reverse_text": {"num_tasks": 2, "eval_tasks": 2},
    "double_check": {"num_tasks": 2, "eval_tasks": 2},
    "python_math": {"num_tasks": 2, "eval_tasks": 2},
    "ice_maze": {"num_tasks": 2, "eval_tasks": 2},
    "tictactoe": {},
    "gym": {"env_id": "FrozenLake-v1", "num_tasks": 2},
    "wiki_search": {"size": "small", "num_tasks": 2, "eval_tasks": 2},
    "rlm": {"size": "small", "num_tasks": 2, "eval_tasks": 2},
}


@pytest.mark.parametrize("name", sorted(SMALL_ARGS))
def test_every_bundled_env_carries_a_per_turn_token_limit(name: str, tmp_path: Any) -> None:
    from rlvr.registry import list_environments, load_environment

    if name not in list_environments():
        pytest.skip(f"{name} is not installed")
    extra = {"cache_dir": str(tmp_path)} if name == "wiki_search" else {}
    env = load_environment(name, **SMALL_ARGS[name], **extra)
    assert env.sampling.max_tokens is not None and 16 <= env.sampling.max_tokens <= 4096
    asyncio.run(env.aclose())


def test_an_env_without_sampling_gets_the_default_limit_and_one_with_a_limit_keeps_it() -> None:
    from rlvr.types import DEFAULT_MAX_TOKENS

    assert SingleTurnEnv([{"question": "q"}]).sampling.max_tokens == DEFAULT_MAX_TOKENS == 512
    assert SingleTurnEnv([{"question": "q"}], sampling=SamplingArgs(max_tokens=64)).sampling.max_tokens == 64


# ---- what an environment may reach from inside a rollout -----------------------------------


def test_an_env_reaches_the_client_playing_its_rollout_and_adds_to_its_info() -> None:
    from rlvr.engine import run_rollouts
    from rlvr.envs.multiturn import rollout_client

    class Asks(MultiTurnEnv[State]):
        async def env_response(self, messages: Messages, state: State) -> Messages:
            reply = await rollout_client().chat([{"role": "user", "content": "again?"}], SamplingArgs())
            state.info["asked"] = reply.text
            return [{"role": "user", "content": reply.text}]

    env = Asks([{"question": "q", "info": {"kept": 1}}], max_turns=2, rubric=Rubric([turns_taken]))
    [rollout] = asyncio.run(run_rollouts(env, SAY, env.tasks()))
    assert rollout.info == {"kept": 1, "asked": "ok"} and rollout.turns[0].env_messages[0]["content"] == "ok"
    with pytest.raises(EnvError, match="only available inside"):
        rollout_client()
