"""Train on any rlvr environment with TRL's `GRPOTrainer` (TRL 1.16; `pip install trl`).

    from trl import GRPOConfig, GRPOTrainer
    from rlvr.registry import load_environment
    from rlvr.train.trl_adapter import TRLEnv

    adapter = TRLEnv(load_environment("tictactoe"))
    config = GRPOConfig(output_dir="runs/trl", reward_weights=adapter.reward_weights, ...)
    trainer = GRPOTrainer(model="Qwen/Qwen3-0.6B", args=config, **adapter.trainer_kwargs())
    trainer.train()

`trainer_kwargs()` gives `train_dataset` (the env's tasks as conversational prompts),
`reward_funcs` (one per rubric function, named after it, so TRL logs `rewards/NAME/mean`; their
weights are `reward_weights`) and, for a multi-turn environment, `rollout_func`.

**Single-turn environments** (`SingleTurnEnv`): TRL samples the completions itself (its own
`generate` or vLLM). Each completion becomes the state of an episode that ended after one
reply, and the environment's rubric scores each task's completions as one group, as in
`rlvr eval`.

**Multi-turn environments** (games, tools): TRL's experimental `rollout_func` hook. Each prompt
of a batch is played as a whole episode by rlvr, with the model being trained (a `LocalModel`
around `trainer.model`: no copy, no weight sync), and handed to TRL as the prompt's ids plus
every later id: `env_mask` is 0 on the environment's tokens (its replies, the chat template's
headers), so TRL trains only on the ids the model sampled, with their sampling logprobs. The
rubric's scores reach the reward functions as the extra field `rlvr_rewards`. `rollout_func`
sees nothing but the prompts, so each prompt carries its task id in the key `rlvr_task_id` of
its first message (chat templates ignore it). An episode whose chat template re-tokenised the
model's text (see `rlvr.train.sequences`) is trained up to that turn only.

A rollout that failed (an error record in `rlvr eval`) gets no reward (None): TRL leaves it out
of its group's baseline and gives it no advantage.
"""

from __future__ import annotations

import asyncio
import math
import threading
from collections import Counter
from collections.abc import Callable, Coroutine, Sequence
from typing import Any, TypeVar

from rlvr.clients.local import LocalModel
from rlvr.clients.local_load import encodable
from rlvr.engine import rollout_seed, score_group
from rlvr.envs.multiturn import MultiTurnEnv, SingleTurnEnv
from rlvr.errors import UsageError
from rlvr.seeding import mix_seed
from rlvr.train.sequences import rollout_sequences
from rlvr.types import Completion, Rollout, State, Task, Turn

T = TypeVar("T")
TASK_KEY = "rlvr_task_id"
"""The dataset column (and, for multi-turn envs, the key of each prompt's first message) that
names the task."""


class TRLEnv:
    """An rlvr environment as TRL's `GRPOTrainer` takes it (see the module docstring).

    `split` and `num_tasks` choose the tasks; `concurrency` bounds the episodes one
    `rollout_func` call plays at once.
    """

    def __init__(
        self, env: MultiTurnEnv[Any], *, split: str = "train", num_tasks: int | None = None, concurrency: int = 256
    ) -> None:
        self.env = env
        self.tasks = env.tasks(split)[:num_tasks] if num_tasks is not None else env.tasks(split)
        if not self.tasks:
            raise UsageError(f"the environment has no {split} tasks")
        self.multi_turn = not isinstance(env, SingleTurnEnv)
        self.concurrency = concurrency
        self.reward_weights: list[float] = list(env.rubric.weights)
        """Pass as `GRPOConfig(reward_weights=...)`: the rubric's weights, in `reward_funcs` order."""
        self.reward_funcs = [self._reward_func(name) for name in env.rubric.names]
        self._by_id = {t.id: t for t in self.tasks}
        self._scored: tuple[tuple[Any, ...], list[dict[str, float] | None]] | None = None

    def trainer_kwargs(self) -> dict[str, Any]:
        """`GRPOTrainer(**adapter.trainer_kwargs(), model=..., args=...)`."""
        kwargs: dict[str, Any] = {"train_dataset": self.dataset(), "reward_funcs": self.reward_funcs}
        if self.multi_turn:
            kwargs["rollout_func"] = self.rollout_func
        return kwargs

    def dataset(self) -> Any:
        """The tasks as a `datasets.Dataset` of conversational prompts (system prompt included)."""
        try:
            import datasets
        except ImportError:
            raise UsageError("TRL datasets need the datasets package: pip install 'rlvr[hf]'") from None
        rows = []
        for task in self.tasks:
            # a lone surrogate (legal in a Python string) becomes U+FFFD: Arrow stores UTF-8 only
            prompt = [
                {"role": m["role"], "content": encodable(m.get("content") or "")} for m in self.env.initial_prompt(task)
            ]
            if self.multi_turn:
                prompt[0][TASK_KEY] = task.id
            rows.append({"prompt": prompt, TASK_KEY: task.id})
        return datasets.Dataset.from_list(rows)

    # ---- rewards ----------------------------------------------------------------------------

    def _reward_func(self, name: str) -> Callable[..., list[float | None]]:
        def reward(prompts: list[Any], completions: list[Any], **kwargs: Any) -> list[float | None]:
            if "rlvr_rewards" in kwargs:  # multi-turn: scored when the episodes were played
                scores = kwargs["rlvr_rewards"]
            else:
                scores = self._score(kwargs[TASK_KEY], completions, kwargs.get("completion_ids"))
            return [None if s is None else s[name] for s in scores]

        reward.__name__ = reward.__qualname__ = name
        return reward

    def _score(
        self, task_ids: Sequence[str], completions: Sequence[Any], completion_ids: Sequence[Any] | None
    ) -> list[dict[str, float] | None]:
        """The rubric's scores of single-turn completions (None for one it could not score);
        computed once per batch, however many reward functions ask."""
        texts = tuple(_text(c) for c in completions)
        key = (tuple(task_ids), texts)
        if self._scored is None or self._scored[0] != key:
            states = [
                self._answered(self._by_id[tid], text, None if completion_ids is None else completion_ids[i])
                for i, (tid, text) in enumerate(zip(task_ids, texts))
            ]
            rollouts = _run(self._score_groups(states))
            self._scored = (key, [_scores(r) for r in rollouts])
        return self._scored[1]

    def _answered(self, task: Task, text: str, ids: Sequence[int] | None) -> State:
        """The state of a single-turn episode that ended with this reply."""
        try:
            state = self.env.setup_state(task)
            state.prompt = self.env.initial_prompt(task)
        except Exception as exc:
            state = State(task=task)
            state.error = f"{type(exc).__name__}: {exc}"
            return state
        state.messages = [*state.prompt, {"role": "assistant", "content": text}]
        state.turns = [Turn(Completion(text=text, token_ids=None if ids is None else [int(i) for i in ids]))]
        state.completion_tokens = len(ids) if ids is not None else 0
        state.awaiting_model = False
        self.env.check_stops(state)
        return state

    async def _score_groups(self, states: Sequence[State]) -> list[Rollout]:
        """Score the states of each task as one group; the records in the states' order."""
        groups: dict[str, list[int]] = {}
        for i, state in enumerate(states):
            groups.setdefault(state.task.id, []).append(i)
        out: list[Rollout | None] = [None] * len(states)
        for positions in groups.values():
            task = states[positions[0]].task
            for i, rollout in zip(
                positions, await score_group(self.env, task, positions, [states[i] for i in positions])
            ):
                out[i] = rollout
        return [r for r in out if r is not None]

    # ---- multi-turn: whole episodes with the model being trained ----------------------------

    def rollout_func(self, prompts: list[Any], trainer: Any) -> dict[str, list[Any]]:
        """TRL's `rollout_func`: play each prompt's task as one episode (see the module
        docstring); prompt ids, completion ids with `env_mask`, logprobs, and `rlvr_rewards`."""
        tasks = [self._task_of(p) for p in prompts]
        args = trainer.args
        sampling = self.env.sampling.replace(
            max_tokens=args.max_completion_length, temperature=args.temperature, top_p=args.top_p, logprobs=True
        )
        model = trainer.accelerator.unwrap_model(trainer.model)
        tokenizer = getattr(trainer.processing_class, "tokenizer", trainer.processing_class)
        salt = mix_seed(trainer.state.global_step, trainer.accelerator.process_index)
        rollouts = _run(self._play(tasks, LocalModel("policy", model=model, tokenizer=tokenizer), sampling, salt))
        batch: dict[str, list[Any]] = {k: [] for k in ("prompt_ids", "completion_ids", "logprobs", "env_mask")}
        for rollout in rollouts:
            for key, value in zip(batch, _episode_tokens(rollout, tokenizer)):
                batch[key].append(value)
        batch["rlvr_rewards"] = [_scores(r) for r in rollouts]
        return batch

    def _task_of(self, prompt: Any) -> Task:
        key = prompt[0].get(TASK_KEY) if prompt and isinstance(prompt[0], dict) else None
        if key not in self._by_id:
            raise UsageError(
                f"a prompt without a known {TASK_KEY!r} in its first message reached rollout_func; "
                "train on TRLEnv.dataset() (trainer_kwargs() passes it)"
            )
        return self._by_id[key]

    async def _play(self, tasks: Sequence[Task], client: LocalModel, sampling: Any, salt: int) -> list[Rollout]:
        gate = asyncio.Semaphore(self.concurrency)
        seen: Counter[str] = Counter()
        seeds = []
        for task in tasks:  # the k-th copy of a task in this batch is its k-th rollout
            seeds.append(mix_seed(rollout_seed(task, seen[task.id]), salt))
            seen[task.id] += 1

        async def play(task: Task, seed: int) -> State:
            async with gate:
                return await self.env.rollout(client, task, sampling, seed)

        try:
            states = await asyncio.gather(*(play(t, s) for t, s in zip(tasks, seeds)))
        finally:
            await client.aclose()
        return await self._score_groups(states)


def _episode_tokens(rollout: Rollout, tokenizer: Any) -> tuple[list[int], list[int], list[float], list[int]]:
    """(prompt ids, completion ids, logprobs, env_mask) of one episode; an episode with no
    model turn (it failed before one) is its prompt and one masked end-of-text id."""
    if rollout.turns and all(t.completion.token_ids is not None for t in rollout.turns):
        ids, mask, logprobs, _ = rollout_sequences(rollout)[0]
        start = len(rollout.turns[0].completion.prompt_token_ids or [])
        lps = [0.0 if math.isnan(x) else x for x in logprobs[start:]]
        return ids[:start], ids[start:], lps, mask[start:]
    prompt = tokenizer.apply_chat_template(encodable(rollout.prompt), add_generation_prompt=True, tokenize=True)
    prompt_ids = list(prompt["input_ids"] if isinstance(prompt, dict) else prompt)
    end = tokenizer.eos_token_id if tokenizer.eos_token_id is not None else 0
    return prompt_ids, [end], [0.0], [0]


def _scores(rollout: Rollout) -> dict[str, float] | None:
    return None if rollout.error is not None else dict(rollout.rewards)


def _text(completion: Any) -> str:
    """A TRL completion (text, or a list of messages) as the text of the reply."""
    if isinstance(completion, str):
        return completion
    return "".join(str(m.get("content") or "") for m in completion if m.get("role") == "assistant")


def _run(coroutine: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine to its end from synchronous code, also where an event loop is running
    (a notebook): then in a thread of its own."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coroutine)
    result: list[T] = []
    failure: list[BaseException] = []

    def target() -> None:
        try:
            result.append(asyncio.run(coroutine))
        except BaseException as exc:
            failure.append(exc)

    thread = threading.Thread(target=target)
    thread.start()
    thread.join()
    if failure:
        raise failure[0]
    return result[0]
