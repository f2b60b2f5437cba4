"""Peak memory of the training log-probs over Qwen's 151,936-token vocabulary, chunked output
head against full logits, CPU, each variant in a fresh process (its peak resident set).

    python benchmarks/bench_logprobs_memory.py                 # 8 x 512 tokens, 448 trained each
    python benchmarks/bench_logprobs_memory.py --rows 4 --prompt 64 --reply 192

The model is bench_scale.py's `tiny`: a 2-layer, 64-wide Qwen3 with the real vocabulary (9.8M parameters, nearly all
of them the tied embedding), so the logits dominate: one forward and backward of
`rlvr.train.logprobs.micro_batch_logprobs` (with entropy, as the update asks for it).
"""

from __future__ import annotations

import argparse
import random
import resource
import subprocess
import sys
import time


def measure(chunk_elements: int, rows: int, prompt: int, reply: int) -> str:
    import torch
    from bench_scale_phases import VOCAB, qwen3_config
    from transformers import Qwen3ForCausalLM

    from rlvr.train.logprobs import micro_batch_logprobs
    from rlvr.train.sequences import TrainSequence, micro_batches

    config = qwen3_config("tiny")
    torch.manual_seed(0)
    model = Qwen3ForCausalLM(config).eval()
    rng = random.Random(0)
    n = prompt + reply
    seqs = [TrainSequence([rng.randrange(VOCAB) for _ in range(n)], [0] * prompt + [1] * reply, 1.0, [0.0] * n, i)
            for i in range(rows)]  # fmt: skip
    [mb] = micro_batches(seqs, rows, 0, torch.device("cpu"))
    model(input_ids=mb.ids[:, :8])  # allocations of a first forward, before the baseline
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    t0 = time.perf_counter()
    logp, _ = micro_batch_logprobs(model, mb, 1.0, entropy=True, chunk_elements=chunk_elements)
    (logp * mb.mask).sum().backward()
    seconds = time.perf_counter() - t0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    name = "full logits" if chunk_elements == 0 else f"chunks of {chunk_elements // VOCAB} tokens"
    return (
        f"{name:<20} {rows} x {n} tokens ({int(mb.mask.sum())} trained): peak {peak / 1e9:.2f} GB, "
        f"+{(peak - base) / 1e9:.2f} GB over the model, forward + backward {seconds:.1f} s"
    )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rows", type=int, default=8, help="sequences in the micro-batch")
    p.add_argument("--prompt", type=int, default=64, help="prompt tokens per sequence (not trained)")
    p.add_argument("--reply", type=int, default=448, help="trained tokens per sequence")
    p.add_argument("--chunk-elements", type=int, default=None, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.chunk_elements is not None:
        print(measure(args.chunk_elements, args.rows, args.prompt, args.reply), flush=True)
        return
    from rlvr.train.logprobs import CHUNK_ELEMENTS

    for chunk in (0, CHUNK_ELEMENTS):
        cmd = [sys.executable, __file__, "--chunk-elements", str(chunk)]
        subprocess.run(cmd + ["--rows", str(args.rows), "--prompt", str(args.prompt), "--reply", str(args.reply)])


if __name__ == "__main__":
    main()
