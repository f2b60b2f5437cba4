"""Peak memory of the training log-probs over Qwen's 151,936-token vocabulary, chunked output
head against full logits, CPU, each variant in a fresh process (its peak resident set).

    python benchmarks/bench_logprobs_memory.py                 # 8 x 512 tokens, 448 trained each
    python benchmarks/bench_logprobs_memory.py --rows 4 --prompt 64 --reply 192
    python benchmarks/bench_logprobs_memory.py --sft          # `rlvr sft`'s loss: before (full logits) and now
    python benchmarks/bench_logprobs_memory.py --sft --model models/tictactoe-tiny --rows 64 --prompt 200 --reply 100

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


def measure_sft(variant: str, rows: int, prompt: int, reply: int, model_dir: str | None) -> str:
    """One forward and backward of `rlvr sft`'s micro-batch loss: `summed_loss` (the chunked
    head; `checkpointed`: with `gradient_checkpointing`) or the full-logits cross-entropy it
    replaced (`full`, kept here as the baseline); on the `tiny` real-vocabulary model, or a saved
    one (`--model`)."""
    import torch
    from bench_scale_phases import qwen3_config
    from transformers import AutoModelForCausalLM, Qwen3ForCausalLM

    from rlvr.train.logprobs import activation_checkpointing
    from rlvr.train.sft import summed_loss
    from rlvr.train.sft_data import Sample

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(model_dir) if model_dir else Qwen3ForCausalLM(qwen3_config("tiny"))
    vocab = model.config.vocab_size
    rng = random.Random(0)
    n = prompt + reply
    samples = [Sample([rng.randrange(vocab) for _ in range(n)], [0] * prompt + [1] * reply, i) for i in range(rows)]
    ids = torch.tensor([s.ids for s in samples])
    mask = torch.tensor([s.mask for s in samples], dtype=torch.float32)
    model(input_ids=ids[:, :8])
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    t0 = time.perf_counter()
    if variant != "full":
        with activation_checkpointing(model, variant == "checkpointed"):
            loss = summed_loss(model, samples, 0, torch.device("cpu"))
    else:
        logits = model(input_ids=ids, attention_mask=torch.ones_like(ids)).logits[:, :-1].float()
        ce = torch.nn.functional.cross_entropy(logits.transpose(1, 2), ids[:, 1:], reduction="none")
        loss = (ce * mask[:, 1:]).sum()
    loss.backward()  # checkpointed blocks recompute here, outside the block that set them up (as in rlvr sft)
    seconds = time.perf_counter() - t0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    name = {"full": "sft before, full", "chunked": "sft, chunked", "checkpointed": "sft, + checkpointing"}[variant]
    return (
        f"{name:<20} {rows} x {n} tokens ({rows * reply} trained): peak {peak / 1e9:.2f} GB, "
        f"+{(peak - base) / 1e9:.2f} GB over the model, forward + backward {seconds:.1f} s, loss {loss.item():.1f}"
    )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rows", type=int, default=8, help="sequences in the micro-batch")
    p.add_argument("--prompt", type=int, default=64, help="prompt tokens per sequence (not trained)")
    p.add_argument("--reply", type=int, default=448, help="trained tokens per sequence")
    p.add_argument("--sft", action="store_true", help="rlvr sft's loss, before and now, instead")
    p.add_argument(
        "--model", default=None, help="--sft: a saved model instead of the tiny one (e.g. models/tictactoe-tiny)"
    )
    p.add_argument("--chunk-elements", type=int, default=None, help=argparse.SUPPRESS)
    p.add_argument("--sft-variant", choices=["full", "chunked", "checkpointed"], default=None, help=argparse.SUPPRESS)
    args = p.parse_args()
    shape = ["--rows", str(args.rows), "--prompt", str(args.prompt), "--reply", str(args.reply)]
    model = ["--model", args.model] if args.model else []
    if args.sft_variant is not None:
        print(measure_sft(args.sft_variant, args.rows, args.prompt, args.reply, args.model), flush=True)
    elif args.chunk_elements is not None:
        print(measure(args.chunk_elements, args.rows, args.prompt, args.reply), flush=True)
    elif args.sft:
        for variant in ("full", "chunked", "checkpointed"):
            subprocess.run([sys.executable, __file__, "--sft-variant", variant, *shape, *model])
    else:
        from rlvr.train.logprobs import CHUNK_ELEMENTS

        for chunk in (0, CHUNK_ELEMENTS):
            subprocess.run([sys.executable, __file__, "--chunk-elements", str(chunk), *shape])


if __name__ == "__main__":
    main()
