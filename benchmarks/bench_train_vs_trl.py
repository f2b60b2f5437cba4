"""Training throughput: `rlvr train` against TRL's GRPOTrainer, same model, same task, one GPU.

Run (GPU, TRL importable):
    python benchmarks/bench_train_vs_trl.py --preset small --batch-size 256 --group-size 8 --steps 8
CPU smoke check (tiny model, a couple of steps):
    python benchmarks/bench_train_vs_trl.py --device cpu --preset tiny --batch-size 16 --group-size 4 \
        --steps 2 --warmup 1 --max-tokens 8

Both trainers get: the same randomly initialised tiny Qwen3-architecture model (`rlvr.models`),
the same single-turn task (64 prompts; reward = share of vowels in the reply, computed by the
same function), the same batch (`--batch-size` completions per optimizer step, groups of
`--group-size` completions per prompt), the same sampling (temperature 1, top-p 1,
`--max-tokens` new tokens), one optimizer step per batch (TRL: num_iterations = 1), the PPO-clip
GRPO loss, no KL term, float32 weights with bfloat16 autocast on CUDA, and transformers-based
generation (rlvr: LocalModel's batched decode loop, on CUDA over static KV slots with a
CUDA-graph step; TRL: `model.generate`, no vLLM). `--dynamic-cache` also measures rlvr with
the transformers forward over a DynamicCache (`LocalModel(static_cache=False)`).

Measured after `--warmup` steps, over `--steps` steps: wall seconds per optimizer step,
rollouts (completions) per second, completion tokens per second and total tokens per second
(prompt + completion, what the training forward/backward processes). Results are printed and
written as JSON to `--out`. Without TRL installed, only rlvr is measured.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import itertools
import json
import platform
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

PROMPTS = [f"Write vowels, number {i}." for i in range(64)]


def vowel_share_text(text: str) -> float:
    """Share of vowels among the characters of a reply (0 for an empty reply).

    >>> vowel_share_text("aeb")
    0.6666666666666666
    """
    return sum(ch in "aeiou" for ch in text) / max(len(text), 1)


# ---- rlvr ------------------------------------------------------------------------------------


def run_rlvr(
    model_dir: Path, args: argparse.Namespace, work: Path, static_cache: bool | None = None, **overrides: Any
) -> dict[str, Any]:
    """rlvr's trainer on the vowel task (`overrides`: more `TrainConfig` fields)."""
    import rlvr.train.generation
    from rlvr import Rubric, SingleTurnEnv
    from rlvr.clients.local import LocalModel
    from rlvr.train.config import TrainConfig
    from rlvr.train.grpo import train

    def vowel_share(completion: list[dict[str, Any]]) -> float:
        return vowel_share_text(str(completion[-1]["content"]) if completion else "")

    def make_env(**_: Any) -> SingleTurnEnv:
        tasks = [{"id": str(i), "question": q} for i, q in enumerate(PROMPTS)]
        return SingleTurnEnv(tasks, rubric=Rubric([vowel_share]))

    cfg = TrainConfig(
        env="vowels",
        model=str(model_dir),
        output_dir=str(work / ("rlvr" if static_cache is None else "rlvr-dynamic")),
        steps=args.warmup + args.steps,
        batch_size=args.batch_size,
        group_size=args.group_size,
        lr=args.lr,
        max_tokens=args.max_tokens,
        loss="grpo",
        micro_batch_size=args.micro_batch_size,
        bf16=args.device == "cuda",
        eval_every=None,
        save_every=None,
        seed=0,
        **overrides,
    )
    if static_cache is False:  # the trainer's LocalModel over transformers' DynamicCache
        rlvr.train.generation.LocalModel = functools.partial(LocalModel, static_cache=False)  # type: ignore[misc]
    try:
        history = train(cfg, make_env=make_env, quiet=True, plots=False)
    finally:
        rlvr.train.generation.LocalModel = LocalModel  # type: ignore[misc]
    timed = history[args.warmup :]
    seconds = [m["time/step"] for m in timed]
    return _summary(
        "rlvr" if static_cache is None else "rlvr dynamic-cache",
        seconds,
        args.batch_size,
        completion_tokens=[m["rollout/completion_tokens"] * args.batch_size for m in timed],
        total_tokens=[m["tokens/processed"] for m in timed],
        rewards=[m["reward/mean"] for m in history],
        phases={
            "rollouts_s": statistics.fmean(m["time/rollouts"] for m in timed),
            "train_s": statistics.fmean(m["time/train"] for m in timed),
            "train_tokens_per_s": statistics.fmean(m["throughput/train_tokens_per_s"] for m in timed),
            "train_s_per_step": [m["time/train"] for m in timed],  # a step that compiles again stands out
            **(
                {"train_mfu_per_step": [m["throughput/train_mfu"] for m in timed]}
                if "throughput/train_mfu" in timed[0]
                else {}
            ),
            **(
                {"train_mfu": statistics.fmean(m["throughput/train_mfu"] for m in timed)}
                if "throughput/train_mfu" in timed[0]
                else {}
            ),
        },
    )


# ---- TRL -------------------------------------------------------------------------------------


def run_trl(model_dir: Path, args: argparse.Namespace, work: Path) -> dict[str, Any]:
    import torch
    import trl
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback

    def vowel_share(completions: list[Any], **_: Any) -> list[float]:
        texts = [c[-1]["content"] if isinstance(c, list) else str(c) for c in completions]
        return [vowel_share_text(t) for t in texts]

    class Clock(TrainerCallback):
        def __init__(self) -> None:
            self.marks: list[float] = []

        def on_step_begin(self, *a: Any, **k: Any) -> None:
            if not self.marks:
                self.marks.append(time.perf_counter())

        def on_step_end(self, *a: Any, **k: Any) -> None:
            if torch.cuda.is_available():
                torch.cuda.synchronize()
            self.marks.append(time.perf_counter())

    steps = args.warmup + args.steps
    rows = [{"prompt": [{"role": "user", "content": q}]} for q in PROMPTS]
    dataset = Dataset.from_list(rows * (args.batch_size * steps // len(rows) + args.group_size))
    wanted = {
        "output_dir": str(work / "trl"),
        "per_device_train_batch_size": args.micro_batch_size,
        "gradient_accumulation_steps": args.batch_size // args.micro_batch_size,
        "num_generations": args.group_size,
        "max_completion_length": args.max_tokens,
        "max_steps": steps,
        "learning_rate": args.lr,
        "temperature": 1.0,
        "top_p": 1.0,
        "beta": 0.0,
        "num_iterations": 1,
        "loss_type": "grpo",
        "epsilon": 0.2,
        "scale_rewards": True,
        "use_vllm": False,
        "bf16": args.device == "cuda",
        "use_cpu": args.device == "cpu",
        "logging_steps": 1,
        "report_to": "none",
        "save_strategy": "no",
        "disable_dropout": True,
        "seed": 0,
        "gradient_checkpointing": getattr(args, "gradient_checkpointing", False),
        "lr_scheduler_type": "constant",
        "max_grad_norm": 1.0,
        "weight_decay": 0.0,
        "shuffle_dataset": False,
    }
    known = {f.name for f in dataclasses.fields(trl.GRPOConfig)}
    config = trl.GRPOConfig(**{k: v for k, v in wanted.items() if k in known})
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    tokenizer.padding_side = "left"
    clock = Clock()
    trainer = trl.GRPOTrainer(
        model=model,
        reward_funcs=[vowel_share],
        args=config,
        train_dataset=dataset,
        processing_class=tokenizer,
        callbacks=[clock],
    )
    trainer.train()
    seconds = [b - a for a, b in itertools.pairwise(clock.marks)][args.warmup :]
    logs = [h for h in trainer.state.log_history if "num_tokens" in h][:steps]
    tokens = [logs[0]["num_tokens"]] + [b["num_tokens"] - a["num_tokens"] for a, b in itertools.pairwise(logs)]
    lengths = [h.get("completions/mean_length", float("nan")) * args.batch_size for h in logs]
    rewards = [h.get("reward", float("nan")) for h in logs]
    return _summary(
        f"trl {trl.__version__}",
        seconds,
        args.batch_size,
        completion_tokens=lengths[args.warmup :],
        total_tokens=tokens[args.warmup :],
        rewards=rewards,
    )


# ---- shared ----------------------------------------------------------------------------------


def _summary(
    name: str,
    seconds: list[float],
    batch: int,
    *,
    completion_tokens: list[float],
    total_tokens: list[float],
    rewards: list[float],
    phases: dict[str, float] | None = None,
) -> dict[str, Any]:
    wall = sum(seconds)
    return {
        "trainer": name,
        "steps_timed": len(seconds),
        "seconds_per_step": wall / max(len(seconds), 1),
        "rollouts_per_s": batch * len(seconds) / wall,
        "completion_tokens_per_s": sum(completion_tokens) / wall,
        "total_tokens_per_s": sum(total_tokens) / wall,
        "reward_first_last": [rewards[0], rewards[-1]] if rewards else [],
        **({"phases": phases} if phases else {}),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--preset", default="small", help="rlvr.models preset: tiny (~1M) or small (~18M)")
    parser.add_argument("--model", default=None, help="use this model folder instead of building one")
    parser.add_argument("--device", default=None, help="cuda or cpu (default: cuda when available)")
    parser.add_argument("--batch-size", type=int, default=256, help="completions per optimizer step")
    parser.add_argument("--group-size", "--group", type=int, default=8, help="completions per prompt")
    parser.add_argument("--micro-batch-size", type=int, default=64, help="sequences per forward/backward")
    parser.add_argument("--max-tokens", type=int, default=64, help="new tokens per completion")
    parser.add_argument("--steps", type=int, default=8, help="timed optimizer steps")
    parser.add_argument("--warmup", type=int, default=2, help="untimed steps first")
    parser.add_argument("--lr", type=float, default=1e-5)
    parser.add_argument("--only", choices=["rlvr", "trl"], default=None, help="measure one trainer")
    parser.add_argument(
        "--dynamic-cache",
        action="store_true",
        help="also measure rlvr with LocalModel(static_cache=False): decoding over "
        "transformers' DynamicCache instead of static KV slots and CUDA graphs",
    )
    parser.add_argument("--out", default="benchmarks/results/train_vs_trl.json", help="JSON results file")
    args = parser.parse_args()

    import torch

    args.device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if args.batch_size % args.micro_batch_size:
        args.micro_batch_size = args.batch_size
    if args.device == "cpu":
        torch.set_num_threads(max(1, torch.get_num_threads()))
    work = Path(tempfile.mkdtemp(prefix="bench_train_"))
    if args.model:
        model_dir = Path(args.model)
    else:
        from transformers import AutoModelForCausalLM

        from rlvr.models import build_tiny_model, count_parameters

        model_dir = build_tiny_model(work / "model", preset=args.preset, seed=0)
        print(f"model: {args.preset}, {count_parameters(AutoModelForCausalLM.from_pretrained(model_dir)):,} parameters")
    try:
        import trl  # noqa: F401

        have_trl = True
    except ImportError:
        have_trl = False
        print("trl is not importable: measuring rlvr only")
    results = []
    if args.only in (None, "rlvr"):
        results.append(run_rlvr(model_dir, args, work))
        if args.device == "cuda":
            torch.cuda.empty_cache()
        if args.dynamic_cache:
            results.append(run_rlvr(model_dir, args, work, static_cache=False))
    if args.only in (None, "trl") and have_trl:
        results.append(run_trl(model_dir, args, work))
    device = torch.cuda.get_device_name() if args.device == "cuda" else platform.processor() or "cpu"
    print(
        f"\ndevice: {device}; batch {args.batch_size} = {args.batch_size // args.group_size} prompts x {args.group_size}, "
        f"{args.max_tokens} new tokens, {args.steps} timed steps after {args.warmup}"
    )
    print(f"{'trainer':<14}{'s/step':>10}{'rollouts/s':>12}{'compl tok/s':>14}{'total tok/s':>14}")
    for r in results:
        print(
            f"{r['trainer']:<14}{r['seconds_per_step']:>10.3f}{r['rollouts_per_s']:>12.1f}"
            f"{r['completion_tokens_per_s']:>14.0f}{r['total_tokens_per_s']:>14.0f}"
        )
    trl_rows = [r for r in results if r["trainer"].startswith("trl")]
    for r in results:
        if trl_rows and not r["trainer"].startswith("trl"):
            print(
                f"{r['trainer']} / TRL rollouts per second: {r['rollouts_per_s'] / trl_rows[0]['rollouts_per_s']:.2f}x"
            )
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"device": device, "args": vars(args), "results": results}, indent=2) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
