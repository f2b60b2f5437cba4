"""`TrainConfig`: every knob of `rlvr train`, from a TOML file, flags, or both.

One dataclass; each field's one-line docstring is its `--help` text. A TOML file holds the
same names at top level (`batch_size = 256`, `env_args = {min_random_move_prob = 0.2}`,
`eval_env_args = [{opponent = "random"}, {opponent = "optimal"}]`); flags override the file.
Derived values (tasks per batch, gradient-accumulation steps, the std-scaling default) are
computed in code, never stored. Bad values raise `UsageError` naming the field, the value and
the fix. This module imports no torch, so `rlvr train --help` stays fast.
"""

from __future__ import annotations

import dataclasses
import math
import tomllib
import types
import typing
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlvr.errors import UsageError
from rlvr.train import fields
from rlvr.train.best import parse as parse_keep_best
from rlvr.train.fields import LR_SCHEDULES, LoraSpec
from rlvr.train.loss_specs import SPECS, LossSpec

WEIGHT_SYNCS = ("lora", "ipc", "nccl")
"""How weights reach a vLLM server (`rlvr.train.weight_sync`)."""
SHARDINGS = ("ddp", "fsdp")
RESTART_POINTS = ("random", "all", "backtrack")
"""Which restart points of a low-scoring rollout join the buffer (`rlvr.train.restarts`)."""
CHOICES: dict[str, tuple[str, ...]] = {
    "loss": tuple(SPECS),
    "lr_schedule": LR_SCHEDULES,
    "weight_sync": WEIGHT_SYNCS,
    "sharding": SHARDINGS,
    "restart_points": RESTART_POINTS,
}
"""The values a string field may take (`--help` lists them)."""

RENAMED = {"rollouts_per_example": "group_size", "num_groups": "num_buckets"}
"""Old field names still accepted (with a DeprecationWarning) in TOML files and flags."""
RESUME_MAY_CHANGE = frozenset(
    {
        "steps",
        "probe_tasks",
        "eval_every",
        "eval_tasks",
        "eval_exact",
        "keep_best",
        "save_every",
        "output_dir",
        "device",
        "vllm_url",
        "pack_sequences",
        "gradient_checkpointing",
        "compile_blocks",
        "compile_decode",
        "deterministic",
    }
)
"""Fields a resumed run may change; any other difference from the saved config is an error."""


@dataclass
class TrainConfig:
    """Configuration of one GRPO-family training run."""

    env: str
    """environment to train in (an installed name, see `rlvr list`)"""
    model: str
    """model to start from: a local model directory or a Hugging Face id"""
    output_dir: str | None = None
    """run directory: metrics, plots, checkpoints (default runs/train/ENV--MODEL)"""
    env_args: dict[str, Any] = field(default_factory=dict)
    """arguments of the training environment, as a JSON/TOML table"""
    eval_env_args: list[dict[str, Any]] = field(default_factory=list)
    """one evaluation set per entry, each merged over env_args; empty = one set with env_args"""
    steps: int = 200
    """optimizer steps (batches of rollouts) to train for"""
    batch_size: int = 256
    """rollouts (games) per step, over all GPUs"""
    group_size: int = 8
    """rollouts of each task in a batch: the group that shares one advantage baseline"""
    num_buckets: int | None = None
    """difficulty buckets, one task each per batch; None = the environment's own (if any)"""
    lr: float = 3e-5
    """peak learning rate (AdamW, no weight decay)"""
    lr_schedule: str = "constant"
    """learning rate after warm-up: constant, or a linear or cosine decay to 0 at the last step"""
    warmup_steps: int = 0
    """steps of linear learning-rate warm-up from 0"""
    max_grad_norm: float = 1.0
    """clip the global gradient norm to this before each optimizer step"""
    temperature: float = 1.0
    """sampling temperature of training rollouts (the trained log-probs use it too)"""
    top_p: float = 1.0
    """nucleus sampling mass of training rollouts"""
    max_tokens: int = 256
    """most tokens the model may sample in one turn"""
    max_turns: int | None = None
    """most model turns per episode; None = the environment's own limit"""
    loss: str = "cispo"
    """policy loss: a row of rlvr.train.loss_specs.SPECS"""
    clip_eps: float = 0.2
    """PPO clip of the token ratio, r >= 1 - clip_eps (grpo, dr_grpo, dapo)"""
    clip_eps_high: float | None = None
    """upper PPO clip, r <= 1 + clip_eps_high (DAPO: 0.28); None = clip_eps"""
    max_is_weight: float = 4.0
    """CISPO cap on the stop-gradient importance weight"""
    kl_coef: float = 0.0
    """weight of the KL penalty to the starting model; 0 = no reference model is loaded"""
    scale_std: bool | None = None
    """divide advantages by the group's reward std; None = the loss's choice (no for dr_grpo)"""
    restart_frac: float = 0.0
    """share of each batch's tasks that restart an earlier training episode scored below restart_below, at one of its later model turns (envs that offer restart_tasks, e.g. tictactoe); 0 = none"""
    restart_below: float = 1.0
    """rollouts scoring below this offer a restart point (with restart_frac > 0)"""
    restart_points: str = "random"
    """which of a rollout's restart points join the buffer: random (one), all (the turn before its mistake is then always among them), or backtrack (the last; one turn earlier each time a restart's whole group scores below restart_below again)"""
    restart_greedy: int = 0
    """each step, also play this many games greedily (temperature 0; the batch's tasks in turn, each with a new seed), not trained on: those scoring below restart_below offer restart points too, so restarts also find the mistakes of the policy as it is evaluated (needs restart_frac > 0); 0 = none"""
    restart_unsure: float = 0.0
    """greedy probes (restart_greedy) also offer the restart point before each of their model turns whose reply had a probability below this at temperature 1 (the policy's least sure decisions), whatever the probe scored: where a rare better move is tried a whole group at a time, though no game was lost there; 0 = none"""
    restart_explore: int = 0
    """in each restart's group, this many rollouts are given their first reply, drawn from the environment's other_replies there (tictactoe: a move the teacher might make, in its words), instead of sampling it; trained like sampled replies, so a better move the policy almost never samples meets its habit in one group (local generation only); 0 = none"""
    restart_explore_weight: float = 1.0
    """the advantage on a given reply's own tokens (restart_explore) is multiplied by this; the rest of its episode keeps the whole. A reply the policy almost never samples is given far more often than sampled, and its gradient is far larger (tictactoe: 470x a sampled reply's), so below 1 it no longer sets the step's direction alone; 1 = trained as if sampled"""
    turn_credit: float = 0.0
    """weight of the env's score of each model turn (turn_rewards, e.g. the scaffold's guess game or tic-tac-toe's missed wins), normalised within the group and added to that turn's advantage alone, where the episode's reward is shared by all its turns; 0 = off"""
    ema_decay: float = 0.0
    """evaluate and export an exponential moving average of the weights, average = decay * average + (1 - decay) * weights after every step (e.g. 0.98: about the last 50 steps); training uses the current weights; 0 = off"""
    mask_truncated: bool = False
    """leave truncated rollouts (max_turns, token budget, timeout) out of the loss"""
    minibatches: int = 1
    """optimizer updates per batch: >1 splits the batch, later updates are off-policy"""
    micro_batch_size: int = 8
    """sequences per forward/backward pass (gradients accumulate over micro-batches); packed, sequences per row"""
    lora_rank: int = 0
    """LoRA rank; 0 = full fine-tuning"""
    lora_alpha: float | None = None
    """LoRA scale numerator; None = 2 * lora_rank"""
    bf16: bool | None = None
    """bfloat16 autocast of forward and backward passes (weights stay float32); unset = on for a CUDA GPU with bf16, off on CPU"""
    pack_sequences: bool | None = None
    """pack each micro-batch into one row without padding (on CUDA through torch's varlen attention); None = only where the model's attention is varlen (flash_attention_2)"""
    gradient_checkpointing: bool = False
    """recompute each transformer block's activations in the backward pass (less memory, ~1/3 more compute)"""
    compile_blocks: bool = False
    """run each transformer block through torch.compile in the update (fuses its elementwise kernels; the first updates compile; needs a C++ compiler on a CPU)"""
    compile_decode: bool = False
    """run the generation decode step's layers through torch.compile (static KV slots, also on a CPU; the first rollouts compile)"""
    seed: int = 0
    """seed of the sampler, the rollouts, and torch"""
    deterministic: bool = False
    """torch's deterministic kernels (as rlvr sft --deterministic); on a GPU two RL runs can still differ (docs/training.md, Repeatable runs)"""
    device: str | None = None
    """cpu, cuda, cuda:1 ...; None = CUDA when available (one GPU per process under torchrun)"""
    sharding: str = "ddp"
    """several processes: ddp = the whole model on each; fsdp = weights, gradients and AdamW state sharded (FSDP2)"""
    probe_tasks: int = 16
    """tasks of the step-0 check that sampling at `temperature` keeps the greedy reward and format; 0 = skip"""
    eval_every: int | None = 50
    """evaluate every N steps (and after the last); None = never"""
    eval_tasks: int = 50
    """tasks per evaluation set, one rollout each, same seeds at every evaluation"""
    eval_exact: bool = False
    """at every evaluation also play greedily over the env's whole game tree (envs that offer one, e.g. tictactoe): exact rates, no sampling"""
    keep_best: str | None = None
    """keep the model of the best evaluation in RUN_DIR/best (its step and values in keep_best.json there), e.g. min:exact/beaten_games,max:exact/random/win_pct (later entries break ties, then the later step); METRIC>=X or METRIC<=X is a floor or ceiling: one that meets it beats one that does not, e.g. exact/optimal/draw_pct>=97,max:exact/random/win_pct; a selection by the evaluation, to be reported as such; None = only final"""
    save_every: int | None = 50
    """checkpoint every N steps (and after the last); None = only after the last"""
    vllm_url: str | None = None
    """generate rollouts on the running vLLM server at this URL (http://host:8000) and push the weights to it after every step; None = in process"""
    weight_sync: str | None = None
    """how weights reach the vLLM server: lora (adapter folders it loads), ipc (CUDA IPC, trainer on its GPU), nccl (stops with an error: rlvr has no NCCL sender); None = lora with lora_rank > 0, else ipc"""

    def __post_init__(self) -> None:
        _check_types(self)
        _check_values(self)

    # ---- derived values ----------------------------------------------------------------

    @property
    def tasks_per_batch(self) -> int:
        """Distinct tasks in one batch (batch_size / group_size)."""
        return self.batch_size // self.group_size

    @property
    def loss_spec(self) -> LossSpec:
        """What the chosen loss implies (normalisation, std scaling, group filter)."""
        return SPECS[self.loss]

    @property
    def advantage_std_scaling(self) -> bool:
        return self.scale_std if self.scale_std is not None else self.loss_spec.scale_std

    @property
    def sync(self) -> str:
        """How weights reach the vLLM server (weight_sync, or its default)."""
        return self.weight_sync or ("lora" if self.lora_rank else "ipc")

    @property
    def lora(self) -> LoraSpec | None:
        """The LoRA adapters to train (None: full fine-tuning)."""
        return LoraSpec(self.lora_rank, self.lora_alpha) if self.lora_rank else None

    @property
    def eval_sets(self) -> list[dict[str, Any]]:
        """Environment arguments of each evaluation set (eval_env_args over env_args)."""
        return [{**self.env_args, **extra} for extra in self.eval_env_args] or [dict(self.env_args)]

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


# ---- building a config -------------------------------------------------------------------


def load_config(path: str | Path | None = None, **overrides: Any) -> TrainConfig:
    """A config from a TOML file (optional) with `overrides` (e.g. from flags) on top."""
    values: dict[str, Any] = {}
    if path is not None:
        values.update(renamed(read_toml(path), source=str(path)))
    values.update(renamed(overrides, source="flags"))
    return from_dict(values, source=str(path) if path else "flags")


def read_toml(path: str | Path) -> dict[str, Any]:
    p = Path(path)
    if not p.is_file():
        raise UsageError(f"config file {p} does not exist; pass a TOML file such as train.toml")
    try:
        return tomllib.loads(p.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise UsageError(f"config file {p} is not valid TOML: {exc}") from None


def renamed(values: dict[str, Any], *, source: str = "config") -> dict[str, Any]:
    """`values` with old field names (`RENAMED`) replaced by the new ones, each with a
    DeprecationWarning; both names at once is an error."""
    out = dict(values)
    for old, new in RENAMED.items():
        if old not in out:
            continue
        if new in out:
            raise UsageError(f"{source}: give {new} or {old} (its old name), not both")
        flag = source == "flags"
        shown = (f"--{old.replace('_', '-')}", f"--{new.replace('_', '-')}") if flag else (old, new)
        warnings.warn(
            f"{'' if flag else source + ': '}{shown[0]} is deprecated; use {shown[1]} (same meaning)",
            DeprecationWarning,
            stacklevel=3,
        )
        out[new] = out.pop(old)
    return out


def from_dict(values: dict[str, Any], *, source: str = "config") -> TrainConfig:
    """Build a config from a mapping of field names (old names too, see `renamed`), rejecting
    unknown names."""
    values = renamed(values, source=source)
    names = [f.name for f in dataclasses.fields(TrainConfig)]
    unknown = [k for k in values if k not in names]
    if unknown:
        raise UsageError(f"{source}: unknown config field {unknown[0]!r}; valid fields: {', '.join(names)}")
    missing = [k for k in ("env", "model") if values.get(k) in (None, "")]
    if missing:
        raise UsageError(f"{source}: {missing[0]!r} is required (an environment name and a model path)")
    return TrainConfig(**values)


def check_resume(saved: dict[str, Any], new: TrainConfig) -> None:
    """A resumed run must keep the config it started with, except `RESUME_MAY_CHANGE` (a run
    saved with old field names compares under the new ones)."""
    upgraded = {RENAMED.get(k, k): v for k, v in saved.items()}
    fields.check_resume(upgraded, new.to_dict(), RESUME_MAY_CHANGE)


def field_docs() -> dict[str, str]:
    """Each field's docstring, for `--help`."""
    return fields.field_docs(TrainConfig)


# ---- validation ----------------------------------------------------------------------------


def _check_types(cfg: TrainConfig) -> None:
    hints = typing.get_type_hints(TrainConfig)
    for f in dataclasses.fields(cfg):
        value = getattr(cfg, f.name)
        if (
            isinstance(value, int)
            and not isinstance(value, bool)
            and _accepts(hints[f.name], float)
            and not _accepts(hints[f.name], int)
        ):
            setattr(cfg, f.name, float(value))  # `lr = 1` in TOML means 1.0
            continue
        if not _is_instance(value, hints[f.name]):
            raise UsageError(f"{f.name} must be {_type_name(hints[f.name])}, got {value!r}")


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


def _check_values(c: TrainConfig) -> None:
    def need(ok: bool, message: str) -> None:
        if not ok:
            raise UsageError(message)

    for name in (
        "steps",
        "batch_size",
        "group_size",
        "max_tokens",
        "micro_batch_size",
        "minibatches",
        "eval_tasks",
    ):
        need(getattr(c, name) >= 1, f"{name} must be >= 1, got {getattr(c, name)}")
    for name in ("max_turns", "num_buckets", "eval_every", "save_every"):
        value = getattr(c, name)
        need(value is None or value >= 1, f"{name} must be >= 1 or None (unset), got {value}")
    need(
        c.group_size >= 2,
        f"group_size must be >= 2 (a group of 1 always has advantage 0), got {c.group_size}",
    )
    need(
        c.batch_size % c.group_size == 0,
        f"batch_size ({c.batch_size}) must be divisible by group_size ({c.group_size}); "
        f"e.g. batch_size = {max(1, round(c.batch_size / c.group_size)) * c.group_size}",
    )
    if c.num_buckets is not None:
        need(
            c.num_buckets <= c.tasks_per_batch,
            f"num_buckets ({c.num_buckets}) is larger than the tasks in a batch "
            f"(batch_size / group_size = {c.tasks_per_batch}); each batch holds one "
            f"task per bucket, so lower num_buckets or raise batch_size",
        )
        need(
            c.tasks_per_batch % c.num_buckets == 0,
            f"tasks per batch ({c.tasks_per_batch}) must be a multiple of num_buckets "
            f"({c.num_buckets}) so that every bucket gets the same number of tasks",
        )
    need(
        c.batch_size % c.minibatches == 0 and c.tasks_per_batch % c.minibatches == 0,
        f"minibatches ({c.minibatches}) must divide the tasks in a batch ({c.tasks_per_batch})",
    )
    for name, allowed in CHOICES.items():
        value = getattr(c, name)
        need(
            value in allowed or (name == "weight_sync" and value is None),
            f"unknown {name} {value!r}; expected one of {', '.join(allowed)}",
        )
    need(math.isfinite(c.lr) and c.lr > 0, f"lr must be > 0, got {c.lr}")
    need(c.probe_tasks >= 0, f"probe_tasks must be >= 0 (0 = no step-0 probe), got {c.probe_tasks}")
    need(c.warmup_steps >= 0, f"warmup_steps must be >= 0, got {c.warmup_steps}")
    need(c.max_grad_norm > 0, f"max_grad_norm must be > 0, got {c.max_grad_norm}")
    need(
        math.isfinite(c.temperature) and c.temperature > 0,
        f"temperature must be a finite number > 0 for training (0 = greedy makes every rollout of a group the "
        f"same), got {c.temperature}",
    )
    need(0 < c.top_p <= 1, f"top_p must be in (0, 1], got {c.top_p}")
    for name in ("clip_eps", "max_is_weight"):
        need(getattr(c, name) > 0, f"{name} must be > 0, got {getattr(c, name)}")
    need(c.clip_eps_high is None or c.clip_eps_high > 0, f"clip_eps_high must be > 0 or None, got {c.clip_eps_high}")
    need(c.kl_coef >= 0, f"kl_coef must be >= 0, got {c.kl_coef}")
    need(0 <= c.restart_frac < 1, f"restart_frac must be in [0, 1) (0 = no restarts), got {c.restart_frac}")
    need(c.restart_greedy >= 0, f"restart_greedy must be >= 0 (0 = none), got {c.restart_greedy}")
    need(
        c.restart_greedy == 0 or c.restart_frac > 0,
        f"restart_greedy = {c.restart_greedy} finds restart points, but restart_frac is 0 (no batch plays them); set restart_frac",
    )
    need(
        0 <= c.restart_unsure <= 1, f"restart_unsure must be a probability in [0, 1] (0 = none), got {c.restart_unsure}"
    )
    need(
        c.restart_unsure == 0 or c.restart_greedy > 0,
        f"restart_unsure = {c.restart_unsure} reads the greedy probes' turns, but restart_greedy is 0; set restart_greedy",
    )
    need(
        0 <= c.restart_explore < c.group_size,
        f"restart_explore = {c.restart_explore} of a group of {c.group_size}: give fewer replies than the group "
        "has rollouts (at least one plays the policy's own move), or 0",
    )
    need(
        math.isfinite(c.restart_explore_weight) and 0 <= c.restart_explore_weight <= 1,
        f"restart_explore_weight must be in [0, 1], got {c.restart_explore_weight}",
    )
    need(
        c.restart_explore == 0 or c.restart_frac > 0,
        f"restart_explore = {c.restart_explore} gives replies in restarts, but restart_frac is 0; set restart_frac",
    )
    need(
        c.restart_explore == 0 or c.vllm_url is None,
        "restart_explore gives replies as token ids, which only local generation makes; leave it at 0 with vllm_url",
    )
    need(
        math.isfinite(c.turn_credit) and c.turn_credit >= 0,
        f"turn_credit must be a finite number >= 0 (0 = off), got {c.turn_credit}",
    )
    need(0 <= c.ema_decay < 1, f"ema_decay must be in [0, 1) (0 = no average), got {c.ema_decay}")
    need(
        c.ema_decay == 0 or (c.vllm_url is None and c.sharding == "ddp"),
        "ema_decay is not supported with vllm_url or sharding = fsdp yet (the average is swapped into the "
        "local, whole model); leave ema_decay at 0 there",
    )
    need(math.isfinite(c.restart_below), f"restart_below must be a finite number, got {c.restart_below}")
    if c.keep_best is not None:
        parse_keep_best(c.keep_best)  # a UsageError names the expected form
        need(c.eval_every is not None, "keep_best needs evaluations: set eval_every")
    need(c.lora_rank >= 0, f"lora_rank must be >= 0 (0 = full fine-tuning), got {c.lora_rank}")
    need(c.lora_alpha is None or c.lora_alpha > 0, f"lora_alpha must be > 0 or None, got {c.lora_alpha}")
    need(c.lora_alpha is None or c.lora_rank > 0, "lora_alpha is set but lora_rank is 0 (full fine-tuning)")
    need(c.weight_sync is None or c.vllm_url is not None, "weight_sync is set but vllm_url is not (no server to sync)")
    need(
        (c.sync == "lora") == (c.lora_rank > 0),
        f"weight_sync = {c.sync} does not fit lora_rank = {c.lora_rank}: LoRA training syncs adapters "
        "(weight_sync = lora), full fine-tuning syncs full weights (ipc or nccl)",
    )
    need(
        c.sharding == "ddp" or c.lora_rank == 0,
        "sharding = fsdp shards full fine-tuning; LoRA's trainable weights are small, so use sharding = ddp "
        "(or lora_rank = 0)",
    )
    need(
        c.sharding == "ddp" or not c.compile_blocks,
        "compile_blocks with sharding = fsdp is not supported yet (not measured with sharded weights); use one of them",
    )
    need(
        not c.compile_decode or (c.sharding == "ddp" and c.vllm_url is None),
        "compile_decode compiles rlvr's own decode step: not with vllm_url (the server generates), and not yet "
        "with sharding = fsdp (not measured with sharded weights)",
    )
    need(
        c.sharding == "ddp" or c.vllm_url is None,
        "sharding = fsdp with vllm_url is not supported yet (the weight push reads whole tensors); "
        "use sharding = ddp with a vLLM server",
    )
