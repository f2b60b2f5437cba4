"""rlvr at real model sizes: Qwen3-shaped random models of 0.5B, 1.7B and 4B parameters.

One GPU, one command per size (each stays under `--budget` seconds, 540 by default):

    python benchmarks/bench_scale.py --sizes 0.5b --out benchmarks/results/scale-h100.json
    python benchmarks/bench_scale.py --sizes 1.7b --out benchmarks/results/scale-h100.json
    python benchmarks/bench_scale.py --sizes 4b --out benchmarks/results/scale-h100.json
CPU smoke check (a 10M model with the real vocabulary, about 2.5 minutes):
    python benchmarks/bench_scale.py --sizes tiny --skip-trl --out /tmp/scale.json
The decode phase alone, with its step split (about a minute at 0.5B; RLVR_PROFILE=1 adds a
kernel table of the step's forward):
    python benchmarks/bench_scale.py --sizes 0.5b --phases build,decode --out benchmarks/results/decode-h100.json

Models: the shapes of Qwen3-0.6B ("0.5b"), Qwen3-1.7B and Qwen3-4B (vocabulary 151,936, tied
embeddings, GQA with 8 KV heads, head_dim 128), random weights, built on the GPU itself and
saved in bfloat16 to a temporary folder (nothing to download or carry). The tokenizer is
rlvr's small test tokenizer: ids it does not know decode to nothing, which is fine for noise.

For each size, every phase in its own process (an out-of-memory error or a hang costs that
phase only; each reports its own peak memory):

    decode   LocalModel, 256 single-turn requests of 128 sampled tokens, bf16, after a warm-up
             run: tokens/s (prefill included), and ms per decode step (the run less one of a
             single token, over the steps between them) against the bandwidth floor (bf16
             weights + the rows' KV cache read once per step: each row's whole prompt, shared
             prefix included, and half its reply; at the GPU's peak bandwidth); with static
             slots (CUDA), the step split: the captured step replayed back to back (the
             device's time), over the rows' span and over the whole buffer (alternated), its
             sampling alone and its forward run eagerly (`--no-split`: not); whole runs with
             the step's attention as matmuls and as cuDNN's sdpa (compiled parts with
             `--compile-decode`), and with the step's layers eager and compiled
             (`compile_decode`), alternated
    prefill  one no-grad bf16 forward of 8 x 512 tokens: tokens/s and MFU (2 x params)
    update   rlvr's `update_policy` on 64 synthetic sequences (128 prompt + 32-256 trained
             tokens; float32 weights, bf16 autocast, AdamW): tokens/s, MFU (6 x params) and
             peak memory, padded / packed (on CUDA through torch's varlen kernel) /
             activation checkpointing / full logits (the path before chunking) / padded with
             `compile_blocks` (CUDA) / where the varlen kernel runs, packed with a block mask
             (as before it) and packed with `compile_blocks` / packed with flash_attention_2
             (where flash_attn imports); RLVR_PROFILE=1 adds a kernel table
             of one padded update and its wall time against its kernels' time
    train    rlvr's trainer against TRL's GRPOTrainer (`bench_train_vs_trl`: 64 rollouts = 8
             prompts x 8, 128 new tokens, 1 warm-up + `--steps` steps; 4b with activation
             checkpointing on both sides), alternated `--repeats` times: seconds per step
             each, and TRL's / rlvr's as median [min-max] over the repeats (`--compile-blocks`,
             `--compile-decode`, `--pack`: rlvr's trainer with that option, TRL as it is)

A wall-clock guard stops starting phases (and kills a running one) at `--budget`; the JSON
is rewritten after every phase, so a cut run keeps what it had, and a second command with the
same `--out` adds its sizes to the file. Peaks (dense bf16, bytes/s): `rlvr.train.hardware`;
the JSON and the table say which GPU and which peak were used.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench_scale_phases import SHAPES, workload

PHASES = Path(__file__).with_name("bench_scale_phases.py")


# ==== the parent: sizes, budget, results ======================================================


def run_phase(args: argparse.Namespace, phase: str, size: str, work: Path, deadline: float) -> dict[str, Any]:
    left = deadline - time.time()
    if left < 15:
        return {"skipped": "budget"}
    out = work / f"{phase}.json"
    out.unlink(missing_ok=True)
    cmd = [sys.executable, str(PHASES), "--phase", phase, "--size", size, "--work", str(work), "--phase-out", str(out)]
    cmd += ["--device", args.device, "--steps", str(args.steps), "--warmup", str(args.warmup)]
    cmd += ["--deadline", str(deadline)]
    cmd += ["--micro-batch-size", str(args.micro_batch_size)] if args.micro_batch_size else []
    cmd += ["--compile-blocks"] if args.compile_blocks else []
    cmd += ["--compile-decode"] if args.compile_decode else []
    cmd += ["--pack"] if args.pack else []
    cmd += ["--no-split"] if args.no_split else []
    t0 = time.time()
    env = {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True", **os.environ}  # less fragmentation at 4B
    proc = subprocess.Popen(cmd, start_new_session=True, env=env)
    try:
        rc = proc.wait(timeout=left)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        return {"error": f"timeout: stopped after {time.time() - t0:.0f} s (budget)"}
    if rc != 0 or not out.exists():
        return {"error": f"exit status {rc} (see the output above)"}
    return {**json.loads(out.read_text()), "wall_s": time.time() - t0}


def ratio_spread(rlvr: list[dict[str, Any]], trl: list[dict[str, Any]]) -> dict[str, Any] | None:
    """TRL's seconds per step / rlvr's, for each repeat where both ran: median, min, max."""
    pairs = [t["seconds_per_step"] / r["seconds_per_step"] for r, t in zip(rlvr, trl) if "error" not in r and "error" not in t and "seconds_per_step" in r and "seconds_per_step" in t]  # fmt: skip
    if not pairs:
        return None
    return {"median": statistics.median(pairs), "min": min(pairs), "max": max(pairs), "each": pairs}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", default="0.5b,1.7b,4b", help=f"comma-separated, of {', '.join(SHAPES)}")
    p.add_argument("--repeats", type=int, default=3, help="rlvr/TRL training runs, alternated")
    p.add_argument("--steps", type=int, default=3, help="timed optimizer steps per training run")
    p.add_argument("--warmup", type=int, default=1, help="untimed optimizer steps before them (compiling options: 2)")
    p.add_argument("--skip-trl", action="store_true", help="measure rlvr's trainer only")
    p.add_argument(
        "--phases", default="build,decode,update,train", help="comma-separated, of build,decode,update,train"
    )
    p.add_argument("--budget", type=float, default=540, help="seconds for the whole command (split over sizes)")
    p.add_argument("--micro-batch-size", type=int, default=None, help="override the per-size micro-batch")
    p.add_argument("--compile-blocks", action="store_true", help="rlvr's trainer with compile_blocks (TRL as it is)")
    p.add_argument(
        "--compile-decode",
        action="store_true",
        help="rlvr's trainer with compile_decode (TRL as it is); the decode phase's attention runs compiled too",
    )
    p.add_argument("--pack", action="store_true", help="rlvr's trainer with pack_sequences (TRL as it is)")
    p.add_argument("--no-split", action="store_true", help="decode phase: skip the step split")
    p.add_argument("--device", default=None, help="cuda or cpu (default: cuda when available)")
    p.add_argument("--out", default="benchmarks/results/scale.json", help="JSON results (sizes merged into it)")
    args = p.parse_args()
    start = time.time()
    if importlib.util.find_spec("rlvr") is None:
        raise SystemExit("rlvr is not importable: pip install -e . (or PYTHONPATH=src) from the repository root")
    import torch

    args.device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    sizes = [s.strip().lower() for s in args.sizes.split(",") if s.strip()]
    phases = {s.strip() for s in args.phases.split(",") if s.strip()}
    if not phases <= {"build", "decode", "update", "train"} or "build" not in phases:
        raise SystemExit(f"--phases {args.phases!r}: build and any of decode, update, train")
    unknown = [s for s in sizes if s not in SHAPES]
    if unknown:
        raise SystemExit(f"unknown size {unknown[0]!r}; expected one of {', '.join(SHAPES)}")
    out = Path(args.out)
    try:  # the sizes of an earlier command on the same GPU are kept
        results: dict[str, Any] = json.loads(out.read_text()) if out.exists() else {}
    except ValueError:
        results = {}
    results.setdefault("sizes", {})
    trl = not args.skip_trl and all(importlib.util.find_spec(m) for m in ("trl", "datasets"))
    if not args.skip_trl and not trl:
        print("trl or datasets is not importable: measuring rlvr only (pip install trl datasets)")

    def save() -> None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(results, indent=2, default=str) + "\n")

    for i, size in enumerate(sizes):
        deadline = time.time() + (start + args.budget - time.time()) / (len(sizes) - i)
        work = Path(tempfile.mkdtemp(prefix=f"bench_scale_{size}_"))
        r: dict[str, Any] = {"workload": workload(size, args.device), "train": {"rlvr": [], "trl": []}}
        results["sizes"][size] = r
        for phase in [p for p in ("build", "decode", "update") if p in phases]:
            r[phase] = run_phase(args, phase, size, work, deadline)
            print(f"{size} {phase}: {json.dumps(r[phase], default=str)[:600]}", flush=True)
            if phase == "build" and "device" in r[phase]:  # the GPU, its peak, the versions: said once
                env = {k: r[phase].pop(k) for k in ("device", "peak", "versions")}
                if results.get("device") not in (None, env["device"]):  # another GPU: start afresh
                    results["sizes"] = {size: r}
                results.update(env)
                print(f"device {env['device']}; peak {env['peak'] or 'unknown (no MFU, no floor)'}; {env['versions']}")
            save()
            if "skipped" in r[phase] or "error" in r["build"]:
                break
        for _ in range(args.repeats if "params" in r["build"] and "train" in phases else 0):
            for who in ("rlvr", "trl") if trl else ("rlvr",):
                r["train"][who].append(run_phase(args, who, size, work, deadline))
                print(f"{size} {who}: {json.dumps(r['train'][who][-1], default=str)[:400]}", flush=True)
            r["train"]["trl_over_rlvr_seconds"] = ratio_spread(r["train"]["rlvr"], r["train"]["trl"])
            save()
        shutil.rmtree(work, ignore_errors=True)
    print(table(results))
    print(f"wrote {out} ({time.time() - start:.0f} s)")


def table(results: dict[str, Any]) -> str:
    """The markdown table of docs/benchmarks.md."""

    def f(value: Any, fmt: str) -> str:
        return format(value, fmt) if isinstance(value, (int, float)) else "-"

    lines = [
        f"device: {results.get('device')}; peak: {results.get('peak')}",
        "| size | params | decode tok/s | ms/step (floor) | prefill tok/s | train tok/s (MFU) | peak GB | "
        "rlvr s/step | TRL s/step | TRL/rlvr [min-max] |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for size, r in results["sizes"].items():
        d, u = r.get("decode", {}), r.get("update", {}).get("padded", {})
        rl = [x["seconds_per_step"] for x in r["train"]["rlvr"] if "seconds_per_step" in x]
        tr = [x["seconds_per_step"] for x in r["train"]["trl"] if "seconds_per_step" in x]
        q = r["train"].get("trl_over_rlvr_seconds")
        lines.append(
            f"| {size} | {f(r.get('build', {}).get('params', 0) / 1e9, '.2f')}B | {f(d.get('tokens_per_s'), ',.0f')} | "
            f"{f(d.get('ms_per_step'), '.1f')} ({f(d.get('floor_ms_per_step'), '.1f')}) | "
            f"{f(d.get('prefill', {}).get('tokens_per_s'), ',.0f')} | {f(u.get('tokens_per_s'), ',.0f')} "
            f"({f(u.get('mfu', None), '.0%')}) | {f(u.get('peak_memory_gb'), '.1f')} | "
            f"{f(statistics.median(rl) if rl else None, '.2f')} | {f(statistics.median(tr) if tr else None, '.2f')} | "
            + (f"{q['median']:.2f}x [{q['min']:.2f}-{q['max']:.2f}] |" if q else "- |")
        )
    for size, r in results["sizes"].items():
        d = r.get("decode", {})
        if split := d.get("step_split"):
            lines.append(
                f"{size} decode step of {split['rows']:.0f} rows: {f(d.get('ms_per_step'), '.1f')} ms, of which the "
                f"captured step alone {split['device_ms']:.1f} ms (its sampling alone {split['sampling_ms']:.1f}, "
                f"its forward run eagerly {split['forward_eager_ms']:.1f}); the rest is the host's"
                + (
                    f". Attending over the whole {split['buffer_length']:.0f}-position buffer instead of the rows' "
                    f"{split['span']:.0f}: {split['device_ms_whole_buffer']:.1f} ms"
                    if "device_ms_whole_buffer" in split
                    else ""
                )
                + "".join(
                    f"; with {key.removeprefix('device_ms_attention_')}: {value:.1f} ms"
                    for key, value in split.items()
                    if key.startswith("device_ms_attention_") and not key.endswith("_each")
                )
            )
        for what in ("runs_with_attention", "runs_compiled"):
            if runs := d.get(what):
                lines.append(
                    f"{size} whole runs, ms per decode step (median of alternated rounds): "
                    + ", ".join(
                        f"{key.removeprefix('ms_per_step_')} {value:.2f} "
                        f"[{min(runs[key + '_each']):.2f}-{max(runs[key + '_each']):.2f}]"
                        for key, value in runs.items()
                        if key.startswith("ms_per_step_") and not key.endswith("_each")
                    )
                    + f" (attention: {runs.get('in_use') or runs.get('attention', '?')})"
                )
    return "\n".join(lines)


if __name__ == "__main__":
    main()
