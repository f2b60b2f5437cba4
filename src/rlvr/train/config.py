"""`TrainConfig`: every knob of `rlvr train`, from a TOML file, flags, or both.

About twenty core fields, then typed sections, each a dataclass with its own validator:
`objective` (how rewards become a gradient), `restarts`, `eval`, `generation`, `compute` and
`lora`. Each field's one-line docstring is its `--help` text; the long explanations are in
docs/training.md, "Config fields in detail". A TOML file holds the core fields at top level and
a section as a table (`[restarts]` with `frac = 0.5`); flags keep one flat name each
(`--restart-frac`, `--eval-every`: `FLAT` maps them into the sections), and so do Python
keywords (`TrainConfig(env=..., model=..., restart_frac=0.5)`) and attribute reads
(`cfg.eval_every`). A flat section key in a TOML file (`restart_frac = 0.5`) still works, with a
DeprecationWarning, as the old names of `RENAMED` do. Combinations that are not supported are
one table, `UNSUPPORTED`. Derived values (tasks per batch, the std-scaling default) are computed
in code, never stored. This module imports no torch, so `rlvr train --help` stays fast.
"""

from __future__ import annotations

import copy
import dataclasses
import tomllib
import typing
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlvr.errors import UsageError
from rlvr.train import fields
from rlvr.train.config_checks import UNSUPPORTED, check_fits, check_types, check_values
from rlvr.train.config_sections import (
    CHOICES as SECTION_CHOICES,
)
from rlvr.train.config_sections import (
    RESTART_POINTS,
    SECTIONS,
    SHARDINGS,
    WEIGHT_SYNCS,
    ComputeConfig,
    EvalConfig,
    GenerationConfig,
    LoraConfig,
    ObjectiveConfig,
    RestartsConfig,
)
from rlvr.train.fields import LR_SCHEDULES, LoraSpec
from rlvr.train.loss_specs import SPECS, LossSpec

__all__ = [
    "UNSUPPORTED",
    "check_fits",
    "RESTART_POINTS",
    "SHARDINGS",
    "WEIGHT_SYNCS",
    "ComputeConfig",
    "EvalConfig",
    "GenerationConfig",
    "LoraConfig",
    "ObjectiveConfig",
    "RestartsConfig",
    "TrainConfig",
]

CHOICES: dict[str, tuple[str, ...]] = {"loss": tuple(SPECS), "lr_schedule": LR_SCHEDULES}
"""The values a string field may take, by flat name (`--help` lists them)."""
RENAMED = {"rollouts_per_example": "group_size", "num_groups": "num_buckets"}
"""Old field names still accepted (with a DeprecationWarning) in TOML files and flags."""
FLAT: dict[str, tuple[str, str]] = {
    **{name: ("objective", name) for name in ("clip_eps", "clip_eps_high", "max_is_weight", "scale_std")},
    **{name: ("objective", name) for name in ("mask_truncated", "turn_credit", "sharpen")},
    **{f"restart_{name}": ("restarts", name) for name in ("frac", "below", "points", "greedy", "unsure")},
    **{f"restart_{name}": ("restarts", name) for name in ("explore", "explore_weight")},
    **{f"eval_{name}": ("eval", name) for name in ("every", "tasks", "env_args", "exact", "temperature")},
    **{name: ("eval", name) for name in ("keep_best", "probe_tasks")},
    **{name: ("generation", name) for name in ("vllm_url", "weight_sync", "compile_decode", "overlap")},
    **{name: ("compute", name) for name in ("device", "sharding", "micro_batch_size", "micro_batch_tokens", "bf16")},
    **{name: ("compute", name) for name in ("pack_sequences", "gradient_checkpointing", "compile_blocks")},
    "lora_rank": ("lora", "rank"),
    "lora_alpha": ("lora", "alpha"),
}
"""Flat name (flag, Python keyword, old TOML key) of each section field -> (section, field)."""
CHOICES.update({name: SECTION_CHOICES[place] for name, place in FLAT.items() if place in SECTION_CHOICES})
BY_PLACE = {place: name for name, place in FLAT.items()}
"""(section, field) -> its flat name."""
RESUME_MAY_CHANGE = frozenset(
    {"steps", "save_every", "output_dir", "deterministic"}
    | {"probe_tasks", "eval_every", "eval_tasks", "eval_exact", "eval_temperature", "keep_best"}
    | {"device", "vllm_url", "pack_sequences", "gradient_checkpointing", "compile_blocks", "compile_decode"}
    | {"overlap"}
)
"""Fields (flat names) a resumed run may change; any other difference from the saved config is an error."""


@dataclass(init=False)
class TrainConfig:
    """Configuration of one GRPO-family training run."""

    env: str
    """environment to train in (an installed name, see `rlvr list`)"""
    model: str
    """model to start from: a local model directory or a Hugging Face id"""
    output_dir: str | None = None
    """run directory: metrics, plots, checkpoints (None: runs/train/ENV--MODEL)"""
    env_args: dict[str, Any] = dataclasses.field(default_factory=dict)
    """arguments of the training environment, as a JSON/TOML table"""
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
    kl_coef: float = 0.0
    """weight of the KL penalty to the starting model; 0 = no reference model is loaded"""
    minibatches: int = 1
    """optimizer updates per batch: >1 splits the batch, later updates are off-policy"""
    ema_decay: float = 0.0
    """evaluate and export a moving average of the weights (e.g. 0.98: ~50 steps); 0 = off"""
    seed: int = 0
    """seed of the sampler, the rollouts, and torch"""
    deterministic: bool = False
    """torch's deterministic kernels (as rlvr sft --deterministic); see docs/training.md"""
    save_every: int | None = 50
    """checkpoint every N steps (and after the last); None = only after the last"""
    objective: ObjectiveConfig = dataclasses.field(default_factory=ObjectiveConfig)
    """how rewards become the loss: clipping, std scaling, truncation, turn credit"""
    restarts: RestartsConfig = dataclasses.field(default_factory=RestartsConfig)
    """replay earlier low-scoring episodes from a later turn (envs that restart, e.g. tictactoe)"""
    eval: EvalConfig = dataclasses.field(default_factory=EvalConfig)
    """evaluation sets, exact evaluation, the kept best model and the step-0 probe"""
    generation: GenerationConfig = dataclasses.field(default_factory=GenerationConfig)
    """where rollouts are generated: in process, or on a vLLM server"""
    compute: ComputeConfig = dataclasses.field(default_factory=ComputeConfig)
    """device, several GPUs, micro-batches and the speed/memory switches of the update"""
    lora: LoraConfig = dataclasses.field(default_factory=LoraConfig)
    """LoRA adapters instead of full fine-tuning"""

    def __init__(self, env: str, model: str, **values: Any) -> None:
        """Core fields, sections (objects or tables) and flat section names (`FLAT`) alike."""
        values = _nested(values)
        self.env, self.model = env, model
        for f in dataclasses.fields(self)[2:]:
            if f.name in values:
                setattr(self, f.name, values.pop(f.name))
            else:
                setattr(self, f.name, f.default_factory() if callable(f.default_factory) else f.default)
        if values:
            raise UsageError(f"unknown config field {next(iter(values))!r}; valid fields: {', '.join(names())}")
        check_types(self, lambda name: name)
        for section in SECTIONS:
            check_types(getattr(self, section), lambda name, s=section: BY_PLACE[(s, name)])  # type: ignore[misc]
        check_values(self)

    def __getattr__(self, name: str) -> Any:
        """A section field under its flat name (`cfg.restart_frac` is `cfg.restarts.frac`)."""
        if name in FLAT:
            section, field = FLAT[name]
            return getattr(getattr(self, section), field)
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def __setattr__(self, name: str, value: Any) -> None:
        """A flat name sets its section's field (else `cfg.eval_every = 7` would shadow `cfg.eval.every`)."""
        if name in FLAT:
            section, field = FLAT[name]
            setattr(getattr(self, section), field, value)
        else:
            object.__setattr__(self, name, value)

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
        scale = self.objective.scale_std
        return scale if scale is not None else self.loss_spec.scale_std

    @property
    def sync(self) -> str:
        """How weights reach the vLLM server (weight_sync, or its default)."""
        return self.generation.weight_sync or ("lora" if self.lora.rank else "ipc")

    @property
    def lora_spec(self) -> LoraSpec | None:
        """The LoRA adapters to train (None: full fine-tuning)."""
        return LoraSpec(self.lora.rank, self.lora.alpha) if self.lora.rank else None

    @property
    def eval_sets(self) -> list[dict[str, Any]]:
        """Environment arguments of each evaluation set (eval_env_args over env_args)."""
        return [{**self.env_args, **extra} for extra in self.eval.env_args] or [dict(self.env_args)]

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


# ---- building a config -------------------------------------------------------------------


def names() -> list[str]:
    """Every name a config takes: the core fields, the section names and the flat names."""
    return [f.name for f in dataclasses.fields(TrainConfig)] + list(FLAT)


def load_config(path: str | Path | None = None, **overrides: Any) -> TrainConfig:
    """A config from a TOML file (optional) with `overrides` (e.g. from flags) on top."""
    values: dict[str, Any] = {}
    if path is not None:
        values = _nested(renamed(read_toml(path), source=str(path)), source=str(path))
    for key, value in renamed(overrides, source="flags").items():
        if key in FLAT:  # a flag overrides one field of the file's table
            section, name = FLAT[key]
            table = values.get(section)
            values[section] = {**_table(table), name: value}
        else:
            values[key] = value
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
    DeprecationWarning, as is a TOML file's flat section key (`restart_frac`: `[restarts] frac`);
    both names at once is an error."""
    out = dict(values)
    flag = source == "flags"
    for old, new in RENAMED.items():
        if old not in out:
            continue
        if new in out:
            raise UsageError(f"{source}: give {new} or {old} (its old name), not both")
        shown = (f"--{old.replace('_', '-')}", f"--{new.replace('_', '-')}") if flag else (old, new)
        _deprecated(f"{'' if flag else source + ': '}{shown[0]} is deprecated; use {shown[1]} (same meaning)")
        out[new] = out.pop(old)
    if not flag and source != "saved":
        for old in [k for k in out if k in FLAT]:
            section, name = FLAT[old]
            _deprecated(f"{source}: {old} is deprecated; use {name} in its [{section}] table (same meaning)")
    return out


def _deprecated(message: str) -> None:
    warnings.warn(message, DeprecationWarning, stacklevel=4)


def from_dict(values: dict[str, Any], *, source: str = "config") -> TrainConfig:
    """Build a config from a mapping of field names (old and flat names too, see `renamed`),
    rejecting unknown names."""
    values = renamed(values, source=source)
    unknown = [k for k in values if k not in names()]
    if unknown:
        raise UsageError(f"{source}: unknown config field {unknown[0]!r}; valid fields: {', '.join(names())}")
    missing = [k for k in ("env", "model") if values.get(k) in (None, "")]
    if missing:
        raise UsageError(f"{source}: {missing[0]!r} is required (an environment name and a model path)")
    return TrainConfig(**values)


def _nested(values: dict[str, Any], *, source: str = "config") -> dict[str, Any]:
    """`values` with each flat section name moved into its section, each section an object.

    A flat name overrides the field of a section object given beside it (`dataclasses.replace`
    of a config); beside a table (a TOML file's) that names the field too, it is an error."""
    out = {k: v for k, v in values.items() if k not in FLAT}
    for key in [k for k in values if k in FLAT]:
        section, name = FLAT[key]
        given = out.get(section)
        if isinstance(values.get(section), dict) and name in values[section]:
            raise UsageError(f"{source}: give {key} or {name} in [{section}], not both")
        out[section] = {**_table(given), name: values[key]}
    for section, cls in SECTIONS.items():
        if section in out:
            out[section] = _section(section, cls, out[section], source)
    return out


def _section(section: str, cls: type, given: Any, source: str) -> Any:
    """A section object from a table (unknown names refused) or as given."""
    known = [f.name for f in dataclasses.fields(cls)]
    if isinstance(given, dict):
        wrong = [k for k in given if k not in known]
        if wrong:
            raise UsageError(
                f"{source}: unknown field {wrong[0]!r} in [{section}]; valid fields: {', '.join(sorted(known))}"
            )
        return cls(**given)
    if not isinstance(given, cls):
        raise UsageError(f"{section} must be a table of {', '.join(known)}")
    return copy.copy(given)  # a copy: a config's sections are its own (`dataclasses.replace(cfg)`)


def _table(section: Any) -> dict[str, Any]:
    """A section (object, table or None) as a table."""
    if section is None:
        return {}
    if dataclasses.is_dataclass(section) and not isinstance(section, type):
        return dataclasses.asdict(section)
    return dict(section)


def flat(config: dict[str, Any]) -> dict[str, Any]:
    """A saved config (sections or the old flat layout) as flat names, old names renamed."""
    out = {RENAMED.get(k, k): v for k, v in config.items() if k not in SECTIONS}
    for section in SECTIONS:
        for name, value in (config.get(section) or {}).items():
            out[BY_PLACE.get((section, name), f"{section}.{name}")] = value
    return out


def check_resume(saved: dict[str, Any], new: TrainConfig) -> None:
    """A resumed run must keep the config it started with, except `RESUME_MAY_CHANGE` (a run
    saved with old field names, or in the old flat layout, compares under the new ones)."""
    fields.check_resume(flat(saved), flat(new.to_dict()), RESUME_MAY_CHANGE)


def flat_fields() -> list[tuple[str, str | None, Any, Any]]:
    """(flat name, section or None, type, default) of every field a flag sets, core fields first."""
    out: list[tuple[str, str | None, Any, Any]] = []
    for owner, cls in [(None, TrainConfig), *SECTIONS.items()]:
        hints = typing.get_type_hints(cls)
        for f in dataclasses.fields(cls):
            if f.name in SECTIONS:
                continue
            default = f.default_factory() if callable(f.default_factory) else f.default
            out.append((f.name if owner is None else BY_PLACE[(owner, f.name)], owner, hints[f.name], default))
    return out


def field_docs() -> dict[str, str]:
    """Each field's docstring, for `--help`: the core fields, then each section's under its flat names."""
    docs = {k: v for k, v in fields.field_docs(TrainConfig).items() if k not in SECTIONS}
    for section, cls in SECTIONS.items():
        docs.update({BY_PLACE[(section, k)]: v for k, v in fields.field_docs(cls).items()})
    return docs
