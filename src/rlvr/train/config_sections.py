"""The sections of `rlvr.train.config.TrainConfig`: one dataclass and one short validator each.

A section is a TOML table (`[restarts]`, `frac = 0.5`); on the command line each field keeps
its flat flag (`--restart-frac`, see `rlvr.train.config.FLAT`), which the error messages name.
Settings of two sections that do not work together are `rlvr.train.config.UNSUPPORTED`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from rlvr.train.best import parse as parse_keep_best
from rlvr.train.config_checks import need

WEIGHT_SYNCS = ("lora", "ipc", "nccl")
"""How weights reach a vLLM server (`rlvr.train.weight_sync`)."""
SHARDINGS = ("ddp", "fsdp")
RESTART_POINTS = ("random", "all", "backtrack")
"""Which restart points of a low-scoring rollout join the buffer (`rlvr.train.restarts`)."""


@dataclass
class ObjectiveConfig:
    """How rewards become the loss (TOML table `[objective]`)."""

    clip_eps: float = 0.2
    """PPO clip of the token ratio, r >= 1 - clip_eps (grpo, dr_grpo, dapo)"""
    clip_eps_high: float | None = None
    """upper PPO clip, r <= 1 + clip_eps_high (DAPO: 0.28); None = clip_eps"""
    max_is_weight: float = 4.0
    """CISPO cap on the stop-gradient importance weight"""
    scale_std: bool | None = None
    """divide advantages by the group's reward std; None = the loss's choice (no for dr_grpo)"""
    mask_truncated: bool = False
    """leave truncated rollouts (max_turns, token budget, timeout) out of the loss"""
    turn_credit: float = 0.0
    """weight of the env's per-turn scores (turn_rewards) added to each turn's advantage; 0 = off"""
    sharpen: float = 0.0
    """weight of each rollout's own log-prob, less its group's mean, added to its advantage; 0 = off"""

    def check(self) -> None:
        for name in ("clip_eps", "max_is_weight"):
            need(getattr(self, name) > 0, f"{name} must be > 0, got {getattr(self, name)}")
        high = self.clip_eps_high
        need(high is None or high > 0, f"clip_eps_high must be > 0 or None, got {high}")
        need(
            math.isfinite(self.turn_credit) and self.turn_credit >= 0,
            f"turn_credit must be a finite number >= 0 (0 = off), got {self.turn_credit}",
        )
        need(
            math.isfinite(self.sharpen) and self.sharpen >= 0,
            f"sharpen must be a finite number >= 0 (0 = off), got {self.sharpen}",
        )


@dataclass
class RestartsConfig:
    """Replays of earlier low-scoring episodes from a later turn (TOML table `[restarts]`)."""

    frac: float = 0.0
    """share of each batch's tasks that restart an episode scored below restart_below; 0 = none"""
    below: float = 1.0
    """rollouts scoring below this offer a restart point (with restart_frac > 0)"""
    points: str = "random"
    """which restart points of a rollout join the buffer: random (one), all, or backtrack"""
    greedy: int = 0
    """greedy games a step (not trained on) whose low scores offer restart points too; 0 = none"""
    unsure: float = 0.0
    """greedy probes also offer the turns whose reply had a probability below this; 0 = none"""
    explore: int = 0
    """rollouts of each restart's group given their first reply from other_replies; 0 = none"""
    explore_weight: float = 1.0
    """multiplies the advantage on a given reply's own tokens (restart_explore); 1 = as sampled"""

    def check(self, group_size: int) -> None:
        need(0 <= self.frac < 1, f"restart_frac must be in [0, 1) (0 = no restarts), got {self.frac}")
        need(math.isfinite(self.below), f"restart_below must be a finite number, got {self.below}")
        need(
            self.points in RESTART_POINTS,
            f"unknown restart_points {self.points!r}; expected one of {', '.join(RESTART_POINTS)}",
        )
        need(self.greedy >= 0, f"restart_greedy must be >= 0 (0 = none), got {self.greedy}")
        need(
            self.greedy == 0 or self.frac > 0,
            f"restart_greedy = {self.greedy} finds restart points, but restart_frac is 0 (no batch plays them); "
            "set restart_frac",
        )
        need(0 <= self.unsure <= 1, f"restart_unsure must be a probability in [0, 1] (0 = none), got {self.unsure}")
        need(
            self.unsure == 0 or self.greedy > 0,
            f"restart_unsure = {self.unsure} reads the greedy probes' turns, but restart_greedy is 0; "
            "set restart_greedy",
        )
        need(
            0 <= self.explore < group_size,
            f"restart_explore = {self.explore} of a group of {group_size}: give fewer replies than the group "
            "has rollouts (at least one plays the policy's own move), or 0",
        )
        weight = self.explore_weight
        need(math.isfinite(weight) and 0 <= weight <= 1, f"restart_explore_weight must be in [0, 1], got {weight}")
        need(
            self.explore == 0 or self.frac > 0,
            f"restart_explore = {self.explore} gives replies in restarts, but restart_frac is 0; set restart_frac",
        )


@dataclass
class EvalConfig:
    """Evaluations during training and the step-0 probe (TOML table `[eval]`)."""

    every: int | None = 50
    """evaluate every N steps (and after the last); None = never"""
    tasks: int = 50
    """tasks per evaluation set, one rollout each, same seeds at every evaluation"""
    env_args: list[dict[str, Any]] = field(default_factory=list)
    """one evaluation set per entry, each merged over env_args; empty = one set with env_args"""
    exact: bool = False
    """also play greedily over the env's whole game tree (envs that offer one, e.g. tictactoe)"""
    temperature: float | None = None
    """sampling temperature of the evaluation sets; None = the training temperature, 0 = greedy"""
    keep_best: str | None = None
    """keep the best evaluation's model in RUN_DIR/best, e.g. max:exact/random/win_pct; None = off"""
    probe_tasks: int = 16
    """tasks of the step-0 check that sampling at `temperature` keeps the greedy reward; 0 = skip"""

    def check(self) -> None:
        need(self.tasks >= 1, f"eval_tasks must be >= 1, got {self.tasks}")
        need(
            self.temperature is None or (math.isfinite(self.temperature) and self.temperature >= 0),
            f"eval_temperature must be a finite number >= 0 (0 = greedy), got {self.temperature}",
        )
        need(self.every is None or self.every >= 1, f"eval_every must be >= 1 or None (unset), got {self.every}")
        need(self.probe_tasks >= 0, f"probe_tasks must be >= 0 (0 = no step-0 probe), got {self.probe_tasks}")
        if self.keep_best is not None:
            parse_keep_best(self.keep_best)  # a UsageError names the expected form
            need(self.every is not None, "keep_best needs evaluations: set eval_every")


@dataclass
class GenerationConfig:
    """Where the rollouts are generated (TOML table `[generation]`)."""

    vllm_url: str | None = None
    """generate on the vLLM server at this URL, pushing the weights after every step; None = in process"""
    weight_sync: str | None = None
    """how weights reach the vLLM server: lora, ipc or nccl; None = lora with LoRA, else ipc"""
    compile_decode: bool = False
    """run the local decode step's layers through torch.compile (the first rollouts compile)"""
    overlap: bool = False
    """play the next batch during this batch's update, on the weights before it (one step stale)"""

    def check(self, lora_rank: int, sync: str) -> None:
        """`sync`: the weight sync in use (`weight_sync` or its default)."""
        need(
            self.weight_sync in (None, *WEIGHT_SYNCS),
            f"unknown weight_sync {self.weight_sync!r}; expected one of {', '.join(WEIGHT_SYNCS)}",
        )
        need(
            self.weight_sync is None or self.vllm_url is not None,
            "weight_sync is set but vllm_url is not (no server to sync)",
        )
        need(
            (sync == "lora") == (lora_rank > 0),
            f"weight_sync = {sync} does not fit lora_rank = {lora_rank}: LoRA training syncs adapters "
            "(weight_sync = lora), full fine-tuning syncs full weights (ipc or nccl)",
        )


@dataclass
class ComputeConfig:
    """Devices, several GPUs and the speed/memory switches of the update (TOML table `[compute]`)."""

    device: str | None = None
    """cpu, cuda, cuda:1 ...; None = CUDA when available (one GPU per process under torchrun)"""
    sharding: str = "ddp"
    """several processes: ddp = the whole model on each; fsdp = weights, gradients, AdamW state sharded"""
    micro_batch_size: int = 8
    """sequences per forward/backward pass (gradients accumulate over micro-batches)"""
    micro_batch_tokens: int | None = None
    """also cut a micro-batch at this many tokens (padded: rows x longest); unset = by rows only"""
    bf16: bool | None = None
    """bfloat16 autocast of the passes (weights stay float32); unset = on for a CUDA GPU with bf16"""
    pack_sequences: bool | None = None
    """pack each micro-batch into one row without padding; None = where attention is varlen"""
    gradient_checkpointing: bool = False
    """recompute each block's activations in the backward pass (less memory, ~1/3 more compute)"""
    compile_blocks: bool = False
    """run each transformer block through torch.compile in the update (needs a C++ compiler on a CPU)"""

    @property
    def fsdp(self) -> bool:
        return self.sharding == "fsdp"

    def check(self) -> None:
        need(self.sharding in SHARDINGS, f"unknown sharding {self.sharding!r}; expected one of {', '.join(SHARDINGS)}")
        need(self.micro_batch_size >= 1, f"micro_batch_size must be >= 1, got {self.micro_batch_size}")
        tokens = self.micro_batch_tokens
        need(tokens is None or tokens >= 1, f"micro_batch_tokens must be >= 1 (or unset), got {tokens}")


@dataclass
class LoraConfig:
    """LoRA adapters instead of full fine-tuning (TOML table `[lora]`)."""

    rank: int = 0
    """LoRA rank; 0 = full fine-tuning"""
    alpha: float | None = None
    """LoRA scale numerator; None = 2 * lora_rank"""

    def check(self) -> None:
        need(self.rank >= 0, f"lora_rank must be >= 0 (0 = full fine-tuning), got {self.rank}")
        need(self.alpha is None or self.alpha > 0, f"lora_alpha must be > 0 or None, got {self.alpha}")
        need(self.alpha is None or self.rank > 0, "lora_alpha is set but lora_rank is 0 (full fine-tuning)")


SECTIONS: dict[str, type] = {
    "objective": ObjectiveConfig,
    "restarts": RestartsConfig,
    "eval": EvalConfig,
    "generation": GenerationConfig,
    "compute": ComputeConfig,
    "lora": LoraConfig,
}
"""Each section's name (its TOML table and its attribute of the config) and dataclass."""
CHOICES: dict[tuple[str, str], tuple[str, ...]] = {
    ("restarts", "points"): RESTART_POINTS,
    ("generation", "weight_sync"): WEIGHT_SYNCS,
    ("compute", "sharding"): SHARDINGS,
}
"""The values a section's string field may take (`--help` lists them)."""
