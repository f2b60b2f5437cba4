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
     │    └── PromptTooLongError   the prompt no longer fits the model's context
     ├── ResultsError          a results file is corrupt, foreign or from another run
     ├── ModelError            a model path is missing or is not a causal LM
     └── TrainingError         training cannot go on (a non-finite loss or gradient)
"""

from __future__ import annotations


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


class ResultsError(RlvrError):
    """A results file is corrupt, foreign, or belongs to another run."""


class ModelError(RlvrError):
    """A model path does not exist or does not hold a causal language model."""


class TrainingError(RlvrError):
    """Training cannot go on: a non-finite loss or gradient."""


def first_line(exc: BaseException) -> str:
    """The first line of an exception's message (its type name when the message is empty),
    for one-line errors that wrap a library's multi-line one.

    >>> first_line(OSError("no such file\\nmore detail")), first_line(KeyError())
    ('no such file', 'KeyError')
    """
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
