"""Several GPUs of one host: data-parallel scaling (DDP) and the FSDP2 loss-curve check.

Commands (scripts/multigpu_bench.sh runs them with the settings docs/training.md reports):

    python benchmarks/bench_multigpu.py build --shape 0.6b --out /tmp/m06
    python benchmarks/bench_multigpu.py scaling --model /tmp/m06 --gpus 1 2 --repeats 3
    python benchmarks/bench_multigpu.py fsdp-check --model /tmp/m4b --steps 5

- `build`: a randomly initialised model of a Qwen3 shape (`SHAPES`: the layer sizes and the
  151,936-token vocabulary of Qwen3-0.6B, -1.7B, -4B; nothing is downloaded) with rlvr's small
  tokenizer (ids it does not know decode to nothing), saved as a model folder.
- Workload: `rlvr train` (its `train()`) on a single-turn task of 256 prompts; reward = length
  of the decodable reply text / 100 (random weights still give groups some spread). Random
  weights rarely sample EOS, so every reply runs to `--max-tokens`: the same work each step.
- `scaling`: the same per-GPU batch on 1 and N GPUs (`torchrun --nproc-per-node N`), `--steps`
  timed steps after `--warmup`, each setting `--repeats` times. Rollouts/s of a step = all
  ranks' rollouts / its wall time (generation + update); efficiency(N) = rollouts/s(N) /
  (N x rollouts/s(1)), from the medians over repeats.
- `fsdp-check`: the first `--steps` steps of the same run as FSDP2 on 2 GPUs, DDP on 2 GPUs
  (`--ddp`) and one GPU (`--one-gpu`), float32 without TF32 (NVIDIA_TF32_OVERRIDE=0), every
  side and every step training on the same rollouts (`--replay`, the default: the first run's
  first step plays them, the others read them back), so that the sides differ only by
  summation order. Without it each side samples its own: a random model's next-token
  distribution is near uniform over 151,936 tokens (entropy 11.42 of 11.93 nats at 4B, 6.6 at
  `--temperature` 0.3), so float noise between the sides' batch shapes, and after the first
  update between their weights, changes which tokens they sample, and the policy loss (a sum
  of advantage-weighted terms near 0) with them; prints loss, gradient norm, reward and peak memory per
  step, and checks that the FSDP run's final folder loads with `from_pretrained`. A side that
  runs out of memory is reported as such.

Every child run has a time limit (`--timeout`), and a command stops launching runs once
`--budget` seconds have passed, printing what it has.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

SHAPES: dict[str, dict[str, Any]] = {  # Qwen3 configs: hidden, layers, heads, kv heads, MLP width
    "0.6b": {"hidden_size": 1024, "num_hidden_layers": 28, "num_attention_heads": 16, "intermediate_size": 3072},
    "1.7b": {"hidden_size": 2048, "num_hidden_layers": 28, "num_attention_heads": 16, "intermediate_size": 6144},
    "4b": {"hidden_size": 2560, "num_hidden_layers": 36, "num_attention_heads": 32, "intermediate_size": 9728},
    "test": {  # a CPU smoke test of this script
        "hidden_size": 64,
        "num_hidden_layers": 2,
        "num_attention_heads": 2,
        "intermediate_size": 128,
        "num_key_value_heads": 2,
        "head_dim": 32,
    },
}
PROMPTS = [f"Write a long reply, number {i}." for i in range(256)]


# ---- build ------------------------------------------------------------------------------------


def build(shape: str, out: Path, vocab: int, seed: int) -> None:
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    from rlvr.models.tiny import count_parameters, default_corpus, sampling_generation_config
    from rlvr.models.tokenizer import ENDOFTEXT, IM_END, train_tokenizer

    tokenizer = train_tokenizer(default_corpus(), vocab_size=4096, model_max_length=4096)
    pad, eos = int(tokenizer.convert_tokens_to_ids(ENDOFTEXT)), int(tokenizer.convert_tokens_to_ids(IM_END))
    config = Qwen3Config(
        vocab_size=max(vocab, len(tokenizer)),
        max_position_embeddings=4096,
        tie_word_embeddings=True,
        bos_token_id=pad,
        eos_token_id=eos,
        pad_token_id=pad,
        **{"num_key_value_heads": 8, "head_dim": 128, **SHAPES[shape]},
    )
    torch.manual_seed(seed)
    with torch.device("cuda" if torch.cuda.is_available() else "cpu"):  # initialised on the GPU: seconds
        model = Qwen3ForCausalLM(config)
    model.generation_config = sampling_generation_config(pad_id=pad, eos_ids=[eos, pad])
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    print(f"built {shape}: {count_parameters(model) / 1e9:.3f}B parameters in {out}", flush=True)


# ---- one run (under torchrun or alone) ---------------------------------------------------------


def run(args: argparse.Namespace) -> None:
    """One `train()` run; rank 0 writes its history, each rank its peak GPU memory."""
    import torch

    import rlvr.train.grpo as grpo
    import rlvr.train.run as setup
    from rlvr import Rubric, SingleTurnEnv
    from rlvr.train.config import TrainConfig

    world, rank = int(os.environ.get("WORLD_SIZE", "1")), int(os.environ.get("RANK", "0"))
    if args.replay:
        replay_rollouts(grpo, Path(args.replay), world, rank)
    saves: list[float] = []
    if not args.save:  # throughput runs: no checkpoint and no final export (minutes at 4B)
        setup.ckpt_io.save_checkpoint = lambda *a, **k: None  # type: ignore[assignment]
        grpo.export_final = lambda *a, **k: None  # type: ignore[assignment]
    else:
        original = setup.ckpt_io.save_checkpoint

        def timed(*a: Any, **k: Any) -> Any:
            t0 = time.monotonic()
            try:
                return original(*a, **k)
            finally:
                saves.append(time.monotonic() - t0)

        setup.ckpt_io.save_checkpoint = timed  # type: ignore[assignment]

    def reply_length(completion: list[dict[str, Any]]) -> float:
        return min(len(str(completion[-1]["content"])) if completion else 0, 100) / 100

    def make_env(**_: Any) -> SingleTurnEnv:
        return SingleTurnEnv(
            [{"id": str(i), "question": q} for i, q in enumerate(PROMPTS)], rubric=Rubric([reply_length])
        )

    cfg = TrainConfig(
        env="bench",
        model=args.model,
        output_dir=args.run_dir,
        steps=args.steps,
        batch_size=args.per_gpu_batch * world,
        group_size=args.group_size,
        lr=args.lr,
        max_tokens=args.max_tokens,
        micro_batch_size=args.micro_batch_size,
        bf16=args.bf16,
        sharding=args.sharding,
        temperature=args.temperature,
        eval_every=None,
        save_every=None,
        probe_tasks=0,
        seed=0,
    )
    history = grpo.train(cfg, make_env=make_env, quiet=True, plots=False)
    peak = torch.cuda.max_memory_allocated() / 2**30 if torch.cuda.is_available() else 0.0
    out = Path(args.out)
    out.with_name(f"{out.name}.rank{rank}").write_text(json.dumps({"peak_gib": peak}))
    if rank == 0:
        result = {"world": world, "history": history, "checkpoint_s": saves}
        if args.save:  # the final folder is an ordinary model
            from transformers import AutoModelForCausalLM

            final = AutoModelForCausalLM.from_pretrained(Path(args.run_dir) / "final", dtype=torch.float32)
            result["final_params"] = sum(p.numel() for p in final.parameters())
        out.write_text(json.dumps(result))


def replay_rollouts(grpo: Any, path: Path, world: int, rank: int) -> None:
    """Every step of this run trains on the rollouts in `path` (JSON lines, the batch in task
    order), each process on its contiguous share as the trainer splits a batch; where `path`
    does not exist yet, the first step plays them and rank 0 writes them there, gathered from
    every process. The batch's own tasks are ignored: a replayed step is the first step's."""
    import torch.distributed as tdist

    from rlvr.types import Rollout

    play = grpo._play
    lines: list[str] = []  # the file's lines, read once (fresh Rollouts each step)

    async def replayed(env: Any, client: Any, tasks: list[Any], probe_tasks: list[Any], **kw: Any) -> Any:
        if not path.exists():
            mine, _ = await play(env, client, tasks, probe_tasks, **kw)
            shares = [mine]
            if world > 1:
                shares = [None] * world
                tdist.all_gather_object(shares, mine)
            if rank == 0:
                part = path.with_name(path.name + ".part")
                part.write_text("".join(json.dumps(r.to_dict()) + "\n" for share in shares for r in share))
                part.replace(path)
            if world > 1:
                tdist.barrier()
        lines[:] = lines or path.read_text().splitlines()
        saved = [Rollout.from_dict(json.loads(line)) for line in lines]
        share = len(saved) // world
        if share * world != len(saved) or share != len(tasks) * kw["group_size"]:
            raise SystemExit(
                f"--replay: {path} holds {len(saved)} rollouts, not {world} x {len(tasks)} x {kw['group_size']}"
            )
        return saved[rank * share : (rank + 1) * share], []

    grpo._play = replayed


# ---- launching runs -----------------------------------------------------------------------------


class Launcher:
    """Starts child runs with a time limit each, and none after the command's budget."""

    def __init__(self, args: argparse.Namespace, work: Path) -> None:
        self.args, self.work, self.t0, self.n = args, work, time.monotonic(), 0

    def left(self) -> float:
        return self.args.budget - (time.monotonic() - self.t0)

    def __call__(self, gpus: int, sharding: str, **settings: Any) -> dict[str, Any]:
        """A run on `gpus` GPUs; returns its result, or {"error": why}."""
        if self.left() < 30:
            return {"error": "skipped: out of time budget"}
        self.n += 1
        out = self.work / f"run{self.n}.json"
        argv = [__file__, "run", "--model", self.args.model, "--out", str(out), "--sharding", sharding]
        argv += ["--run-dir", str(self.work / f"run{self.n}")]
        for key, value in settings.items():
            if value is True:
                argv.append(f"--{key.replace('_', '-')}")
            elif value is not False:
                argv += [f"--{key.replace('_', '-')}", str(value)]
        if gpus == 1:
            cmd = [sys.executable, *argv]
        else:
            cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={gpus}", *argv]
        env = {**os.environ, "CUDA_VISIBLE_DEVICES": ",".join(map(str, range(gpus))), "OMP_NUM_THREADS": "4"}
        env.update(self.args.env or {})
        limit = min(self.args.timeout, self.left())
        t0 = time.monotonic()
        try:
            done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=limit, check=False)
        except subprocess.TimeoutExpired:
            return {"error": f"timed out after {limit:.0f}s"}
        finally:
            subprocess.run(["rm", "-rf", str(self.work / f"run{self.n}")], check=False)  # the checkpoints
        if done.returncode != 0:
            tail = [line for line in done.stderr.splitlines() if line.strip()]
            oom = any("OutOfMemoryError" in line or "out of memory" in line for line in tail)
            why = "CUDA out of memory" if oom else (tail[-1] if tail else f"exit {done.returncode}")
            return {"error": why[:200], "stderr_tail": tail[-30:]}
        result: dict[str, Any] = json.loads(out.read_text())
        result["peak_gib"] = [
            json.loads(out.with_name(f"{out.name}.rank{r}").read_text())["peak_gib"] for r in range(gpus)
        ]
        result["wall_s"] = time.monotonic() - t0
        return result


# ---- scaling ------------------------------------------------------------------------------------


def scaling(args: argparse.Namespace, launch: Launcher) -> dict[str, Any]:
    settings = {
        "steps": args.warmup + args.steps,
        "per_gpu_batch": args.per_gpu_batch,
        "group_size": args.group_size,
        "max_tokens": args.max_tokens,
        "micro_batch_size": args.micro_batch_size,
        "lr": 1e-6,
        "bf16": True,
    }
    rows: list[dict[str, Any]] = []
    plan = [(g, "ddp") for g in args.gpus] + [(g, "fsdp") for g in args.gpus if g > 1 and args.fsdp]
    for _ in range(args.repeats):
        for gpus, sharding in plan:
            result = launch(gpus, sharding, **settings)
            row: dict[str, Any] = {"gpus": gpus, "sharding": sharding}
            if "error" in result:
                row["error"] = result["error"]
            else:
                timed = result["history"][args.warmup :]
                row["rollouts_per_s"] = statistics.fmean(m["throughput/rollouts_per_s"] for m in timed)
                row["step_s"] = statistics.fmean(m["time/step"] for m in timed)
                row["rollouts_s"] = statistics.fmean(m["time/rollouts"] for m in timed)
                row["train_s"] = statistics.fmean(m["time/train"] for m in timed)
                row["peak_gib"] = max(result["peak_gib"])
            rows.append(row)
            print(json.dumps(row), flush=True)
    table = []
    base: float | None = None
    for gpus, sharding in plan:
        ok = [r for r in rows if r["gpus"] == gpus and r["sharding"] == sharding and "error" not in r]
        if not ok:
            table.append({"gpus": gpus, "sharding": sharding, "runs": 0})
            continue
        med = {k: statistics.median(r[k] for r in ok) for k in ("rollouts_per_s", "step_s", "rollouts_s", "train_s")}
        spread = (max(r["rollouts_per_s"] for r in ok) - min(r["rollouts_per_s"] for r in ok)) / med["rollouts_per_s"]
        if gpus == 1:
            base = med["rollouts_per_s"]
        eff = med["rollouts_per_s"] / (gpus * base) if base else None
        table.append({"gpus": gpus, "sharding": sharding, "runs": len(ok), **med, "spread": spread, "efficiency": eff})
    print(f"\n{'GPUs':>4} {'shard':>5} {'runs':>4} {'rollouts/s':>10} {'spread':>6} {'step s':>7} "
          f"{'gen s':>6} {'train s':>7} {'efficiency':>10}")  # fmt: skip
    for t in table:
        if not t["runs"]:
            print(f"{t['gpus']:>4} {t['sharding']:>5}    0  (every run failed; see the JSON lines above)")
            continue
        eff = f"{t['efficiency']:.3f}" if t["efficiency"] is not None else "-"
        print(
            f"{t['gpus']:>4} {t['sharding']:>5} {t['runs']:>4} {t['rollouts_per_s']:>10.1f} {t['spread']:>6.1%} "
            f"{t['step_s']:>7.2f} {t['rollouts_s']:>6.2f} {t['train_s']:>7.2f} {eff:>10}"
        )
    return {"runs": rows, "table": table}


# ---- fsdp-check ---------------------------------------------------------------------------------


def fsdp_check(args: argparse.Namespace, launch: Launcher) -> dict[str, Any]:
    settings = {
        "steps": args.steps,
        "group_size": 4,
        "max_tokens": args.max_tokens,
        "micro_batch_size": args.micro_batch_size,
        "lr": 1e-6,
        "temperature": args.temperature,
    }
    if args.replay:
        replay = launch.work / "replay.jsonl"
        replay.unlink(missing_ok=True)
        settings["replay"] = replay
    sides = {"fsdp x2": launch(2, "fsdp", per_gpu_batch=args.batch // 2, save=True, **settings)}
    if args.ddp:
        sides["ddp x2"] = launch(2, "ddp", per_gpu_batch=args.batch // 2, **settings)
    if args.one_gpu:
        sides["1 GPU"] = launch(1, "ddp", per_gpu_batch=args.batch, **settings)
    names = list(sides)
    print(f"\n{'step':>4} " + " ".join(f"{n + ' loss':>16} {n + ' |g|':>14} {n + ' reward':>14}" for n in names))
    for step in range(args.steps):
        cells = []
        for n in names:
            h = sides[n].get("history", [])
            if step < len(h):
                m = h[step]
                cells.append(f"{m['loss/policy']:>16.6g} {m['grad/norm']:>14.6g} {m['reward/mean']:>14.4f}")
            else:
                cells.append(f"{'-':>16} {'-':>14} {'-':>14}")
        print(f"{step + 1:>4} " + " ".join(cells))
    for n in names:
        s = sides[n]
        if "error" in s:
            print(f"{n}: {s['error']}")
        else:
            took = f", checkpoint {sum(s['checkpoint_s']):.0f}s" if s.get("checkpoint_s") else ""
            final = f", final folder loads: {s['final_params']:,} parameters" if s.get("final_params") else ""
            print(
                f"{n}: peak GPU memory {', '.join(f'{g:.1f}' for g in s['peak_gib'])} GiB, wall {s['wall_s']:.0f}s{took}{final}"
            )
    for name in ("1 GPU", "ddp x2"):  # a loss near 0 has no useful relative gap: against its mean size
        if "history" not in sides.get(name, {}) or "history" not in sides["fsdp x2"]:
            continue
        for key in ("loss/policy", "grad/norm", "reward/mean"):
            pairs = list(zip(sides["fsdp x2"]["history"], sides[name]["history"], strict=False))
            size = max(statistics.fmean(abs(b[key]) for _, b in pairs), 1e-12)
            gap = max(abs(a[key] - b[key]) for a, b in pairs)
            print(f"largest gap fsdp x2 vs {name}, {key}: {gap:.3g} ({gap / size:.2e} of its mean size {size:.3g})")
    return {"sides": {n: {k: v for k, v in s.items() if k != "stderr_tail"} for n, s in sides.items()}}


# ---- command line -------------------------------------------------------------------------------


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build", help="a random model of a Qwen3 shape")
    b.add_argument("--shape", choices=sorted(SHAPES), required=True)
    b.add_argument("--out", required=True)
    b.add_argument("--vocab", type=int, default=151936, help="vocabulary rows (Qwen3: 151936)")
    b.add_argument("--seed", type=int, default=0)
    r = sub.add_parser("run", help="one training run (launched by the others)")
    r.add_argument("--model", required=True)
    r.add_argument("--out", required=True)
    r.add_argument("--run-dir", required=True)
    r.add_argument("--sharding", default="ddp")
    r.add_argument("--steps", type=int, default=10)
    r.add_argument("--per-gpu-batch", type=int, default=128)
    r.add_argument("--group-size", type=int, default=8)
    r.add_argument("--max-tokens", type=int, default=128)
    r.add_argument("--micro-batch-size", type=int, default=16)
    r.add_argument("--lr", type=float, default=1e-6)
    r.add_argument("--bf16", action="store_true")
    r.add_argument("--temperature", type=float, default=1.0)
    r.add_argument(
        "--replay", help="train every step on the rollouts in this file (written by the first step when missing)"
    )
    r.add_argument("--save", action="store_true", help="keep the checkpoint and final export (timed)")
    for name, extra in (("scaling", True), ("fsdp-check", False)):
        c = sub.add_parser(name)
        c.add_argument("--model", required=True)
        c.add_argument("--json", help="write the results here")
        c.add_argument("--work", default="/tmp/rlvr-multigpu-work")
        c.add_argument("--timeout", type=float, default=300, help="seconds per run")
        c.add_argument("--budget", type=float, default=510, help="seconds for the whole command")
        c.add_argument("--max-tokens", type=int, default=128 if extra else 64)
        c.add_argument("--micro-batch-size", type=int, default=16 if extra else 8)
        if extra:
            c.add_argument("--gpus", type=int, nargs="+", default=[1, 2])
            c.add_argument("--repeats", type=int, default=3)
            c.add_argument("--steps", type=int, default=8, help="timed steps (after --warmup)")
            c.add_argument("--warmup", type=int, default=2)
            c.add_argument("--per-gpu-batch", type=int, default=128)
            c.add_argument("--group-size", type=int, default=8)
            c.add_argument("--fsdp", action="store_true", help="also time FSDP2 on the >1-GPU settings")
        else:
            c.add_argument("--steps", type=int, default=5)
            c.add_argument("--batch", type=int, default=32, help="rollouts per step in all")
            c.add_argument("--ddp", action="store_true", help="also DDP on 2 GPUs")
            c.add_argument("--one-gpu", action="store_true", help="also one GPU")
            c.add_argument(
                "--no-replay",
                dest="replay",
                action="store_false",
                help="let every side sample its own rollouts (default: all train on the first run's first step's)",
            )
            c.add_argument(
                "--temperature",
                type=float,
                default=0.3,
                help="sampling temperature (at 1 a random model's next token is near uniform over the "
                "vocabulary, so float noise between the sides changes which tokens they sample)",
            )
    args = p.parse_args()
    if args.command == "build":
        build(args.shape, Path(args.out), args.vocab, args.seed)
        return
    if args.command == "run":
        run(args)
        return
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    args.env = {"NVIDIA_TF32_OVERRIDE": "0"} if args.command == "fsdp-check" else {}
    launch = Launcher(args, work)
    result = scaling(args, launch) if args.command == "scaling" else fsdp_check(args, launch)
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
