"""The training forward + backward of the tic-tac-toe model (17.6M parameters, `small` preset) in
two versions of rlvr side by side: this checkout against a baseline source tree (e.g. the commit
before the chunked head), alternated in fresh processes, several repeats each, CPU or GPU.

    git worktree add /tmp/base 72db689
    python benchmarks/bench_update_versions.py --baseline-src /tmp/base/src --repeats 5

Each measurement builds the model (same seed, same weights), makes micro-batches shaped like the
tic-tac-toe RL batch (prompt about 300 tokens of which the last replies are trained, 64 rows),
then times `steps` forward + backward passes of the log-probs with entropy, as the update runs
them: `rlvr.train.logprobs.micro_batch_logprobs` where it exists, else the older
`rlvr.train.model.token_logprobs` over full logits.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def measure(rows: int, prompt: int, reply: int, steps: int, device: str) -> float:
    import torch
    from transformers import AutoModelForCausalLM

    from rlvr.models.tiny import build_tiny_model
    from rlvr.train.sequences import TrainSequence, micro_batches

    torch.manual_seed(0)
    with tempfile.TemporaryDirectory() as tmp:
        build_tiny_model(tmp, preset="small", seed=0)
        model = AutoModelForCausalLM.from_pretrained(tmp, dtype=torch.float32).to(device).eval()
    vocab = model.config.vocab_size
    rng = random.Random(0)
    n = prompt + reply
    seqs = [TrainSequence([rng.randrange(vocab) for _ in range(n)], [0] * prompt + [1] * reply, 1.0, [0.0] * n, i)
            for i in range(rows)]  # fmt: skip
    [mb] = micro_batches(seqs, rows, 0, torch.device(device))
    try:
        from rlvr.train.logprobs import micro_batch_logprobs

        def run() -> torch.Tensor:
            return micro_batch_logprobs(model, mb, 1.0, entropy=True)[0]
    except ImportError:  # the older code: full logits over every position
        from rlvr.train.model import token_logprobs

        def run() -> torch.Tensor:
            return token_logprobs(model, mb.ids, mb.attention, 1.0, entropy=True)[0]

    def step() -> None:
        (run() * mb.mask).sum().backward()
        model.zero_grad(set_to_none=True)

    step()  # warm-up
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(steps):
        step()
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    return (time.perf_counter() - t0) / steps


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--baseline-src", required=True, help="the baseline's src/ folder (its rlvr package)")
    p.add_argument("--repeats", type=int, default=5, help="fresh processes per version, alternated")
    p.add_argument("--steps", type=int, default=5, help="timed forward + backward passes per process")
    p.add_argument("--rows", type=int, default=64)
    p.add_argument("--prompt", type=int, default=300, help="untrained tokens per row")
    p.add_argument("--reply", type=int, default=40, help="trained tokens per row")
    p.add_argument("--device", default="cpu")
    p.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child is not None:
        print(json.dumps(measure(args.rows, args.prompt, args.reply, args.steps, args.device)))
        return
    here = Path(__file__).resolve().parents[1] / "src"
    versions = {"baseline": Path(args.baseline_src).resolve(), "this checkout": here}
    times: dict[str, list[float]] = {name: [] for name in versions}
    argv = [
        f"--{k.replace('_', '-')}={v}"
        for k, v in vars(args).items()
        if k in ("steps", "rows", "prompt", "reply", "device")
    ]
    for r in range(args.repeats):
        for name, src in versions.items():
            env = {**os.environ, "PYTHONPATH": str(src)}
            out = subprocess.run([sys.executable, __file__, "--baseline-src", str(src), "--child", "1", *argv],
                                 env=env, capture_output=True, text=True, check=True)  # fmt: skip
            times[name].append(json.loads(out.stdout.strip().splitlines()[-1]))
            print(f"repeat {r + 1} {name:<14} {times[name][-1] * 1e3:8.1f} ms per forward + backward", flush=True)
    base, new = times["baseline"], times["this checkout"]
    ratios = sorted(b / n for b, n in zip(base, new, strict=True))
    print(f"\n{args.rows} rows x {args.prompt + args.reply} tokens ({args.reply} trained each), {args.device}, "
          f"{args.repeats} alternated repeats of {args.steps} passes")  # fmt: skip
    for name, ts in times.items():
        print(
            f"  {name:<14} median {statistics.median(ts) * 1e3:.1f} ms (range {min(ts) * 1e3:.1f}-{max(ts) * 1e3:.1f})"
        )
    print(
        f"  baseline / this checkout: median {statistics.median(ratios):.2f}x (range {ratios[0]:.2f}-{ratios[-1]:.2f})"
    )


if __name__ == "__main__":
    main()
