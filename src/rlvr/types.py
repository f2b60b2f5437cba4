"""The data rlvr passes around: tasks, completions, turns, rollouts.

Messages are OpenAI-style chat dicts (`{"role": "user", "content": "..."}`, plus `tool_calls`
and `tool_call_id` for tools), so any OpenAI-compatible server and any chat template accept
them as they are. Everything here is JSON-serialisable and round-trips through `to_dict` /
`from_dict`.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from rlvr.errors import UsageError

Message = dict[str, Any]
Messages = list[Message]


@dataclass(frozen=True)
class Task:
    """One dataset row: what the model is asked, and what the environment needs to score it."""

    id: str
    """Stable identifier, unique within a dataset; results files key rollouts by it."""
    prompt: tuple[Message, ...] = ()
    """Chat messages that open the episode (a system prompt is added by the environment)."""
    question: str | None = None
    """Plain-text question, turned into one user message when `prompt` is empty."""
    answer: str | None = None
    """Reference answer, when the task has one."""
    info: Mapping[str, Any] = field(default_factory=dict)
    """Anything else the environment needs (difficulty, opponent strength, ...)."""
    seed: int = 0
    """Seed of this task; rollout seeds derive from it."""

    @classmethod
    def from_row(cls, row: Mapping[str, Any], index: int = 0, columns: Mapping[str, str] | None = None) -> Task:
        """Build a task from a mapping (a dict, a row of a Hugging Face dataset, a JSONL line).

        `columns` maps a task field to the row's name for it (`{"question": "problem",
        "answer": "solution"}`). `prompt` may be text (one user message) or chat messages;
        `info` a mapping or its JSON text (datasets often store it so); a missing `id` or
        `seed` is the row's index. A row with neither a prompt nor a question, or with fields
        of the wrong kind, is a `UsageError` that names the row and its columns.

        >>> Task.from_row({"problem": "2+2?", "solution": 4}, 7, {"question": "problem", "answer": "solution"})
        Task(id='7', prompt=(), question='2+2?', answer='4', info={}, seed=7)
        """
        names = dict(columns or {})

        def get(name: str) -> Any:
            return row.get(names.get(name, name))

        key = get("id")
        where = f"row {index}" + (f" (id {key!r})" if key is not None else "")
        prompt, question = get("prompt") or (), get("question")
        if isinstance(prompt, str):
            prompt = ({"role": "user", "content": prompt},)
        if not prompt and question is None:
            wanted = ", ".join(repr(names.get(f, f)) for f in ("prompt", "question"))
            filled = sorted(k for k, v in row.items() if v is not None)
            raise UsageError(
                f"{where} has no value in the columns {wanted} (its columns with a value: {filled}); name the "
                "one that holds the task with columns={'question': COLUMN} (or 'prompt' for chat messages)"
            )
        if not all(isinstance(m, Mapping) and isinstance(m.get("role"), str) for m in prompt):
            raise UsageError(
                f"{where}: prompt must be text or a list of {{role, content}} messages, got {prompt!r:.80}"
            )
        info = get("info")
        if isinstance(info, str):
            try:
                info = json.loads(info) if info.strip() else {}
            except json.JSONDecodeError as exc:
                raise UsageError(f"{where}: info is text but not JSON ({exc.msg}): {info!r:.80}") from None
        if info is not None and not isinstance(info, Mapping):
            raise UsageError(f"{where}: info must be a mapping (or its JSON text), got {type(info).__name__}")
        seed = get("seed")
        try:
            seed = index if seed is None else int(seed)
        except (TypeError, ValueError):
            raise UsageError(f"{where}: seed must be an integer, got {seed!r}") from None
        answer = get("answer")
        return cls(
            id=str(index if key is None else key),
            prompt=tuple(dict(m) for m in prompt),
            question=None if question is None else str(question),
            answer=None if answer is None else str(answer),
            info=dict(info or {}),
            seed=seed,
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "prompt": [dict(m) for m in self.prompt],
            "question": self.question,
            "answer": self.answer,
            "info": dict(self.info),
            "seed": self.seed,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Task:
        """The inverse of `to_dict` (no checks: a task round-trips as it was)."""
        return cls(
            id=str(d["id"]),
            prompt=tuple(dict(m) for m in d.get("prompt") or ()),
            question=d.get("question"),
            answer=d.get("answer"),
            info=dict(d.get("info") or {}),
            seed=int(d.get("seed", 0)),
        )


DEFAULT_MAX_TOKENS = 512
"""Per-turn token limit of an environment that names none, and of `rlvr eval`/`gen` with a local
model when neither the environment nor `-t` sets one: an untrained model may otherwise write
thousands of tokens a turn (minutes on a CPU)."""


@dataclass
class SamplingArgs:
    """How a model samples one reply."""

    max_tokens: int | None = None
    """Most tokens in one reply; None = the backend's limit."""
    temperature: float = 1.0
    """Sampling temperature; 0 = greedy."""
    top_p: float = 1.0
    """Nucleus sampling mass."""
    seed: int | None = None
    """Seed for this request; the engine sets it per rollout and turn."""
    stop: list[str] | None = None
    """Strings that end the reply (not included in it)."""
    logprobs: bool = False
    """Ask the backend for the sampled tokens' log-probabilities."""

    def __post_init__(self) -> None:
        self.check()

    def check(self) -> None:
        """Raise `UsageError` for a value no backend can sample with (NaN, an infinity, a
        negative temperature, top_p outside (0, 1], max_tokens below 1).

        >>> SamplingArgs(temperature=float("nan"))
        Traceback (most recent call last):
        ...
        rlvr.errors.UsageError: sampling temperature must be a finite number >= 0, got nan
        """
        from rlvr.errors import UsageError

        if not (math.isfinite(self.temperature) and self.temperature >= 0):
            raise UsageError(f"sampling temperature must be a finite number >= 0, got {self.temperature}")
        if not (math.isfinite(self.top_p) and 0 < self.top_p <= 1):
            raise UsageError(f"sampling top_p must be in (0, 1], got {self.top_p}")
        if self.max_tokens is not None and self.max_tokens < 1:
            raise UsageError(f"sampling max_tokens must be >= 1 or None, got {self.max_tokens}")

    def replace(self, **changes: Any) -> SamplingArgs:
        return dataclasses.replace(self, **changes)


@dataclass
class ToolCall:
    """One tool call made by the model. `arguments` is the raw JSON text it produced."""

    id: str
    name: str
    arguments: str

    def to_message_part(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "type": "function",
            "function": {"name": self.name, "arguments": self.arguments},
        }


@dataclass
class Usage:
    prompt_tokens: int = 0
    completion_tokens: int = 0

    def add(self, other: Usage) -> None:
        self.prompt_tokens += other.prompt_tokens
        self.completion_tokens += other.completion_tokens


@dataclass
class Completion:
    """One model reply, as the backend produced it."""

    text: str
    token_ids: list[int] | None = None
    """Sampled token ids, when the backend gives them (local models, vLLM)."""
    logprobs: list[float] | None = None
    """Log-probability of each sampled token, aligned with `token_ids`."""
    prompt_token_ids: list[int] | None = None
    """Token ids of the prompt as the backend rendered it (chat template applied)."""
    tool_calls: list[ToolCall] = field(default_factory=list)
    finish_reason: str = "stop"
    """`stop`, `length` (hit max_tokens), `tool_calls`, or `given` (the text was given, not
    sampled: `rlvr.train.given`)."""
    usage: Usage = field(default_factory=Usage)

    def message(self) -> Message:
        """The assistant message this completion adds to the conversation."""
        msg: Message = {"role": "assistant", "content": self.text}
        if self.tool_calls:
            msg["tool_calls"] = [c.to_message_part() for c in self.tool_calls]
        return msg

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Completion:
        d = dict(d)
        d["tool_calls"] = [ToolCall(**c) for c in d.get("tool_calls") or []]
        d["usage"] = Usage(**(d.get("usage") or {}))
        return cls(**d)


@dataclass
class Turn:
    """One model turn: what the model produced, then what the environment answered."""

    completion: Completion
    env_messages: Messages = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"completion": self.completion.to_dict(), "env_messages": self.env_messages}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Turn:
        return cls(Completion.from_dict(d["completion"]), list(d.get("env_messages") or []))


@dataclass
class Rollout:
    """The full record of one episode. JSON-serialisable; one line of a results file."""

    task_id: str
    rollout_index: int
    """Index of this rollout within its group (0 .. rollouts_per_task - 1)."""
    seed: int
    prompt: Messages
    turns: list[Turn] = field(default_factory=list)
    answer: str | None = None
    info: dict[str, Any] = field(default_factory=dict)
    rewards: dict[str, float] = field(default_factory=dict)
    """Score of each reward function (weight 0 ones too), before weighting."""
    reward: float = 0.0
    """Weighted total."""
    metrics: dict[str, float] = field(default_factory=dict)
    stop_reason: str = ""
    """Name of the stop condition that ended the episode (`game_over`, `max_turns`, `error`...)."""
    truncated: bool = False
    """True when the episode was cut (max_turns, token budget, timeout, error), not finished."""
    error: str | None = None
    """`ExceptionType: message` plus the last frames of the traceback, for error rollouts."""
    usage: Usage = field(default_factory=Usage)
    timing: dict[str, float] = field(default_factory=dict)
    """Seconds spent: `generate`, `env`, `score`, `total`."""

    @property
    def key(self) -> tuple[str, int]:
        return (self.task_id, self.rollout_index)

    @property
    def completion(self) -> Messages:
        """Every message after the prompt: assistant turns and environment replies."""
        out: Messages = []
        for turn in self.turns:
            out.append(turn.completion.message())
            out.extend(turn.env_messages)
        return out

    @property
    def messages(self) -> Messages:
        return list(self.prompt) + self.completion

    @property
    def error_kind(self) -> str | None:
        return None if self.error is None else self.error.split(":", 1)[0]

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["turns"] = [t.to_dict() for t in self.turns]
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Rollout:
        d = dict(d)
        d["turns"] = [Turn.from_dict(t) for t in d.get("turns") or []]
        d["usage"] = Usage(**(d.get("usage") or {}))
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = set(d) - names
        if unknown:
            raise ValueError(f"unknown rollout fields {sorted(unknown)}")
        return cls(**d)


@dataclass(kw_only=True)
class State:
    """Per-rollout state of an environment. Subclass it (a dataclass) to add typed fields.

    `setup_state` builds it from the task; the rollout loop keeps the bookkeeping fields below
    up to date. An environment reads them and writes only its own fields.
    """

    task: Task
    seed: int = 0
    """Seed of this rollout (derived from the task seed and the rollout index)."""
    prompt: Messages = field(default_factory=list)
    """The opening messages (system prompt included), as sent to the model."""
    messages: Messages = field(default_factory=list)
    """The whole conversation so far: prompt, model turns, environment replies."""
    turns: list[Turn] = field(default_factory=list)
    completion_tokens: int = 0
    """Completion tokens sampled so far, over all turns."""
    awaiting_model: bool = True
    """True when the environment has answered the last model turn (or none was taken yet)."""
    started_at: float = 0.0
    """`time.monotonic()` when the rollout started."""
    stop_reason: str | None = None
    truncated: bool = False
    error: str | None = None
    usage: Usage = field(default_factory=Usage)
    """Tokens of the model's turns, plus any model calls the environment makes for it (sub-calls)."""
    timing: dict[str, float] = field(default_factory=dict)
    """Seconds spent so far: `generate`, `env`."""
    info: dict[str, Any] = field(default_factory=dict)
    """What the environment adds to the rollout's `info` (JSON values; e.g. sub-call transcripts)."""

    @property
    def turn(self) -> int:
        """Number of model turns taken so far."""
        return len(self.turns)

    @property
    def completion(self) -> Messages:
        """Every message after the prompt."""
        return self.messages[len(self.prompt) :]
