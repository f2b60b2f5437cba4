"""Where `rlvr sft --data` reads its conversations from: a JSONL file as it is, or the formats
`rlvr eval` takes tasks from, as JSONL.

- `.jsonl`: read by the trainer as it is, line by line (`rlvr.train.sft_data`).
- `.json` (a list of objects) and `.parquet`: read by the task files' reader
  (`rlvr.envs.task_source.read_task_file`, the one an environment's tasks come through).
- a folder written by `Dataset.save_to_disk` (or a `DatasetDict`'s, whose `train` split is
  used): read with `datasets.load_from_disk` (the `hf` extra).

A format other than these is refused by name. The rows of the others are written as JSONL
(`OUTPUT_DIR/data.jsonl`, one row a line, in order) so that the trainer checks each one as it
checks a JSONL line: a malformed row is reported by its number, counting from 1.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rlvr.envs.task_source import read_task_file
from rlvr.errors import UsageError, import_extra

CONVERTED_NAME = "data.jsonl"
FORMATS = ".jsonl, .json (a list of objects), .parquet, or a folder from Dataset.save_to_disk"


def conversation_rows(data: str | Path) -> list[dict[str, Any]]:
    """The rows of a `.json` or `.parquet` file or a saved dataset folder (not `.jsonl`)."""
    path = Path(data)
    if path.is_dir():
        return _saved_dataset(path)
    if not path.exists():
        raise UsageError(f"dataset {path} does not exist; make one with `rlvr gen ENV -m MODEL -d {path}`")
    if path.suffix.lower() not in (".json", ".parquet"):
        raise UsageError(f"--data {path}: {path.suffix or 'no suffix'!r} is not a dataset format; expected {FORMATS}")
    return [_without_nulls(row) for row in read_task_file(path)]


def as_jsonl(data: str, output_dir: str | Path) -> str:
    """The JSONL file the trainer reads for `data`: `data` itself when it is one, else its rows
    written to `OUTPUT_DIR/data.jsonl`."""
    path = Path(data)
    if path.suffix.lower() == ".jsonl" and not path.is_dir():
        return data
    rows = conversation_rows(path)
    out = Path(output_dir) / CONVERTED_NAME
    out.parent.mkdir(parents=True, exist_ok=True)
    part = out.with_name(out.name + ".part")  # whole or not at all: a kill mid-write leaves no half file
    with part.open("w", encoding="utf-8") as f:
        for row in rows:  # ASCII escapes: a lone surrogate in the source stays readable JSON, not an error
            f.write(json.dumps(row, default=str) + "\n")
    part.replace(out)
    return str(out)


def _saved_dataset(path: Path) -> list[dict[str, Any]]:
    datasets = import_extra("datasets", "hf", "saved Hugging Face datasets")
    try:
        loaded = datasets.load_from_disk(str(path))
    except FileNotFoundError:
        raise UsageError(f"--data {path} is a folder but not a saved dataset (Dataset.save_to_disk); "
                         f"expected {FORMATS}") from None  # fmt: skip
    if isinstance(loaded, datasets.DatasetDict):
        if "train" not in loaded:
            raise UsageError(f"--data {path} holds the splits {sorted(loaded)}; expected a 'train' split")
        loaded = loaded["train"]
    return [_without_nulls(row) for row in loaded]


def _without_nulls(row: Any) -> Any:
    """A row without the null keys that Parquet and Arrow add to messages: a column of structs
    gives every message every key any message has (`tool_calls: None` on a user message).

    >>> _without_nulls({"messages": [{"role": "user", "content": "hi", "tool_calls": None}], "tools": None})
    {'messages': [{'role': 'user', 'content': 'hi'}], 'tools': None}
    """
    if not isinstance(row, dict) or not isinstance(row.get("messages"), list):
        return row
    messages = [{k: v for k, v in m.items() if v is not None} if isinstance(m, dict) else m for m in row["messages"]]
    return {**row, "messages": messages}
