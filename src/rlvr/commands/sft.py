"""`rlvr sft --model PATH --data FILE -o DIR`: supervised fine-tuning on chat conversations.

Trains on the assistant turns only. DATA is JSONL, one `{"messages": [...]}` a line, as
written by `rlvr gen`; or .json (a list of objects), .parquet, or a folder from
`Dataset.save_to_disk`, whose rows are written to DIR/data.jsonl first. DIR gets metrics.csv,
tensorboard/, plots/ (loss curves), checkpoints/ and, at the end, final/: a plain model folder
for `rlvr eval -m DIR/final` or `rlvr train --model DIR/final`. `--resume` continues a killed run from its last checkpoint.
LoRA: `--lora-rank 8` (the merged model is saved). Flags mean what they mean in `rlvr train`:
-o the run folder (old spelling --output-dir), --steps (old spelling --max-steps).
"""

from __future__ import annotations

import argparse
import dataclasses
import typing
from typing import Any

from rlvr.errors import UsageError
from rlvr.train.fields import LR_SCHEDULES, none_or

_FLAGS = {
    "model": ["-m", "--model"],
    "data": ["-d", "--data"],
    "output_dir": ["-o", "--output"],
    "max_steps": ["--steps"],
}
"""Flags other than `--field-name`: short ones first, so that usage lines show them."""
_OLD = {"output_dir": "--output-dir", "max_steps": "--max-steps"}
"""Earlier spellings, which still work with a note."""
_METAVAR = {"model": "PATH", "data": "FILE", "output_dir": "DIR", "device": "DEVICE", "lr_schedule": "NAME"}


def add_parser(sub: Any) -> None:
    from rlvr.deprecation import renamed_flag
    from rlvr.train.sft_config import SFTConfig, field_docs

    p = sub.add_parser(
        "sft",
        help="supervised fine-tuning on a chat dataset (assistant tokens only)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    docs = field_docs()
    hints = typing.get_type_hints(SFTConfig)
    for f in dataclasses.fields(SFTConfig):
        flags = _FLAGS.get(f.name, ["--" + f.name.replace("_", "-")])
        required = f.default is dataclasses.MISSING
        shown = "required" if required else "default: unset" if f.default is None else f"default {f.default}"
        if f.name == "lr_schedule":  # listed as `rlvr train --help` lists it
            shown = f"one of {', '.join(LR_SCHEDULES)}; {shown}"
        help_text = f"{docs.get(f.name, '')} ({shown})"
        base, optional = _base_type(hints[f.name])
        if base is bool:
            p.add_argument(
                *flags,
                dest=f.name,
                action=argparse.BooleanOptionalAction,
                default=f.default,
                help=help_text,
            )
        else:
            kind = none_or(base) if optional else base
            metavar = _METAVAR.get(f.name) or {int: "N", float: "X", str: "TEXT"}[base]
            p.add_argument(
                *flags,
                dest=f.name,
                type=kind,
                required=required and f.name not in _OLD,  # (an old spelling may give it: checked in run)
                default=None if required else f.default,
                metavar=metavar,
                help=help_text,
            )
            if f.name in _OLD:
                renamed_flag(p, _OLD[f.name], flags[-1], dest=f.name, type=kind, metavar=metavar)
    p.add_argument("--resume", action="store_true", help="continue the run in the output directory")
    p.add_argument("-q", "--quiet", action="store_true", help="print nothing but errors")
    p.set_defaults(run=run)


def _base_type(tp: Any) -> tuple[Any, bool]:
    args = [a for a in typing.get_args(tp) if a is not type(None)]
    return (args[0], True) if args and len(args) < len(typing.get_args(tp)) else (tp, False)


def run(args: argparse.Namespace) -> int:
    from rlvr.train.sft_config import SFTConfig

    values = {f.name: getattr(args, f.name) for f in dataclasses.fields(SFTConfig)}
    if values["output_dir"] is None:
        raise UsageError("-o/--output DIR is required: the run folder (it gets metrics, checkpoints and final/)")
    cfg = SFTConfig(**values)
    try:
        from rlvr.train.sft import train_sft
    except ImportError as exc:
        raise UsageError(f"rlvr sft needs the train extra: pip install 'rlvr[train]' ({exc})") from None
    from rlvr.commands.sft_source import as_jsonl  # Parquet, JSON, a saved dataset: as JSONL

    cfg = dataclasses.replace(cfg, data=as_jsonl(cfg.data, cfg.output_dir))
    result = train_sft(cfg, resume=args.resume, quiet=args.quiet)
    return 0 if result.final_dir.exists() else 1
