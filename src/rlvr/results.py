"""Results files: `results.jsonl` (one rollout a line, appended as each finishes) and
`metadata.json` beside it (what was run, and how far it got).

A run directory survives a crash: each line is flushed as written, a torn last line (the
process died mid-write) is cut on resume, and a resumed run refuses a directory that holds
another run's results. A resumed run may grow (`GROWS`: more tasks, more rollouts a task), the
metadata then records the new size; it may not change what makes its rollouts comparable
(`IDENTITY`).

Each line is strict JSON in UTF-8, whatever a model, a tool or an environment produced
(`json_line`): a lone surrogate (`"\\ud800"`, which a model may well send) is written as that
escape, and a non-finite number (a metric returning NaN) as `null`, its place and value listed
in the line's `nonfinite` member (`{"/rewards/m": "nan"}`, JSON Pointers); reading restores both.
"""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from rlvr.errors import ResultsError, cannot_write
from rlvr.types import Rollout

RESULTS = "results.jsonl"
METADATA = "metadata.json"
FORMAT = "rlvr.results/1"
IDENTITY = ("env", "env_args", "model", "sampling", "split")
"""Metadata keys that must match for `--resume` to continue a run."""
GROWS = ("num_tasks", "rollouts_per_task")
"""Metadata keys a resumed run may raise (never lower): it plays only the missing rollouts."""


@dataclass
class RunDir:
    """A results directory: read it, or append rollouts to it."""

    path: Path
    metadata: dict[str, Any] = field(default_factory=dict)
    _file: IO[bytes] | None = None

    @property
    def results_path(self) -> Path:
        return self.path / RESULTS

    @property
    def metadata_path(self) -> Path:
        return self.path / METADATA

    # ---- opening --------------------------------------------------------------------------

    @classmethod
    def create(
        cls, path: str | Path, metadata: dict[str, Any], *, resume: bool = False
    ) -> tuple[RunDir, list[Rollout]]:
        """Open `path` for a run; with `resume`, continue the run already there.

        Returns the directory and the rollouts already in it (empty for a new run). A new run
        refuses a directory that already holds results (nothing gets overwritten).
        """
        existing: list[Rollout] = []
        return cls.start(path, metadata, resume=resume, each=existing.append), existing

    @classmethod
    def start(
        cls,
        path: str | Path,
        metadata: dict[str, Any],
        *,
        resume: bool = False,
        each: Callable[[Rollout], object] | None = None,
    ) -> RunDir:
        """`create` for runs of any size: each rollout already there is passed to `each` as it
        is read, none is kept."""
        run = cls(Path(path), {"format": FORMAT, **metadata})
        if run.results_path.exists() or run.metadata_path.exists():
            if not resume:
                raise ResultsError(
                    f"{run.path} already holds results; pass --resume to continue that run, "
                    "or choose another output directory"
                )
            old = cls.open(run.path)
            _check_same_run(old.metadata, run.metadata, run.path)
            for rollout in old.rollouts(repair=True):
                if each is not None:
                    each(rollout)
            run.metadata["created"] = old.metadata.get("created")
        try:
            run.path.mkdir(parents=True, exist_ok=True)
            run.metadata.setdefault("created", time.strftime("%Y-%m-%dT%H:%M:%S"))
            run.metadata["status"] = "running"
            run.write_metadata()
            run._file = run.results_path.open("ab")
        except OSError as exc:  # a file in the way, no permission, a read-only disk
            raise ResultsError(cannot_write(run.path, exc)) from None
        return run

    @classmethod
    def open(cls, path: str | Path) -> RunDir:
        """Open an existing results directory (or a results.jsonl file) for reading."""
        p = Path(path)
        if p.is_file() and p.name == RESULTS:
            p = p.parent
        if not p.is_dir():
            raise ResultsError(f"{p} is not a results directory (expected a folder holding {RESULTS})")
        run = cls(p)
        if run.metadata_path.exists():
            try:
                run.metadata = json.loads(run.metadata_path.read_text(encoding="utf-8"))
            except (json.JSONDecodeError, UnicodeDecodeError) as exc:
                raise ResultsError(f"{run.metadata_path} is not valid JSON ({exc})") from None
            if not isinstance(run.metadata, dict) or run.metadata.get("format") != FORMAT:
                raise ResultsError(f"{run.metadata_path} is not an rlvr results file (format {FORMAT} expected)")
        elif not run.results_path.exists():
            raise ResultsError(f"{p} holds neither {RESULTS} nor {METADATA}")
        return run

    # ---- reading --------------------------------------------------------------------------

    def read(self, *, repair: bool = False) -> list[Rollout]:
        """Every rollout in the file. A torn last line is dropped (and cut when `repair`)."""
        return list(self.rollouts(repair=repair))

    def rollouts(self, *, repair: bool = False) -> Iterator[Rollout]:
        """Every rollout in the file, read one line at a time. A torn last line (no newline,
        not JSON) is dropped, and with `repair` cut once the file has been read through."""
        if not self.results_path.exists():
            return
        good, newline = 0, True  # bytes of whole lines; whether the last of them ends with a newline
        with self.results_path.open("rb") as f:
            for number, line in enumerate(f, start=1):
                if line.strip():
                    try:
                        rollout = Rollout.from_dict(read_json_line(line))
                    except (json.JSONDecodeError, UnicodeDecodeError, TypeError, ValueError, KeyError) as exc:
                        if not line.endswith(b"\n"):
                            break  # torn write of the last line: the rollout is simply not there
                        raise ResultsError(
                            f"{self.results_path}:{number} is not an rlvr rollout ({type(exc).__name__}: {exc})"
                        ) from None
                    yield rollout
                good, newline = good + len(line), line.endswith(b"\n")
            size = f.seek(0, os.SEEK_END)
        if repair and (good < size or not newline):
            with self.results_path.open("r+b") as f:
                f.truncate(good)
                if not newline:  # a whole last line that lost its newline: the next one must not join it
                    f.seek(good)
                    f.write(b"\n")

    # ---- writing --------------------------------------------------------------------------

    def append(self, rollout: Rollout) -> None:
        """Append one rollout and flush it to the OS (it survives a crash of this process).

        A rollout that cannot be written as JSON (an env put an object JSON has no form for in
        `info`) is saved as an error record saying so; a file that cannot be written (disk
        full) raises `ResultsError`, which ends the run with that line.
        """
        if self._file is None:
            raise ResultsError("results directory not opened for writing")
        try:
            line = json_line(rollout.to_dict())
        except (TypeError, ValueError) as exc:
            line = json_line(_unsaveable(rollout, exc).to_dict())
        try:
            self._file.write(line)
            self._file.flush()
        except OSError as exc:
            raise ResultsError(f"cannot write to {self.results_path} ({exc.strerror or exc})") from None

    def write_metadata(self) -> None:
        tmp = self.metadata_path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(self.metadata, indent=2, default=str), encoding="utf-8")
        os.replace(tmp, self.metadata_path)

    def close(self, status: str = "complete", **extra: Any) -> None:
        """Close the results file and record the run's final status in the metadata."""
        if self._file is not None:
            self._file.flush()
            os.fsync(self._file.fileno())
            self._file.close()
            self._file = None
        self.metadata.update(extra, status=status, finished=time.strftime("%Y-%m-%dT%H:%M:%S"))
        self.write_metadata()


def _check_same_run(old: dict[str, Any], new: dict[str, Any], path: Path) -> None:
    for key in IDENTITY:
        if key in old and key in new and old[key] != new[key]:
            name, was, now = _first_difference(key, old[key], new[key])
            raise ResultsError(
                f"{path} holds another run: {name} was {was!r}, now {now!r}; its rollouts would not compare; "
                "resume with the same value or choose another output directory"
            )
    for key in GROWS:
        was, now = old.get(key), new.get(key)
        if isinstance(was, int) and isinstance(now, int) and now < was:
            raise ResultsError(
                f"{path} holds a run with {key} {was}, now {now}; a resumed run can add tasks or rollouts, "
                f"not drop them: pass {was} or more, or choose another output directory"
            )


def _first_difference(name: str, old: Any, new: Any) -> tuple[str, Any, Any]:
    """The first differing member of two values, named with dots (`sampling.top_p`).

    >>> _first_difference("sampling", {"top_p": 1.0, "stop": None}, {"top_p": 0.9, "stop": None})
    ('sampling.top_p', 1.0, 0.9)
    """
    if isinstance(old, dict) and isinstance(new, dict):
        for key in [*old, *(k for k in new if k not in old)]:
            if old.get(key) != new.get(key):
                return _first_difference(f"{name}.{key}", old.get(key), new.get(key))
    return name, old, new


# ---- one line of JSON ---------------------------------------------------------------------------


def json_line(record: dict[str, Any]) -> bytes:
    """`record` as one line of strict JSON in UTF-8 (see the module docstring).

    >>> json_line({"text": "a\\ud800", "m": float("nan")})
    b'{"text": "a\\\\ud800", "m": null, "nonfinite": {"/m": "nan"}}\\n'
    """
    try:
        text = json.dumps(record, ensure_ascii=False, allow_nan=False)
    except ValueError:  # a NaN or an infinity somewhere: null, and say where
        found: dict[str, str] = {}
        clean = _nulled(record, "", found)
        text = json.dumps({**clean, "nonfinite": found}, ensure_ascii=False, allow_nan=False)
    # UTF-8 has no form for a lone surrogate; JSON has one: an escape such as `\\udc80`, which is what
    # backslashreplace writes (outside strings JSON text is ASCII, so only strings are touched)
    return (text + "\n").encode("utf-8", "backslashreplace")


def read_json_line(line: bytes | str) -> dict[str, Any]:
    """A line written by `json_line`, non-finite numbers restored."""
    record = json.loads(line)
    if isinstance(record, dict) and isinstance(record.get("nonfinite"), dict):
        for pointer, value in record.pop("nonfinite").items():
            _restore(record, pointer, float(value))
    return record


def _nulled(value: Any, pointer: str, found: dict[str, str]) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        found[pointer] = str(value)
        return None
    if isinstance(value, dict):
        return {k: _nulled(v, f"{pointer}/{_escape(str(k))}", found) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_nulled(v, f"{pointer}/{i}", found) for i, v in enumerate(value)]
    return value


def _escape(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1")


def _restore(record: dict[str, Any], pointer: str, value: float) -> None:
    *path, last = [p.replace("~1", "/").replace("~0", "~") for p in pointer.split("/")[1:]]
    here: Any = record
    for part in path:
        here = here[int(part)] if isinstance(here, list) else here[part]
    if isinstance(here, list):
        here[int(last)] = value
    else:
        here[last] = value


def _unsaveable(rollout: Rollout, exc: Exception) -> Rollout:
    """What is saved of a rollout JSON cannot hold: its key, seed and an error saying why."""
    return Rollout(
        task_id=rollout.task_id,
        rollout_index=rollout.rollout_index,
        seed=rollout.seed,
        prompt=[],
        rewards={name: 0.0 for name in rollout.rewards},
        stop_reason="error",
        truncated=True,
        error=f"ResultsError: the rollout could not be saved as JSON ({type(exc).__name__}: {exc})",
        usage=rollout.usage,
        timing=rollout.timing,
    )
