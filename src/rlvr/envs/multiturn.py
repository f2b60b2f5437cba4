"""Environments: pose tasks, answer the model, decide when an episode ends.

`MultiTurnEnv` is the base of every environment. Its contract fits on one screen:

    class MyEnv(MultiTurnEnv[MyState]):
        def setup_state(self, task: Task) -> MyState: ...
        async def env_response(self, messages: Messages, state: MyState) -> Messages: ...

        @stop
        def solved(self, state: MyState) -> bool: ...   # terminated

Stop conditions are checked after every model turn and after every environment reply, in
order of priority (highest first); the first one true ends the episode. An env's own stops mean
*terminated* unless declared `@stop(truncated=True)`. Built-in truncations: `max_turns` and
`token_budget` (true only once the environment has answered the last turn, so a winning final
move still counts), `timeout` (wall clock), `prompt_too_long` and `error` (any exception).
"""

from __future__ import annotations

import asyncio
import contextvars
import math
import numbers
import reprlib
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Generic, TypedDict, TypeVar, final, overload

from rlvr.clients.base import ChatClient
from rlvr.envs.task_source import TaskSource, task_splits
from rlvr.errors import EnvError, KeyRefusedError, PromptTooLongError, UsageError, error_summary
from rlvr.parsers import Parser
from rlvr.rubric import Rubric
from rlvr.seeding import mix_seed
from rlvr.types import DEFAULT_MAX_TOKENS, Messages, SamplingArgs, State, Task, Turn

S = TypeVar("S", bound=State)


_CLIENT: contextvars.ContextVar[ChatClient] = contextvars.ContextVar("rlvr_rollout_client")


def rollout_client() -> ChatClient:
    """The client playing the rollout in progress (for an environment that asks the same model
    something itself, e.g. a sub-call); `EnvError` outside a rollout."""
    try:
        return _CLIENT.get()
    except LookupError:
        raise EnvError("rollout_client() is only available inside MultiTurnEnv.rollout") from None


StopF = TypeVar("StopF", bound=Callable[..., bool])


@overload
def stop(fn: StopF, *, priority: int = 0, truncated: bool = False) -> StopF: ...
@overload
def stop(fn: None = None, *, priority: int = 0, truncated: bool = False) -> Callable[[StopF], StopF]: ...
def stop(fn: Any = None, *, priority: int = 0, truncated: bool = False) -> Any:
    """Mark a method `(self, state) -> bool` as a stop condition.

    `priority` orders the checks (highest first); `truncated=True` marks an episode that was
    cut short rather than finished. Typed, so a checked env's stop methods stay typed under
    either spelling (`@stop` or `@stop(truncated=True)`).
    """

    def mark(f: StopF) -> StopF:
        f.__rlvr_stop__ = (priority, truncated)  # type: ignore[attr-defined]
        return f

    return mark(fn) if fn is not None else mark


class EnvOptions(TypedDict, total=False):
    """The keyword options of `MultiTurnEnv.__init__`, for a subclass that passes them all on
    (`**options: Unpack[EnvOptions]`): typed, so a misspelt or ill-typed option is an error."""

    eval_dataset: TaskSource | None
    columns: Mapping[str, str] | None
    system_prompt: str | None
    parser: Parser | None
    rubric: Rubric | None
    sampling: SamplingArgs | None
    max_turns: int | None
    max_completion_tokens: int | None
    timeout_s: float | None


class MultiTurnEnv(Generic[S]):
    """Base environment: a dataset of tasks, a rubric, and the rollout loop.

    The contract: override `setup_state` and `env_response`, add `@stop` methods; offer tools
    per turn with `tool_schemas`. `rollout` is final: it is the one loop, and the one place
    that turns a failure into an error record.

    Tasks: `dataset` (and `eval_dataset`) may be rows (a list of dicts, a `datasets.Dataset`),
    splits (a `DatasetDict`: train, and test as the eval tasks) or a JSONL / Parquet file;
    `columns` renames columns to task fields (`rlvr.envs.task_source`).

    Optional, each a no-op by default: the lifecycle (`start`, `begin`, `close_state`,
    `aclose`), what the CLI reads (`policies`, `default_model`, `summarize`; `play_human` is
    `rlvr.commands.play.PlayableEnv`) and a mixture's routing (`member`, `member_play`). What
    the trainer reads beyond this contract are opt-in protocols (`rlvr.train.protocols`:
    `Restartable`, `Explorable`, `Probed`, `TurnScored`; `rlvr.sampler.Stratified`).
    """

    name: str = "env"

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "rollout" in vars(cls):
            raise EnvError(
                f"{cls.__name__} overrides rollout, which is final: acquire and release what an "
                "episode needs in the lifecycle hooks start / close_state instead"
            )
        if "sampler" in vars(cls):
            warnings.warn(
                f"{cls.__name__}.sampler is no longer called: declare difficulty(task), "
                "difficulty_range and num_buckets instead (rlvr.sampler.Stratified), and the "
                "trainer stratifies by them",
                DeprecationWarning,
                stacklevel=2,
            )

    def __init__(
        self,
        dataset: TaskSource,
        *,
        eval_dataset: TaskSource | None = None,
        columns: Mapping[str, str] | None = None,
        system_prompt: str | None = None,
        parser: Parser | None = None,
        rubric: Rubric | None = None,
        sampling: SamplingArgs | None = None,
        max_turns: int | None = None,
        max_completion_tokens: int | None = None,
        timeout_s: float | None = None,
    ) -> None:
        for label, value in (("max_turns", max_turns), ("max_completion_tokens", max_completion_tokens)):
            if value is not None and value < 1:
                raise UsageError(f"{label} must be >= 1 or None, got {value}")
        if timeout_s is not None and timeout_s <= 0:
            raise UsageError(f"timeout_s must be > 0 or None, got {timeout_s}")
        self.dataset, self.eval_dataset = task_splits(dataset, eval_dataset, columns)
        self.system_prompt = system_prompt
        self.parser = parser
        self.rubric = rubric if rubric is not None else Rubric(parser=parser)
        if self.rubric.parser is None:
            self.rubric.parser = parser
        self.sampling = sampling or SamplingArgs(max_tokens=DEFAULT_MAX_TOKENS)
        """How the model samples a turn; without `sampling`, at most `DEFAULT_MAX_TOKENS` tokens a turn."""
        self.max_turns = max_turns
        self.max_completion_tokens = max_completion_tokens
        self.timeout_s = timeout_s
        self.env_args: dict[str, Any] = {}
        """The arguments `load_environment` was called with (set by the registry)."""
        self._stops = self._collect_stops()

    # ---- the contract: what subclasses override -----------------------------------------

    def setup_state(self, task: Task) -> S:
        """Build the state of a new episode. Override to return your State subclass."""
        return State(task=task)  # type: ignore[return-value]

    async def env_response(self, messages: Messages, state: S) -> Messages:
        """The environment's reply to the model's last turn (may be empty)."""
        return []

    def tool_schemas(self, state: S) -> list[dict[str, Any]] | None:
        """OpenAI tool schemas offered to the model this turn (None: no tools)."""
        return None

    # ---- optional: used by the CLI ------------------------------------------------------

    def policies(self) -> dict[str, Callable[[], ChatClient]]:
        """Reference players, selectable as `-m policy:NAME`."""
        return {}

    def default_model(self) -> str | None:
        """The model `rlvr eval ENV` uses when no `-m` is given (None: one is required)."""
        return None

    def summarize(self, rollouts: Sequence[Any]) -> dict[str, float] | None:
        """Extra numbers for the eval summary (e.g. win/draw/loss %), or None."""
        return None

    # ---- optional: a mixture of environments --------------------------------------------

    def member(self, task: Task) -> tuple[MultiTurnEnv[Any], Task]:
        """The environment that plays and scores `task`, and the task as that env knows it:
        this env itself, except in a mixture (`rlvr.mixture.EnvGroup`), which names the member
        the task came from. `rollout` hands such a task to the member's own `rollout`."""
        return self, task

    def member_play(
        self, env: MultiTurnEnv[Any], client: ChatClient, sampling: SamplingArgs
    ) -> tuple[ChatClient, SamplingArgs]:
        """The client and sampling a member (another env named by `member`) plays with."""
        return client, sampling

    # ---- optional lifecycle -------------------------------------------------------------

    async def start(self) -> None:
        """Acquire what the env needs before its rollouts (servers, connections). Awaited by
        every rollout, so it must return at once when already started; call it yourself to
        fail fast with a clear error."""

    async def begin(self, state: S, client: ChatClient, sampling: SamplingArgs) -> None:
        """Awaited once `state.prompt` and `state.messages` are set, before the first model turn:
        an env whose opponent is the model itself keeps `client` here, and one whose opponent
        moves first plays those moves here (extending `state.prompt` and `state.messages`)."""

    async def close_state(self, state: S) -> None:
        """Release what `setup_state` opened for this episode; awaited however it ended."""

    async def aclose(self) -> None:
        """Release what `start` (or the first rollout) acquired. Called at the end of a run."""

    # ---- the episode (final) ------------------------------------------------------------

    def tasks(self, split: str = "eval") -> Sequence[Task]:
        """Tasks of a split: `train`, or `eval` (falls back to train when there is none)."""
        if split == "train":
            return self.dataset
        if split == "eval":
            return self.eval_dataset if self.eval_dataset is not None else self.dataset
        raise UsageError(f"split must be 'train' or 'eval', got {split!r}")

    def initial_prompt(self, task: Task) -> Messages:
        """System prompt + the task's prompt (or its question as one user message)."""
        messages: Messages = []
        if self.system_prompt and not (task.prompt and task.prompt[0].get("role") == "system"):
            messages.append({"role": "system", "content": self.system_prompt})
        if task.prompt:
            messages.extend(dict(m) for m in task.prompt)
        elif task.question is not None:
            messages.append({"role": "user", "content": task.question})
        else:
            raise UsageError(f"task {task.id!r} has neither a prompt nor a question")
        return messages

    @final
    async def rollout(self, client: ChatClient, task: Task, sampling: SamplingArgs, seed: int) -> S:
        """Play one episode. Never raises for a failure inside it: the state records it. The
        one exception is `KeyRefusedError`, a client that can answer no request any more.

        `start()`, then `setup_state(task)`, then turns until a stop condition holds; then
        `close_state(state)`, whatever happened after the state was set up. A task that
        `member` gives to another environment is that environment's episode, played by its own
        `rollout` (the state keeps the task as the member knows it)."""
        env, own = self.member(task)
        if env is not self:
            client, sampling = self.member_play(env, client, sampling)
            return await env.rollout(client, own, sampling, seed)
        try:
            await self.start()
            state = self.setup_state(task)
        except Exception as exc:  # an env that cannot start or set up a task: one error record
            failed = State(task=task, seed=seed, started_at=time.monotonic())
            self._failed(failed, exc)
            return failed  # type: ignore[return-value]
        token = _CLIENT.set(client)
        try:
            await self._play(client, state, sampling, seed)
        finally:
            _CLIENT.reset(token)
            try:
                await self.close_state(state)
            except Exception as exc:  # a failed release spoils the record, not the run
                if state.error is None:
                    state.stop_reason = None
                    self._failed(state, exc)
        return state

    async def _play(self, client: ChatClient, state: S, sampling: SamplingArgs, seed: int) -> None:
        state.seed, state.started_at = seed, time.monotonic()
        deadline = asyncio.timeout(self.timeout_s)
        try:
            state.prompt = self.initial_prompt(state.task)
            state.messages = list(state.prompt)
            async with deadline:
                await self.begin(state, client, sampling)
                await self._loop(client, state, sampling)
        except TimeoutError as exc:
            if deadline.expired():
                self._end(state, "timeout", truncated=True)
            else:  # a TimeoutError from inside (a client, a tool) is an error, not our deadline
                self._failed(state, exc)
        except PromptTooLongError as exc:
            self._end(state, "prompt_too_long", truncated=True)
            state.error = None if state.turn else error_summary(exc)
        except KeyRefusedError:  # no rollout can succeed: the run stops (and says why)
            raise
        except Exception as exc:  # one broken rollout must never sink a run
            self._failed(state, exc)

    def _failed(self, state: State, exc: BaseException) -> None:
        """Record `exc` as the episode's error (the one place that builds an error record)."""
        self._end(state, "error", truncated=True)
        state.error = error_summary(exc)

    async def _loop(self, client: ChatClient, state: S, sampling: SamplingArgs) -> None:
        while not self.check_stops(state):
            turn_sampling = sampling.replace(seed=mix_seed(state.seed, state.turn))
            if self.max_completion_tokens is not None:
                left = self.max_completion_tokens - state.completion_tokens
                cap = left if sampling.max_tokens is None else min(left, sampling.max_tokens)
                turn_sampling = turn_sampling.replace(max_tokens=max(cap, 1))
            t0 = time.monotonic()
            completion = await client.chat(list(state.messages), turn_sampling, self.tool_schemas(state))
            t1 = time.monotonic()
            state.timing["generate"] = state.timing.get("generate", 0.0) + t1 - t0
            state.turns.append(Turn(completion))
            state.messages.append(completion.message())
            state.usage.add(completion.usage)
            state.completion_tokens += completion.usage.completion_tokens or len(completion.token_ids or ())
            state.awaiting_model = False
            if self.check_stops(state):
                return
            reply = await self.env_response(list(state.messages), state)
            state.timing["env"] = state.timing.get("env", 0.0) + time.monotonic() - t1
            state.turns[-1].env_messages = list(reply)
            state.messages.extend(reply)
            state.awaiting_model = True

    def check_stops(self, state: S) -> bool:
        """Run the stop conditions in priority order; record the first that holds."""
        if state.stop_reason is not None:
            return True
        for name, (_, truncated) in self._stops:
            if getattr(self, name)(state):
                self._end(state, name, truncated=truncated)
                return True
        return False

    @staticmethod
    def _end(state: State, reason: str, *, truncated: bool) -> None:
        if state.stop_reason is None:
            state.stop_reason, state.truncated = reason, truncated

    # ---- built-in stop conditions -------------------------------------------------------

    @stop(priority=-100, truncated=True)
    def max_turns_reached(self, state: S) -> bool:
        return self.max_turns is not None and state.awaiting_model and state.turn >= self.max_turns

    @stop(priority=-100, truncated=True)
    def token_budget(self, state: S) -> bool:
        budget = self.max_completion_tokens
        return budget is not None and state.awaiting_model and state.completion_tokens >= budget

    @classmethod
    def _collect_stops(cls) -> list[tuple[str, tuple[int, bool]]]:
        found: dict[str, tuple[int, bool]] = {}
        for klass in reversed(cls.__mro__):
            for name, member in vars(klass).items():
                mark = getattr(member, "__rlvr_stop__", None)
                if mark is not None:
                    found[name] = mark
                elif name in found:  # overridden without @stop: no longer a stop condition
                    del found[name]
        return sorted(found.items(), key=lambda item: -item[1][0])

    def stop_conditions(self) -> list[str]:
        """Names of the stop conditions, in the order they are checked."""
        return [name for name, _ in self._stops]


class SingleTurnEnv(MultiTurnEnv[S]):
    """One model reply, then score. Terminated by `answered`."""

    @stop(priority=100)
    def answered(self, state: S) -> bool:
        return state.turn >= 1


def checked_turn_rewards(scores: object, turns: int, where: str) -> list[float] | None:
    """What `turn_rewards` gave (a list, tuple or 1-D array), as a list of `turns` finite
    floats, or None; anything else is a bug of the env, a `UsageError` that says so (`where`:
    which env and rollout)."""
    if scores is None:
        return None
    tolist = getattr(scores, "tolist", None)  # a numpy array or torch tensor
    values = tolist() if callable(tolist) else scores
    if not isinstance(values, (list, tuple)) or len(values) != turns:
        got = f"{len(values)} scores" if isinstance(values, (list, tuple)) else reprlib.repr(scores)
        raise UsageError(f"{where}: turn_rewards must give one number per model turn ({turns}), got {got}")
    out = []
    for x in values:
        try:  # float() of an int past 1e308 raises OverflowError: not a finite number either
            value = float(x) if isinstance(x, numbers.Real) and not isinstance(x, bool) else math.nan
        except OverflowError:
            value = math.nan
        if not math.isfinite(value):
            raise UsageError(f"{where}: turn_rewards gave {reprlib.repr(x)}; each score must be a finite number")
        out.append(value)
    return out
