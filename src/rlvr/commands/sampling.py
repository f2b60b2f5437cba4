"""What a run of `rlvr eval` or `rlvr gen` samples with, each layer over the one before:

1. the environment's own sampling (`env.sampling`, set in its code);
2. `[tool.rlvr.eval]` in the environment's pyproject.toml (`rlvr eval` only, see `env_defaults`);
3. `-S/--sampling-args JSON`, e.g. `-S '{"top_p": 0.9, "max_tokens": 64}'`;
4. the named flags `-t/--max-tokens` and `-T/--temperature`: a named flag wins over the JSON.

Keys outside `SAMPLING_KEYS` are refused, naming the valid ones (the per-rollout seed is the
engine's; log-probabilities are the trainer's).
"""

from __future__ import annotations

import argparse
import json
import math
from typing import TYPE_CHECKING, Any

from rlvr.errors import UsageError
from rlvr.types import DEFAULT_MAX_TOKENS

if TYPE_CHECKING:
    from rlvr.clients.base import ChatClient

SAMPLING_KEYS = ("max_tokens", "temperature", "top_p", "stop")
"""The sampling settings `-S` and `[tool.rlvr.eval]` may set."""
PYPROJECT = "[tool.rlvr.eval] in the environment's pyproject.toml"


def add_sampling_args(p: argparse.ArgumentParser) -> None:
    """-t, -T and -S, shared by eval and gen."""
    p.add_argument(
        "-t",
        "--max-tokens",
        type=int,
        default=None,
        help=f"max tokens per model reply (default: -S, the environment's limit, else {DEFAULT_MAX_TOKENS})",
    )
    p.add_argument("-T", "--temperature", type=float, default=None, help="sampling temperature (wins over -S)")
    p.add_argument(
        "-S",
        "--sampling-args",
        default=None,
        metavar="JSON",
        help=f"sampling settings as a JSON object, keys {', '.join(SAMPLING_KEYS)}, e.g. "
        '\'{"top_p": 0.9, "max_tokens": 64}\'; -t and -T win over it',
    )


def parse_sampling_args(text: str | None) -> dict[str, Any]:
    """The settings of `-S JSON`, checked.

    >>> parse_sampling_args('{"top_p": 0.9, "max_tokens": 64}')
    {'top_p': 0.9, 'max_tokens': 64}
    >>> parse_sampling_args('{"top_k": 5}')
    Traceback (most recent call last):
    ...
    rlvr.errors.UsageError: -S: unknown sampling key 'top_k'; valid keys: max_tokens, temperature, top_p, stop
    """
    return {} if text is None else check_sampling_values(json_object("-S", text, '{"top_p": 0.9}'), "-S")


def json_object(flag: str, text: str, example: str) -> dict[str, Any]:
    """The JSON object given to `flag`; a `UsageError` in one line (with `example`) otherwise."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise UsageError(f"{flag} must be a JSON object, got {text!r} ({exc.msg} at column {exc.colno})") from None
    if not isinstance(value, dict):
        raise UsageError(f"{flag} must be a JSON object like '{example}', got {type(value).__name__}")
    return value


def check_sampling_values(values: dict[str, Any], source: str) -> dict[str, Any]:
    """`values` if each key is one of `SAMPLING_KEYS` with a value of its type; else a
    `UsageError` naming `source`, the key and what it takes."""
    for key, value in values.items():
        if key not in SAMPLING_KEYS:
            raise UsageError(f"{source}: unknown sampling key {key!r}; valid keys: {', '.join(SAMPLING_KEYS)}")
        number = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
        ok = {
            "max_tokens": isinstance(value, int) and not isinstance(value, bool) and value >= 1,
            "temperature": number and value >= 0,
            "top_p": number and 0 < value <= 1,
            "stop": isinstance(value, list) and all(isinstance(s, str) for s in value),
        }[key]
        if not ok:
            wanted = {
                "max_tokens": "an integer >= 1",
                "temperature": "a number >= 0",
                "top_p": "a number in (0, 1]",
                "stop": 'a list of strings, e.g. ["</answer>"]',
            }[key]
            raise UsageError(f"{source}: {key} must be {wanted}, got {json.dumps(value)}")
    return values


def layers(args: argparse.Namespace) -> list[tuple[str, dict[str, Any]]]:
    """The sampling settings of a run other than the env's code and the named flags, highest first."""
    found = [("-S", getattr(args, "sampling_json", None) or {})]
    return found + [(PYPROJECT, getattr(args, "env_sampling", None) or {})]


def tasks_and_sampling(args: argparse.Namespace, env: Any, client: ChatClient) -> tuple[list[Any], Any]:
    """The tasks (-n of --split) and the sampling of a run (the layers of the module docstring),
    with the token limit of `reply_limit`."""
    tasks = env.tasks(args.split)
    if args.num_tasks != -1:
        tasks = tasks[: args.num_tasks]
    if not tasks:
        raise UsageError(f"environment {args.env!r} has no {args.split} tasks")
    sampling = env.sampling
    for _, values in reversed(layers(args)):  # lowest first
        sampling = sampling.replace(**{k: v for k, v in values.items() if k != "max_tokens"})
    sampling = sampling.replace(max_tokens=reply_limit(args, env, client)[0])
    if args.temperature is not None:
        sampling = sampling.replace(temperature=args.temperature)
    return tasks, sampling


def reply_limit(args: argparse.Namespace, env: Any, client: ChatClient) -> tuple[int | None, str]:
    """The max tokens per reply a run sends, and where it comes from: -t, -S, the env's
    pyproject, the environment's sampling, its episode token budget; else `DEFAULT_MAX_TOKENS`
    for a local model, which never runs unbounded, and None for an endpoint, whose own limit
    stands (the environment asked for none)."""
    from rlvr.clients.base import RemoteClient

    if args.max_tokens is not None:
        return args.max_tokens, "-t"
    for source, values in layers(args):
        if "max_tokens" in values:
            return values["max_tokens"], source
    if env.sampling.max_tokens is not None:
        return env.sampling.max_tokens, "the environment's"
    if env.max_completion_tokens is not None:
        return env.max_completion_tokens, "the environment's token budget"
    if isinstance(client, RemoteClient):
        return None, "the environment sets none; -t to set one"
    return DEFAULT_MAX_TOKENS, "rlvr's default for a local model; -t to change"


def temperature_line(args: argparse.Namespace, sampling: Any) -> str:
    """Which temperature a run samples at, where that comes from, and how to play greedily.

    >>> from rlvr.types import SamplingArgs
    >>> temperature_line(argparse.Namespace(temperature=None), SamplingArgs(temperature=1.0))
    "sampling at T=1 (the environment's default); -T 0 for greedy"
    >>> temperature_line(argparse.Namespace(temperature=0.0), SamplingArgs(temperature=0.0))
    'sampling at T=0 (-T): greedy'
    """
    source = "-T" if args.temperature is not None else "the environment's default"
    if args.temperature is None:
        source = next((where for where, values in layers(args) if "temperature" in values), source)
    how = ": greedy" if sampling.temperature == 0 else "; -T 0 for greedy"
    return f"sampling at T={sampling.temperature:g} ({source}){how}"
