"""Rollouts out to Hugging Face: an eval's results as a `datasets.Dataset` (the `hf` extra).

`rollouts_dataset` makes one row per rollout with the columns eval uploads have carried:

    prompt, completion   chat messages (role, content, tool_calls, tool_call_id: the same
                         keys in every message, so that Arrow stores them as one type)
    answer               the task's reference answer (None without one)
    task                 the environment's name
    reward               the weighted total; then one column per reward function
    info                 the task's info, as JSON text (its keys differ from env to env)

and rlvr's own: task_id, rollout_index, seed, model, stop_reason, truncated, error, turns,
completion_tokens. `rlvr eval --save-dataset DIR` writes it with `save_to_disk` (load it back
with `datasets.load_from_disk(DIR)`); `--push-to-hub REPO` uploads it (a private dataset) when a
Hugging Face token and a network are at hand, and otherwise fails with one line, after the
results are saved.

The task side (a `Dataset`, a `DatasetDict`, JSONL and Parquet files as an environment's tasks)
is `rlvr.envs.task_source`.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rlvr.errors import ClientError, UsageError, cannot_write, first_line
from rlvr.types import Message, Rollout


def require(push_to: str | None = None) -> None:
    """Fail before a run, not after it: `datasets` installed, and a token when pushing."""
    _datasets()
    if push_to is not None:
        from huggingface_hub import get_token

        if not get_token():
            raise UsageError(f"--push-to-hub {push_to} needs a Hugging Face token: run `hf auth login` or set HF_TOKEN")


def _datasets() -> Any:
    try:
        import datasets
    except ImportError:
        raise UsageError("Hugging Face datasets need the hf extra: pip install 'rlvr[hf]'") from None
    return datasets


def message_row(message: Message) -> dict[str, Any]:
    """A chat message with the same keys and types in every row.

    >>> message_row({"role": "user", "content": "hi"})
    {'role': 'user', 'content': 'hi', 'tool_calls': [], 'tool_call_id': None}
    """
    content = message.get("content")
    if content is not None and not isinstance(content, str):
        content = json.dumps(content, ensure_ascii=False)  # content parts (text, images)
    calls = [
        {
            "id": str(c.get("id", "")),
            "type": "function",
            "function": {
                "name": str(c.get("function", {}).get("name", "")),
                "arguments": str(c.get("function", {}).get("arguments", "")),
            },
        }
        for c in message.get("tool_calls") or []
    ]
    call_id = message.get("tool_call_id")
    return {
        "role": str(message.get("role", "")),
        "content": content or "",
        "tool_calls": calls,
        "tool_call_id": None if call_id is None else str(call_id),
    }


def rollout_row(rollout: Rollout, *, task: str, reward_names: Sequence[str], model: str) -> dict[str, Any]:
    """One row of the dataset (see the module docstring)."""
    row: dict[str, Any] = {
        "prompt": [message_row(m) for m in rollout.prompt],
        "completion": [message_row(m) for m in rollout.completion],
        "answer": rollout.answer,
        "task": task,
        "reward": float(rollout.reward),
    }
    row.update({name: float(rollout.rewards.get(name, 0.0)) for name in reward_names})
    row.update(
        info=json.dumps(rollout.info, ensure_ascii=False, default=str),
        task_id=rollout.task_id,
        rollout_index=rollout.rollout_index,
        seed=rollout.seed,
        model=model,
        stop_reason=rollout.stop_reason,
        truncated=rollout.truncated,
        error=rollout.error,
        turns=len(rollout.turns),
        completion_tokens=int(rollout.metrics.get("completion_tokens", 0)),
    )
    return row


def rollouts_dataset(rollouts: Sequence[Rollout], *, task: str, reward_names: Sequence[str], model: str) -> Any:
    """The rollouts as a `datasets.Dataset`, one row each."""
    datasets = _datasets()
    clash = {"prompt", "completion", "answer", "task", "reward", "info"} & set(reward_names)
    if clash:
        raise UsageError(f"reward functions named {sorted(clash)} would overwrite dataset columns; rename them")
    rows = [rollout_row(r, task=task, reward_names=reward_names, model=model) for r in rollouts]
    return datasets.Dataset.from_list(rows)


def export(
    rollouts: Sequence[Rollout],
    *,
    task: str,
    reward_names: Sequence[str],
    model: str,
    save_dir: str | Path | None = None,
    push_to: str | None = None,
) -> str:
    """Save the dataset to `save_dir` and/or push it to the Hub repo `push_to`; what was done,
    in one line. Pushing checks for a token first and turns any failure into one line."""
    datasets = _datasets()
    dataset = rollouts_dataset(rollouts, task=task, reward_names=reward_names, model=model)
    done = []
    bars = datasets.is_progress_bar_enabled()
    datasets.disable_progress_bars()  # the run's own summary says what was written
    try:
        if save_dir is not None:
            try:
                dataset.save_to_disk(str(save_dir))
            except OSError as exc:
                raise UsageError(f"{cannot_write(save_dir, exc)} for --save-dataset") from None
            done.append(f"saved the dataset ({len(dataset)} rows) to {save_dir}")
        if push_to is not None:
            require(push_to)
            try:
                dataset.push_to_hub(push_to, private=True)
            except Exception as exc:  # offline, refused, rate-limited: one line, the results are kept
                raise ClientError(f"pushing the dataset to {push_to} failed: {first_line(exc)}") from None
            done.append(f"pushed the dataset ({len(dataset)} rows) to https://huggingface.co/datasets/{push_to}")
    finally:
        if bars:
            datasets.enable_progress_bars()
    return "; ".join(done)
