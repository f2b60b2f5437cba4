"""reasoning-gym as rlvr environments (needs the `reasoninggym` extra).

reasoning-gym (https://github.com/open-thought/reasoning-gym) generates ~100 procedural
reasoning datasets (arithmetic, logic, puzzles, games, ARC, ...) and scores an answer with each
dataset's own `score_answer`. The bundled `reasoning_gym` environment turns any of them into a
single-turn rlvr environment: ``rlvr eval reasoning_gym -a '{"dataset": "leg_counting",
"size": 50, "seed": 1, "max_animals": 5}'``; arguments besides this module's own go to the
dataset's config.

- The model answers inside ``<answer>...</answer>`` (an optional ``<think>`` block first);
  the reward is the dataset's `score_answer` of that answer (1 for a right one; some datasets
  give partial credit), 0 without a tagged answer.
- Seeds pass through: the training split is the dataset with ``seed`` and ``size``, the eval
  split the same dataset with ``seed + size`` (its generators seed item i with ``seed + i``,
  so the two do not overlap). The few generators that also draw from the module-level
  `random` get it seeded from the dataset, seed and item index while they run, then restored,
  so the same arguments always give the same tasks, in whatever order they are generated.
- Items are generated lazily: task `i` (and the item it scores against) the first time it is
  asked for, so ``-n 5`` generates five items, not ``size + eval_size``.
- Each task carries its dataset, split, index and metadata in ``info`` (the metadata as plain
  JSON, for the record); scoring uses the item as the dataset made it.

Reference players (`-m policy:NAME`): `oracle` answers with the dataset's own answer (not
offered for the few datasets without one); `guess` answers with another task's answer. Their
scores on three datasets, and the arguments, are in docs/environments.md.
"""

from __future__ import annotations

import contextlib
import dataclasses
import difflib
import functools
import json
import random
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from rlvr.clients.base import ChatClient
from rlvr.clients.policy import Policy
from rlvr.envs.multiturn import SingleTurnEnv
from rlvr.envs.task_source import LazyTasks
from rlvr.errors import UsageError, import_extra
from rlvr.parsers import XMLParser
from rlvr.rubric import Rubric
from rlvr.types import Messages, SamplingArgs, State, Task

__all__ = ["Items", "ReasoningGymEnv", "create_dataset", "load_environment", "reasoning_gym_module"]

SYSTEM_PROMPT = (
    "Solve the problem the user sends. You may think inside <think>...</think> first; then give "
    "only the final answer inside <answer>...</answer>, with no explanation inside the tags. "
    "When the problem shows the format its answer takes, follow that format exactly."
)


def reasoning_gym_module() -> Any:
    """Import reasoning_gym, or say which extra to install."""
    return import_extra("reasoning_gym", "reasoninggym", "reasoning-gym environments", "reasoning-gym")


def create_dataset(name: str, size: int, seed: int, config: Mapping[str, Any]) -> Any:
    """reasoning-gym's dataset `name` with `size` items from `seed`, its config checked first so
    that a wrong name or key is one line that names the fix."""
    rg = reasoning_gym_module()
    datasets: dict[str, Any] = rg.factory.DATASETS
    if name not in datasets:
        close = difflib.get_close_matches(name, list(datasets), n=1)
        fix = f"did you mean {close[0]!r}?" if close else f"it has {len(datasets)}: {', '.join(sorted(datasets))}"
        raise UsageError(f"reasoning-gym has no dataset {name!r}; {fix}")
    if name == "composite":
        raise UsageError(
            "reasoning-gym's 'composite' dataset is not bridged: mix reasoning_gym environments of one "
            'dataset each with EnvGroup({"legs": env_a, "words": env_b}) (rlvr.mixture) instead'
        )
    accepted = [f.name for f in dataclasses.fields(datasets[name][1]) if f.name not in ("seed", "size")]
    unknown = [key for key in config if key not in accepted]
    if unknown:
        close = difflib.get_close_matches(unknown[0], accepted, n=1)
        hint = f"did you mean {close[0]!r}? " if close else ""
        raise UsageError(
            f"reasoning-gym dataset {name!r} takes no argument {unknown[0]!r}; {hint}it accepts: {', '.join(accepted)}"
        )
    try:
        return rg.create_dataset(name, size=size, seed=seed, **config)
    except (TypeError, ValueError, AssertionError) as exc:
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise UsageError(f"reasoning-gym dataset {name!r} rejected its config {dict(config)}: {reason}") from None


@contextlib.contextmanager
def _global_random_seeded(seed: str) -> Iterator[None]:
    """Seed the module-level `random` for a block, then put its state back: a few generators
    (list_functions) draw from it besides their own seeded `Random`."""
    saved = random.getstate()
    random.seed(seed)
    try:
        yield
    finally:
        random.setstate(saved)


class Items:
    """One split of a reasoning-gym dataset, item by item: item `i` is generated the first time
    a task or a score asks for it, and kept (as the dataset made it: it scores against it)."""

    def __init__(self, name: str, data: Any, split: str) -> None:
        self.name, self.data, self.split = name, data, split
        self.entries: dict[int, dict[str, Any]] = {}

    def entry(self, i: int) -> dict[str, Any]:
        """Item `i`, generated with the module-level `random` seeded from the dataset, its seed
        and `i` (so an item is the same whichever items were generated before it)."""
        if i not in self.entries:
            with _global_random_seeded(f"reasoning_gym:{self.name}:{self.data.seed}:{i}"):
                self.entries[i] = self.data[i]
        return self.entries[i]

    def task(self, i: int) -> Task:
        """Item `i` as a task: its question, its answer (None when the dataset has none), and in
        `info` the dataset, split, index and metadata as plain JSON."""
        entry = self.entry(i)
        return Task(
            id=f"{self.split}-{i}",
            question=str(entry["question"]),
            answer=None if entry["answer"] is None else str(entry["answer"]),
            info={"dataset": self.name, "split": self.split, "index": i, "metadata": _plain_json(entry["metadata"])},
            seed=self.data.seed + i,
        )

    def tasks(self) -> LazyTasks:
        """Every item as a task, each generated on first use."""
        return LazyTasks(len(self.data), self.task)


def _plain_json(value: Any) -> Any:
    """`value` as it reads back from JSON (tuples become lists, other keys and values strings),
    so that results files hold the metadata as the rollout saw it.

    >>> _plain_json({"range": (1, 3), 2: {1, 2}.__class__.__name__})
    {'range': [1, 3], '2': 'set'}
    """
    return json.loads(json.dumps(value, default=str))


def make_score(data: Any, items: Mapping[str, Items]) -> Callable[..., float]:
    """The reward function of `data`: its own `score_answer` of the tagged answer, against the
    item as the dataset made it (`items` by split; the task's info says which)."""

    def score_answer(completion: Messages, info: Mapping[str, Any], parser: XMLParser) -> float:
        """reasoning-gym's score of the `<answer>` (None when there is no tagged answer). A
        scorer that raises on what the model wrote scores it 0: that answer is not valid."""
        entry = items[info["split"]].entry(info["index"])
        try:
            return float(data.score_answer(parser.parse_answer(completion), entry))
        except Exception:
            return 0.0

    return score_answer


def format_reward(completion: Messages, parser: XMLParser) -> float:
    """1 when the reply is exactly `[<think>] <answer>`, nothing else around them."""
    return parser.format_reward(completion)


def _question_of(messages: Messages) -> str:
    return next((str(m.get("content") or "") for m in reversed(messages) if m.get("role") == "user"), "")


def oracle_policy(messages: Messages, rng: random.Random, items: Sequence[Items]) -> str:
    """Answers with the dataset's own answer to the question of the last user message (the
    question of a task already generated: the one being played)."""
    question = _question_of(messages)
    for split in items:
        for entry in split.entries.values():
            if str(entry["question"]) == question:
                return f"<answer>{entry['answer']}</answer>"
    return "<answer></answer>"


def guess_policy(messages: Messages, rng: random.Random, items: Sequence[Items]) -> str:
    """Answers with the answer of a random task of the dataset (either split): right format,
    no reading."""
    sizes = [len(split.data) for split in items]
    i = rng.randrange(sum(sizes))
    split = 0 if i < sizes[0] else 1
    entry = items[split].entry(i - split * sizes[0])
    return f"<answer>{'' if entry['answer'] is None else entry['answer']}</answer>"


class ReasoningGymEnv(SingleTurnEnv[State]):
    """One reasoning-gym dataset, single turn; see the module docstring."""

    items: tuple[Items, Items]
    """The training and evaluation items (set by `load_environment`)."""

    def policies(self) -> dict[str, Callable[[], ChatClient]]:
        guess = functools.partial(guess_policy, items=self.items)
        players: dict[str, Callable[[], ChatClient]] = {"guess": functools.partial(Policy, guess, name="guess")}
        if self.items[1].entry(0)["answer"] is not None:  # 5 datasets have none (docs/environments.md)
            oracle = functools.partial(oracle_policy, items=self.items)
            players = {"oracle": functools.partial(Policy, oracle, name="oracle"), **players}
        return players


def load_environment(
    dataset: str = "leg_counting",
    size: int = 500,
    seed: int = 0,
    eval_size: int = 100,
    format_weight: float = 0.0,
    max_tokens: int = 1024,
    **config: Any,
) -> ReasoningGymEnv:
    """Any reasoning-gym dataset by name, scored by its own `score_answer`.

    Args:
        dataset: the reasoning-gym dataset (`reasoning_gym.factory.DATASETS`), e.g. leg_counting.
        size: training tasks (the dataset's `size`).
        seed: the dataset's `seed`; same arguments, same tasks.
        eval_size: held-out evaluation tasks (the dataset again, from seed + size).
        format_weight: weight of `format_reward` in the total (0: a logged metric only).
        max_tokens: most tokens in the reply, sent with every request.
        **config: the dataset's own config (its fields besides seed and size).
    """
    if size < 1 or eval_size < 1:
        raise UsageError(f"size and eval_size must be >= 1, got {size}, {eval_size}")
    train = Items(dataset, create_dataset(dataset, size, seed, config), "train")
    held_out = Items(dataset, create_dataset(dataset, eval_size, seed + size, config), "eval")
    parser = XMLParser(["think", "answer"], optional=["think"])
    score = make_score(train.data, {"train": train, "eval": held_out})
    rubric = Rubric([score, format_reward], weights=[1.0, format_weight], parser=parser)
    env = ReasoningGymEnv(
        train.tasks(),
        eval_dataset=held_out.tasks(),
        system_prompt=SYSTEM_PROMPT,
        parser=parser,
        rubric=rubric,
        sampling=SamplingArgs(max_tokens=max_tokens),
    )
    env.items = (train, held_out)
    return env
