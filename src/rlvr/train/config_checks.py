"""Validation of `rlvr.train.config.TrainConfig`: field types, the core fields' values, each
section's own validator (`rlvr.train.config_sections`), the table of unsupported pairs, and
what only the environment and the number of processes tell (`check_fits`, at the start of a
run). Every failure is a `UsageError` naming the field (its flag spelling), the value and the fix.
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from collections.abc import Callable
from typing import Any

from rlvr.errors import UsageError
from rlvr.train.fields import LR_SCHEDULES
from rlvr.train.loss_specs import SPECS

TrainConfig = Any
"""`rlvr.train.config.TrainConfig`, which imports this module (so it is not imported here)."""


def need(ok: bool, message: str) -> None:
    if not ok:
        raise UsageError(message)


def check_fits(cfg: TrainConfig, env: Any, world: int) -> None:
    """What only the environment and the number of processes tell (at the start of a run)."""
    from rlvr.exact import GameTree
    from rlvr.train.protocols import TurnScored

    need(
        cfg.restarts.greedy % world == 0,
        f"restart_greedy = {cfg.restarts.greedy} greedy probes do not split over {world} processes; "
        f"make it a multiple of {world}",
    )
    need(
        not cfg.objective.turn_credit or isinstance(env, TurnScored),
        f"turn_credit = {cfg.objective.turn_credit}: environment {cfg.env!r} scores no turns (it does not define "
        "turn_rewards); set turn_credit = 0",
    )
    need(
        not cfg.eval.exact or isinstance(env, GameTree),
        f"eval_exact: environment {cfg.env!r} offers no game tree to evaluate exactly",
    )
    need(
        cfg.tasks_per_batch % (world * cfg.minibatches) == 0,
        f"the {cfg.tasks_per_batch} tasks of a batch do not split over {world} process(es) x {cfg.minibatches} "
        f"minibatch(es); make batch_size / group_size a multiple of {world * cfg.minibatches}",
    )


UNSUPPORTED: tuple[tuple[str, str, str], ...] = (
    ("restarts.explore", "generation.vllm_url", "restart_explore gives replies as token ids, which only local generation makes; leave it at 0 with vllm_url"),
    ("ema_decay", "generation.vllm_url", "ema_decay is not supported with vllm_url or sharding = fsdp yet (the average is swapped into the local, whole model); leave ema_decay at 0 there"),
    ("ema_decay", "compute.fsdp", "ema_decay is not supported with vllm_url or sharding = fsdp yet (the average is swapped into the local, whole model); leave ema_decay at 0 there"),
    ("compute.fsdp", "lora.rank", "sharding = fsdp shards full fine-tuning; LoRA's trainable weights are small, so use sharding = ddp (or lora_rank = 0)"),
    ("compute.fsdp", "compute.compile_blocks", "compile_blocks with sharding = fsdp is not supported yet (not measured with sharded weights); use one of them"),
    ("generation.compile_decode", "generation.vllm_url", "compile_decode compiles rlvr's own decode step: not with vllm_url (the server generates), and not yet with sharding = fsdp (not measured with sharded weights)"),
    ("generation.compile_decode", "compute.fsdp", "compile_decode compiles rlvr's own decode step: not with vllm_url (the server generates), and not yet with sharding = fsdp (not measured with sharded weights)"),
    ("generation.overlap", "compute.fsdp", "overlap (--async) keeps a whole copy of the weights to play the next batch with: not with sharding = fsdp yet; use sharding = ddp or leave overlap off"),
    ("compute.fsdp", "generation.vllm_url", "sharding = fsdp with vllm_url is not supported yet (the weight push reads whole tensors); use sharding = ddp with a vLLM server"),
)  # fmt: skip
"""Pairs of settings that do not work together, and what to do: each a dotted path whose value
is set (not 0, None or False)."""


def _on(cfg: TrainConfig, path: str) -> bool:
    value: Any = cfg
    for part in path.split("."):
        value = getattr(value, part)
    return bool(value)


def check_values(c: TrainConfig) -> None:
    """The core fields, each section's own validator, then the table of unsupported pairs."""
    for name in ("steps", "batch_size", "group_size", "max_tokens", "minibatches"):
        need(getattr(c, name) >= 1, f"{name} must be >= 1, got {getattr(c, name)}")
    for name in ("max_turns", "num_buckets", "save_every"):
        value = getattr(c, name)
        need(value is None or value >= 1, f"{name} must be >= 1 or None (unset), got {value}")
    _check_batch(c)
    for name, allowed in (("loss", tuple(SPECS)), ("lr_schedule", LR_SCHEDULES)):
        need(getattr(c, name) in allowed, f"unknown {name} {getattr(c, name)!r}; expected one of {', '.join(allowed)}")
    need(math.isfinite(c.lr) and c.lr > 0, f"lr must be > 0, got {c.lr}")
    need(c.warmup_steps >= 0, f"warmup_steps must be >= 0, got {c.warmup_steps}")
    need(c.max_grad_norm > 0, f"max_grad_norm must be > 0, got {c.max_grad_norm}")
    need(
        math.isfinite(c.temperature) and c.temperature > 0,
        f"temperature must be a finite number > 0 for training (0 = greedy makes every rollout of a group the "
        f"same), got {c.temperature}",
    )
    need(0 < c.top_p <= 1, f"top_p must be in (0, 1], got {c.top_p}")
    need(c.kl_coef >= 0, f"kl_coef must be >= 0, got {c.kl_coef}")
    need(0 <= c.ema_decay < 1, f"ema_decay must be in [0, 1) (0 = no average), got {c.ema_decay}")
    c.objective.check()
    c.restarts.check(c.group_size)
    c.eval.check()
    c.generation.check(c.lora.rank, c.sync)
    c.compute.check()
    c.lora.check()
    for a, b, message in UNSUPPORTED:
        need(not (_on(c, a) and _on(c, b)), message)


def _check_batch(c: TrainConfig) -> None:
    need(c.group_size >= 2, f"group_size must be >= 2 (a group of 1 always has advantage 0), got {c.group_size}")
    need(
        c.batch_size % c.group_size == 0,
        f"batch_size ({c.batch_size}) must be divisible by group_size ({c.group_size}); "
        f"e.g. batch_size = {max(1, round(c.batch_size / c.group_size)) * c.group_size}",
    )
    if c.num_buckets is not None:
        need(
            c.num_buckets <= c.tasks_per_batch,
            f"num_buckets ({c.num_buckets}) is larger than the tasks in a batch (batch_size / group_size = "
            f"{c.tasks_per_batch}); each batch holds one task per bucket, so lower num_buckets or raise batch_size",
        )
        need(
            c.tasks_per_batch % c.num_buckets == 0,
            f"tasks per batch ({c.tasks_per_batch}) must be a multiple of num_buckets ({c.num_buckets}) so that "
            "every bucket gets the same number of tasks",
        )
    need(
        c.batch_size % c.minibatches == 0 and c.tasks_per_batch % c.minibatches == 0,
        f"minibatches ({c.minibatches}) must divide the tasks in a batch ({c.tasks_per_batch})",
    )


# ---- types ---------------------------------------------------------------------------------


def check_types(obj: Any, shown: Callable[[str], str]) -> None:
    """Every field of the dataclass `obj` (sections aside) has its declared type; an int
    where a float is declared becomes that float (`lr = 1` in TOML means 1.0). `shown(name)`:
    the field's name in the message."""
    hints = typing.get_type_hints(type(obj))
    for f in dataclasses.fields(obj):
        value, tp = getattr(obj, f.name), hints[f.name]
        if isinstance(value, int) and not isinstance(value, bool) and _accepts(tp, float) and not _accepts(tp, int):
            setattr(obj, f.name, float(value))
        elif dataclasses.is_dataclass(value) and isinstance(value, tp):
            continue  # a section: checked on its own
        elif not _is_instance(value, tp):
            raise UsageError(f"{shown(f.name)} must be {_type_name(tp)}, got {value!r}")


def _accepts(tp: Any, kind: type) -> bool:
    return tp is kind or kind in typing.get_args(tp)


def _is_instance(value: Any, tp: Any) -> bool:
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        return any(_is_instance(value, arg) for arg in typing.get_args(tp))
    if tp is type(None):
        return value is None
    if tp is Any:
        return True
    if origin is dict:
        return isinstance(value, dict) and all(isinstance(k, str) for k in value)
    if origin is list:
        (item,) = typing.get_args(tp)
        return isinstance(value, list) and all(_is_instance(v, item) for v in value)
    if tp is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if tp is float:
        return isinstance(value, float)
    return isinstance(value, tp)


def _type_name(tp: Any) -> str:
    text = str(tp).replace("typing.", "")
    return {
        "<class 'int'>": "an integer",
        "<class 'float'>": "a number",
        "<class 'str'>": "a string",
        "<class 'bool'>": "true or false",
    }.get(text, text)
