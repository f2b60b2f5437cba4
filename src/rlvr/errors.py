"""Errors raised by rlvr.

Every error a user can cause derives from `RlvrError`; the CLI prints its message on one line
and exits non-zero, with no traceback. Messages name the expected value, the actual value and
the fix.

    RlvrError
     ├── UsageError            bad arguments or config values
     ├── EnvNotFoundError      no installed environment has that name
     ├── EnvError              an environment broke its contract (found by check_env or a run)
     ├── RubricError           a reward function asks for an unknown argument, bad weights
     ├── ParseError            a parser was given an unusable spec
     ├── ClientError           a model endpoint failed for good (after retries), missing API key
     │    ├── PromptTooLongError   the prompt no longer fits the model's context
     │    ├── ClientClosedError    a request to a client after its aclose()
     │    └── KeyRefusedError      the endpoint refused the API key again and again: the run stops
     ├── ResultsError          a results file is corrupt, foreign or from another run
     ├── ModelError            a model path is missing or is not a causal LM
     └── TrainingError         training cannot go on (a non-finite loss or gradient)

The model-facing branch stands apart: these never reach the user. A failed tool call becomes
the tool's reply ("Error: ..."), the model reads it, and the rollout goes on.

    ToolCallError              (rlvr.envs.tools) a tool call the model got wrong: an unknown
     │                         tool, bad arguments; a tool raises it to say what was wrong
     └── SandboxError          (rlvr.sandbox) sandboxed code failed or broke a limit

So does one exception internal to the HTTP client:

    MalformedResponse          (rlvr.clients.openai_response) a 200 that is not a chat
                               completion: retried, and a ClientError once retries run out

Two helpers put an exception on one line: `first_line` (the message a user reads) and
`error_summary` (type, message and the last frames, for a rollout's error record).
"""

from __future__ import annotations

import importlib
import traceback
from typing import Any


class RlvrError(Exception):
    """Base class of every error a user can cause."""


class UsageError(RlvrError):
    """Bad arguments or configuration values."""


class EnvNotFoundError(RlvrError):
    """No installed environment has the requested name."""


class EnvError(RlvrError):
    """An environment broke its contract."""


class RubricError(RlvrError):
    """A rubric was built from unusable reward functions or weights."""


class ParseError(RlvrError):
    """A parser was configured with an unusable spec."""


class ClientError(RlvrError):
    """A model endpoint failed for good (after retries) or is misconfigured."""


class PromptTooLongError(ClientError):
    """The conversation no longer fits the model's context window."""


class ClientClosedError(ClientError):
    """A request to a client after its `aclose()`: closing is for good (as in httpx), so a
    closed client never opens new connections or threads behind the caller's back."""


class KeyRefusedError(ClientError):
    """The endpoint refused the API key (401/403) on several requests in a row, with none
    answered between: every further request would be refused too. The one error inside a
    rollout that stops the whole run instead of becoming the rollout's error record."""


class ResultsError(RlvrError):
    """A results file is corrupt, foreign, or belongs to another run."""


class ModelError(RlvrError):
    """A model path does not exist or does not hold a causal language model."""


class TrainingError(RlvrError):
    """Training cannot go on: a non-finite loss or gradient."""


def first_line(exc: BaseException) -> str:
    """The first line of an exception's message, or its type name when the message is empty.

    >>> first_line(OSError("disk full\\nmore detail")), first_line(KeyError())
    ('disk full', 'KeyError')
    """
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def cannot_write(path: object, exc: OSError) -> str:
    """One line saying why an output folder cannot be written (for `-o DIR`).

    >>> cannot_write("runs/x", FileExistsError(17, "File exists"))
    'cannot write to runs/x: it is a file, not a folder; choose another output folder'
    """
    why = {
        FileExistsError: "it is a file, not a folder",
        NotADirectoryError: "a part of that path is a file, not a folder",
    }.get(type(exc), exc.strerror or first_line(exc))
    return f"cannot write to {path}: {why}; choose another output folder"


def error_summary(exc: BaseException, frames: int = 3) -> str:
    """`Type: message` plus the last few traceback frames, short enough for a results file.

    >>> error_summary(ValueError("bad move"))
    'ValueError: bad move'
    """
    tb = traceback.extract_tb(exc.__traceback__)[-frames:] if frames > 0 else []
    where = " <- ".join(f"{f.filename.rsplit('/', 1)[-1]}:{f.lineno} {f.name}" for f in reversed(tb))
    return f"{type(exc).__name__}: {exc}" + (f" [at {where}]" if where else "")


def import_extra(module: str, extra: str, what: str, package: str | None = None) -> Any:
    """Import the optional `module`, or raise a UsageError saying which extra installs it:
    "{what} need {package}: pip install 'rlvr[{extra}]'".

    >>> import_extra("json", "none", "tests").__name__
    'json'
    >>> import_extra("no_such_module_rlvr", "gym", "Gymnasium environments", "gymnasium")
    Traceback (most recent call last):
    rlvr.errors.UsageError: Gymnasium environments need gymnasium: pip install 'rlvr[gym]'
    """
    try:
        return importlib.import_module(module)
    except ImportError:
        raise UsageError(f"{what} need {package or module}: pip install 'rlvr[{extra}]'") from None
