"""Where `LocalModel`'s generation thread spends a tic-tac-toe rollout phase: admitting requests
(the prefill forward, the prefix cache, slot bookkeeping) against decode steps, this checkout
against a baseline source tree, alternated in fresh processes:

    git worktree add /tmp/base main            # or: git archive main src | tar -x -C /tmp/base
    OMP_NUM_THREADS=1 python benchmarks/bench_admission.py --baseline-src /tmp/base/src --repeats 3
    python benchmarks/bench_admission.py --baseline-src base/src --device cuda --batch-size 256  # a GPU

Each measurement loads the shipped model (`--model`), plays one untimed rollout phase (buffers,
allocator), then `--phases` timed ones: `--batch-size` games of the tic-tac-toe recipe's
environment (`bench_tictactoe_step.ENV_ARGS`: a perfect opponent with traps, 4 random replies)
in groups of `--group-size`, temperature 1, 48 tokens a turn, every turn seeded (both trees
sample the same tokens), the reuse cache cleared before each phase (as the trainer does after
each update). Float32 on the CPU; on CUDA float32 weights under bf16 autocast, as `rlvr train
--bf16`. Timed, per phase: its wall and process CPU seconds, and in the generation thread the
CPU and wall seconds of `admit` (on CUDA synchronized at its end) and of `step`, and inside
`admit` of the prefix lookups (`_lookup`) and of the held rows' copy into the reuse cache
(`_store`). Printed per tree: medians over repeats of the phase means; then baseline over this
checkout, paired by repeat: median [min-max]. `--profile` prints the generation thread's top
functions by cProfile (this checkout only, one phase).
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import io
import json
import os
import pstats
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
ENV_ARGS = {  # bench_tictactoe_step.ENV_ARGS (not imported: the child runs from any tree)
    "min_random_move_prob": 0.0,
    "max_random_move_prob": 0.0,
    "trap_prob": 1.0,
    "opening_plies": 0,
    "random_replies": 4,
}
KEYS = ("wall_s", "cpu_s", "admit_cpu_s", "admit_wall_s", "step_cpu_s", "step_wall_s", "lookup_cpu_s", "store_cpu_s")
COUNTS = ("requests", "prefills", "decode_steps", "tokens", "prompt_tokens", "reused_tokens")


class Clock:
    """Thread CPU and wall seconds spent in wrapped methods, by name (CUDA: synchronized)."""

    def __init__(self, cuda: bool) -> None:
        self.cpu: dict[str, float] = {}
        self.wall: dict[str, float] = {}
        self.cuda = cuda
        self.ops: dict[str, list[int]] | None = None  # per call, when counting (`count_ops`)

    def wrap(self, cls: Any, name: str, label: str, sync: bool = False) -> None:
        inner = getattr(cls, name, None)
        if inner is None:
            return
        clock = self

        def timed(self: Any, *a: Any, **k: Any) -> Any:
            c0, w0 = time.thread_time(), time.perf_counter()
            counter = Ops() if clock.ops is not None and sync else None
            try:
                if counter is None:
                    return inner(self, *a, **k)
                with counter:
                    return inner(self, *a, **k)
            finally:
                if counter is not None and clock.ops is not None:
                    clock.ops.setdefault(label, []).append(counter.count)
                if sync and clock.cuda:
                    import torch

                    torch.cuda.synchronize()
                clock.cpu[label] = clock.cpu.get(label, 0.0) + time.thread_time() - c0
                clock.wall[label] = clock.wall.get(label, 0.0) + time.perf_counter() - w0

        setattr(cls, name, timed)


def Ops() -> Any:
    """A context that counts the aten operators run inside it, views left out: on a GPU each is
    a kernel launch or more, so the count is the host's share of the work, whatever the device."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Count(TorchDispatchMode):
        count = 0

        def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            self.count += not func.is_view
            return func(*args, **(kwargs or {}))

    return Count()


def child(args: argparse.Namespace) -> dict[str, Any]:
    """One tree's measurement (this process imports rlvr from the tree on PYTHONPATH)."""

    from rlvr.clients import local_batch, local_slots
    from rlvr.clients.local import LocalModel
    from rlvr.engine import run_rollouts
    from rlvr.registry import load_environment
    from rlvr.types import SamplingArgs

    cuda = args.device == "cuda"
    clock = Clock(cuda)
    clock.wrap(local_slots.SlotBatch, "admit", "admit", sync=True)
    clock.wrap(local_slots.SlotBatch, "step", "step", sync=True)
    clock.wrap(local_batch.Batch, "_lookup", "lookup")  # the baseline's; this checkout's slots use _hits
    clock.wrap(local_batch.Batch, "_hits", "lookup")
    clock.wrap(local_batch.Batch, "_store", "store")
    dtype = "float32"
    client = LocalModel(args.model, device=args.device, dtype=dtype, max_batch_size=args.batch_size,
                        autocast="bfloat16" if cuda else None)  # fmt: skip
    assert client.static_cache, "the shipped model decodes over slots"
    env = load_environment("tictactoe", **ENV_ARGS, num_tasks=max(64, args.batch_size))
    tasks = env.tasks("train")[: args.batch_size // args.group_size]
    sampling = SamplingArgs(temperature=1.0, max_tokens=48)
    profile = cProfile.Profile() if args.profile else None
    if profile is not None:
        serve = LocalModel._serve

        def profiled(self: Any) -> None:
            profile.runcall(serve, self)

        LocalModel._serve = profiled  # type: ignore[method-assign]

    def phase() -> list[Any]:
        client.clear_cache()
        return asyncio.run(
            run_rollouts(
                env, client, tasks, rollouts_per_task=args.group_size, concurrency=args.batch_size, sampling=sampling
            )
        )

    phase()  # untimed: buffers, the allocator, first kernels
    out: dict[str, Any] = {k: [] for k in (*KEYS, *COUNTS)}
    ids: list[list[int]] = []
    for _ in range(args.phases):
        before = {k: getattr(client.stats, k) for k in COUNTS}
        clock.cpu.clear()
        clock.wall.clear()
        c0, w0 = time.process_time(), time.perf_counter()
        rollouts = phase()
        out["wall_s"].append(time.perf_counter() - w0)
        out["cpu_s"].append(time.process_time() - c0)
        for name in ("admit", "step", "lookup", "store"):
            out[f"{name}_cpu_s"].append(clock.cpu.get(name, 0.0))
            if f"{name}_wall_s" in out:
                out[f"{name}_wall_s"].append(clock.wall.get(name, 0.0))
        for k in COUNTS:
            out[k].append(getattr(client.stats, k) - before[k])
        ids = [t.completion.token_ids for r in rollouts for t in r.turns if t.completion is not None]
    if args.count_ops:  # one more phase, counted (slower: not timed)
        clock.ops = {}
        phase()
        out["ops_per_admission"] = [statistics.fmean(clock.ops.get("admit", [0]))]
        out["ops_per_step"] = [statistics.fmean(clock.ops.get("step", [0]))]
    means = {k: statistics.fmean(v) for k, v in out.items()}
    means["admit_cpu_ms_per_request"] = 1e3 * means["admit_cpu_s"] / max(1.0, means["requests"])
    result: dict[str, Any] = {"means": means, "each": out, "ids_hash": hash(json.dumps(ids)) & 0xFFFFFFFF}
    if profile is not None:
        text = io.StringIO()
        pstats.Stats(profile, stream=text).sort_stats("tottime").print_stats(args.profile)
        result["profile"] = text.getvalue()
        text = io.StringIO()
        pstats.Stats(profile, stream=text).sort_stats("cumulative").print_stats(args.profile)
        result["profile_cumulative"] = text.getvalue()
    return result


def spread(values: list[float]) -> str:
    return f"{statistics.median(values):.3f} [{min(values):.3f}-{max(values):.3f}]"


def run_tree(src: Path, argv: list[str]) -> dict[str, Any]:
    pythonpath = os.pathsep.join([str(src), *map(str, sorted((ROOT / "environments").glob("*/")))])
    env = {**os.environ, "PYTHONPATH": pythonpath, "PYTHONHASHSEED": "0"}
    done = subprocess.run([sys.executable, __file__, "--child", *argv], env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"the run of {src} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--baseline-src", type=Path, help="the baseline's src/ folder (without: this checkout only)")
    p.add_argument("--model", default=str(ROOT / "models" / "tictactoe-tiny"))
    p.add_argument("--device", help="cpu or cuda (default: cuda where there is one)")
    p.add_argument("--batch-size", type=int, default=256, help="games a phase (the recipe's 256)")
    p.add_argument("--group-size", type=int, default=8)
    p.add_argument("--phases", type=int, default=2, help="timed rollout phases a measurement")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--count-ops", action="store_true", help="count the aten operators of an admission and a step")
    p.add_argument("--profile", type=int, default=0, help="print this many cProfile rows (this checkout, once)")
    p.add_argument("--out", type=Path, help="write the results here as JSON")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args, _ = p.parse_known_args()
    if args.device is None:
        import torch

        args.device = "cuda" if torch.cuda.is_available() else "cpu"
        sys.argv += ["--device", args.device]
    if args.phases < 1:
        p.error(f"--phases must be at least 1, got {args.phases}")
    if args.child:
        print(json.dumps(child(args)))
        return
    argv = [a for a in sys.argv[1:] if a != "--child"]
    trees = {"baseline": args.baseline_src.resolve()} if args.baseline_src else {}
    trees["this checkout"] = ROOT / "src"
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in trees}
    for r in range(args.repeats):
        for name, src in trees.items():
            found = run_tree(src, [*argv, "--profile", "0"] if name == "baseline" or r else argv)
            runs[name].append(found)
            m = found["means"]
            print(f"repeat {r + 1} {name}: phase {m['wall_s']:.2f} s wall, {m['cpu_s']:.2f} s CPU; admit "
                  f"{m['admit_cpu_s']:.2f} s CPU ({m['admit_cpu_ms_per_request']:.2f} ms a request, "
                  f"{m['prefills']:.0f} prefills), steps {m['step_cpu_s']:.2f} s CPU ({m['decode_steps']:.0f}); "
                  f"ids {found['ids_hash']:08x}", flush=True)  # fmt: skip
            if "profile" in found:
                print(found["profile"], found["profile_cumulative"], sep="\n")
    report: dict[str, Any] = {"args": {k: str(v) for k, v in vars(args).items()}, "cpus": os.cpu_count(), "trees": {}}
    for name, each_run in runs.items():
        keys = [*KEYS, "admit_cpu_ms_per_request", *COUNTS]
        keys += [k for k in ("ops_per_admission", "ops_per_step") if k in each_run[0]["means"]]
        report["trees"][name] = {k: [x["means"][k] for x in each_run] for k in keys}
        print(f"{name}: " + ", ".join(f"{k} {spread([x['means'][k] for x in each_run])}" for k in keys))
    if args.baseline_src:
        base, new = runs["baseline"], runs["this checkout"]
        for k in ("wall_s", "cpu_s", "admit_cpu_s", "admit_wall_s", "admit_cpu_ms_per_request", "step_cpu_s"):
            each = [a["means"][k] / b["means"][k] for a, b in zip(base, new) if b["means"][k]]
            report.setdefault("ratios", {})[k] = each
            if each:
                print(f"baseline / this checkout, {k}: {spread(each)}x")
    if args.out:
        args.out.write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
