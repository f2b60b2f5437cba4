"""`rlvr train ENV --model PATH [--config FILE.toml] [flags]`: GRPO-family RL in an environment.

Every field of the training config is a flag (`--batch-size 256`) and a TOML key
(`batch_size = 256`); flags override the file. Tables and lists are JSON on the command line:
`--env-args '{"min_random_move_prob": 0.2}'`, `--eval-env-args '[{"opponent": "random"}]'`;
`none` unsets an optional number (`--eval-every none`). Short flags mean what they mean in
`rlvr eval` and `rlvr sft`: -m model, -o output dir, -a env args, -T temperature, -t max tokens
a turn. A section's fields are a TOML table (`[restarts]` with `frac = 0.5`) and keep their
flat flags (`--restart-frac 0.5`).

The run directory gets metrics.csv, tensorboard/, plots/*.png, eval/, checkpoints/ and, at
the end, final/ (a plain model folder for `rlvr eval -m`). `--resume` continues a killed run
from its last checkpoint; without -o, the default output dir of ENV and MODEL, and a larger
--steps trains a finished run further. Several GPUs: `torchrun --nproc-per-node N -m rlvr.cli train ...`
(or `accelerate launch -m rlvr.cli train ...`). Full guide: docs/training.md.

The defaults are sized for a GPU: 200 steps x 256 rollouts, 256 tokens a turn, 50 evaluation
tasks a set: hours to days on a CPU. On a CPU shrink --steps,
--batch-size, --max-tokens and --eval-tasks first. Before step 1 a probe of 16 tasks checks
that sampling at -T keeps what the model does greedily (--probe-tasks 0 skips it).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import typing
import warnings
from typing import Any

from rlvr.errors import UsageError
from rlvr.train.fields import none_or

SHORT = {"model": ["-m"], "output_dir": ["-o"], "env_args": ["-a"], "temperature": ["-T"], "max_tokens": ["-t"]}
"""Short flags, the same letters as `rlvr eval`, `gen`, `play` and `sft` use for the same things
(-t: the most tokens a model turn may sample, as in `rlvr eval`)."""
ALIASES = {"overlap": ["--async"]}
"""Other spellings of a flag: `--async` / `--no-async` is `--overlap` / `--no-overlap` (the
config field cannot be named `async`, a Python keyword)."""
DEFAULTS_SHOWN = {"output_dir": "default runs/train/ENV--MODEL"}
"""The default `--help` shows where the field's own default (None) stands for a derived one."""
METAVARS = {"model": "PATH", "output_dir": "DIR"}
SWITCHES = ("bf16",)
"""Optional booleans given as `--bf16` / `--no-bf16` (unset: automatic), as in `rlvr sft`."""


def add_parser(sub: Any) -> None:
    from rlvr.train.config import CHOICES, RENAMED, field_docs, flat_fields

    p = sub.add_parser(
        "train",
        help="train a model in an environment with GRPO-family RL",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        argument_default=argparse.SUPPRESS,
        allow_abbrev=False,
    )
    p.add_argument("env", nargs="?", help="environment name (see `rlvr list`); or `env` in --config")
    p.add_argument("--config", metavar="FILE.toml", help="TOML file of config fields (flags override it)")
    p.add_argument("--resume", action="store_true", help="continue the run in output_dir from its last checkpoint")
    p.add_argument("-q", "--quiet", action="store_true", help="print nothing but errors")
    docs, types = field_docs(), {}
    groups: dict[str | None, Any] = {None: p}
    for name, section, hint, default in flat_fields():
        if name == "env":
            continue
        types[name] = hint
        if section not in groups:
            groups[section] = p.add_argument_group(f"[{section}] (TOML table)", f"{section} fields, as flags")
        shown = DEFAULTS_SHOWN.get(name) or (
            "required"
            if default is dataclasses.MISSING
            else "default: unset"
            if default is None
            else f"default {json.dumps(default)}"
        )
        if name in CHOICES:
            shown = f"one of {', '.join(CHOICES[name])}; {shown}"
        flags = [*SHORT.get(name, []), "--" + name.replace("_", "-"), *ALIASES.get(name, [])]  # short first
        kind, metavar = _parser_for(name, hint)
        if kind is bool or name in SWITCHES:
            action: dict[str, Any] = {"action": argparse.BooleanOptionalAction}
        else:
            action = {"type": kind, "metavar": METAVARS.get(name, metavar)}
        doc = docs.get(name, "").split(" (None: ")[0]  # (the default is shown once, below)
        groups[section].add_argument(*flags, dest=name, help=f"{doc} ({shown})", **action)
    for old, new in RENAMED.items():  # deprecated spellings, hidden from --help
        kind, metavar = _parser_for(new, types[new])
        p.add_argument("--" + old.replace("_", "-"), dest=old, type=kind, metavar=metavar, help=argparse.SUPPRESS)
    p.set_defaults(run=run)


def _parser_for(name: str, tp: Any) -> tuple[Any, str]:
    args = [a for a in typing.get_args(tp) if a is not type(None)]
    optional = type(None) in typing.get_args(tp)
    base = args[0] if optional and args else tp
    if base is bool:
        return (bool, "") if not optional else (none_or(_bool), "BOOL")
    origin = typing.get_origin(base)
    if origin in (dict, list):
        return _json(name, dict if origin is dict else list), "JSON"
    kind = {int: int, float: float, str: str}[base]
    metavar = {int: "N", float: "X", str: "TEXT"}[base]
    return (none_or(kind) if optional else kind), metavar


def _bool(text: str) -> bool:
    if text.lower() in ("true", "1", "yes"):
        return True
    if text.lower() in ("false", "0", "no"):
        return False
    raise ValueError(text)


def _json(name: str, kind: type) -> Any:
    def parse(text: str) -> Any:
        try:
            value = json.loads(text)
        except json.JSONDecodeError as exc:
            raise argparse.ArgumentTypeError(f"--{name.replace('_', '-')} must be JSON ({exc.msg})") from None
        if not isinstance(value, kind):
            raise argparse.ArgumentTypeError(
                f"--{name.replace('_', '-')} must be a JSON {'object' if kind is dict else 'list'}, got {text!r}"
            )
        return value

    parse.__name__ = "JSON"
    return parse


def run(args: argparse.Namespace) -> int:
    from rlvr.train.config import RENAMED, load_config, names

    known = set(names()) | set(RENAMED)
    overrides = {k: v for k, v in vars(args).items() if k in known and k != "env"}  # flags given
    if getattr(args, "env", None):
        overrides["env"] = args.env
    with warnings.catch_warnings(record=True) as notes:
        warnings.simplefilter("always", DeprecationWarning)
        cfg = load_config(getattr(args, "config", None), **overrides)
    for note in notes:  # old config names: one line each, the run goes on
        print(f"rlvr train: note: {note.message}", file=sys.stderr)
    try:
        from rlvr.train.grpo import train
    except ImportError as exc:
        raise UsageError(f"training needs the train extra: pip install 'rlvr[train]' ({exc})") from None
    train(cfg, resume=getattr(args, "resume", False), quiet=getattr(args, "quiet", False))
    return 0
