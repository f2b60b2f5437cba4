"""Where an environment's tasks come from: rows in memory, a Hugging Face dataset, or a file.

`MultiTurnEnv(dataset, eval_dataset=..., columns=...)` accepts, for either dataset:

- a sequence of `Task`s or of mappings: a list of dicts, a `datasets.Dataset`;
- a mapping of splits (a `datasets.DatasetDict`, or a dict of lists): `train` gives the
  training tasks and `test` (else `validation`, else `eval`) the evaluation tasks, unless
  `eval_dataset` is given;
- the path of a JSONL, JSON (a list of objects) or Parquet file (Parquet through pyarrow,
  which the `hf` extra installs).

Each row becomes a `Task` through `Task.from_row`, with `columns` naming the row's columns
for the task's fields (`{"question": "problem", "answer": "solution"}`). A bad row is a
`UsageError` that names it, when the environment is built: not a failure in the middle of a run.

`LazyTasks(size, make)` is the exception, kept as it is: tasks built on first use, for a
generator whose items are costly (reasoning-gym's puzzles), so that `-n 5` builds five.
"""

from __future__ import annotations

import json
import operator
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeAlias, overload

from rlvr.errors import UsageError
from rlvr.types import Task

TaskRows: TypeAlias = Sequence[Task | Mapping[str, Any]]
TaskSource: TypeAlias = TaskRows | Mapping[str, TaskRows] | str | os.PathLike[str]
EVAL_SPLITS = ("test", "validation", "eval")
"""Split names that give the evaluation tasks of a dataset dict, in order of preference."""


class LazyTasks(Sequence[Task]):
    """`size` tasks, task `i` built by `make(i)` on first use and kept. `make` must give each
    task its own id (not checked: that would build them all)."""

    def __init__(self, size: int, make: Callable[[int], Task]) -> None:
        self.size, self.make = size, make
        self.built: dict[int, Task] = {}
        """The tasks built so far, by index."""

    def __len__(self) -> int:
        return self.size

    @overload
    def __getitem__(self, index: int) -> Task: ...

    @overload
    def __getitem__(self, index: slice) -> list[Task]: ...

    def __getitem__(self, index: int | slice) -> Task | list[Task]:
        if isinstance(index, slice):
            return [self[i] for i in range(self.size)[index]]
        i = operator.index(index)
        i = i + self.size if i < 0 else i
        if not 0 <= i < self.size:
            raise IndexError(f"task index {index} out of range for {self.size} tasks")
        if i not in self.built:
            self.built[i] = self.make(i)
        return self.built[i]


def task_splits(
    dataset: TaskSource, eval_dataset: TaskSource | None = None, columns: Mapping[str, str] | None = None
) -> tuple[Sequence[Task], Sequence[Task] | None]:
    """The training tasks and the evaluation tasks (None: none given) of an environment."""
    train = _load(dataset)
    evals = _load(eval_dataset) if eval_dataset is not None else None
    if isinstance(train, Mapping):
        splits = train
        if "train" not in splits:
            raise UsageError(f"a dataset of splits needs a 'train' split; it has {sorted(splits)}")
        train = splits["train"]
        if evals is None:
            evals = next((splits[s] for s in EVAL_SPLITS if s in splits), None)
    if isinstance(evals, Mapping):
        found = next((s for s in EVAL_SPLITS if s in evals), None)
        if found is None:
            raise UsageError(f"eval_dataset has splits {sorted(evals)}; expected one of {list(EVAL_SPLITS)}")
        evals = evals[found]
    return as_tasks(train, columns), (as_tasks(evals, columns) if evals is not None else None)


def as_tasks(rows: TaskRows, columns: Mapping[str, str] | None = None) -> Sequence[Task]:
    """Tasks from rows (each a `Task` or a mapping); ids must be unique. `LazyTasks` stay lazy."""
    if isinstance(rows, LazyTasks):
        return rows
    tasks = []
    for i, row in enumerate(rows):
        if isinstance(row, Task):
            tasks.append(row)
        elif isinstance(row, Mapping):
            tasks.append(Task.from_row(row, i, columns))
        else:
            raise UsageError(
                f"row {i} of the dataset is a {type(row).__name__} ({row!r:.40}), not a mapping of columns; "
                "pass a list of dicts, a datasets.Dataset, a DatasetDict or a file path"
            )
    ids = [t.id for t in tasks]
    if len(set(ids)) != len(ids):
        dup = next(i for i in ids if ids.count(i) > 1)
        raise UsageError(f"task ids must be unique; {dup!r} appears more than once")
    return tasks


def _load(source: TaskSource | None) -> Any:
    """Rows or splits; a path is read."""
    if isinstance(source, (str, os.PathLike)):
        return read_task_file(source)
    if isinstance(source, Mapping) and not all(_is_rows(v) for v in source.values()):
        raise UsageError(
            f"the dataset is one mapping ({sorted(source)[:5]}), not rows or splits of rows; "
            "wrap a single row in a list"
        )
    return source


def _is_rows(value: Any) -> bool:
    return hasattr(value, "__iter__") and hasattr(value, "__len__") and not isinstance(value, (str, bytes, Mapping))


def read_task_file(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """The rows of a `.jsonl`, `.json` (a list of objects) or `.parquet` file."""
    p = Path(path)
    if not p.is_file():
        raise UsageError(f"task file {p} does not exist")
    suffix = p.suffix.lower()
    if suffix == ".parquet":
        try:
            import pyarrow.parquet as pq
        except ImportError:
            raise UsageError(f"reading {p} needs pyarrow: pip install 'rlvr[hf]'") from None
        return list(pq.read_table(p).to_pylist())
    if suffix == ".json":
        rows = json.loads(p.read_text(encoding="utf-8"))
        if not isinstance(rows, list):
            raise UsageError(f"{p} must hold a JSON list of objects (one per task), got {type(rows).__name__}")
        return rows
    if suffix != ".jsonl":
        raise UsageError(f"task file {p}: expected .jsonl, .json or .parquet, got {suffix or 'no suffix'!r}")
    rows = []
    with p.open(encoding="utf-8") as f:
        for number, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                raise UsageError(f"{p} line {number} is not JSON ({exc.msg})") from None
            if not isinstance(row, dict):
                raise UsageError(f"{p} line {number} is a JSON {type(row).__name__}, not an object")
            rows.append(row)
    return rows
