"""Where the static-slot decode step's device time goes: a Qwen3-shaped random model (the
shapes of bench_scale.py) on CUDA, 256 slots at positions 100-199, the step replayed as a CUDA
graph, eager and with `compile_decode`'s compiled parts:

    python benchmarks/bench_decode_profile.py --size 0.5b

For each: ms per replayed step (3 rounds of 30 replays), then torch.profiler over 5 replays:
the kernels' time per step, how many kernels a step launches, and the `--top` kernels by time.
Random keys and values fill the buffers (the step's cost does not depend on their values).
"""

from __future__ import annotations

import argparse
import time

import torch
from bench_scale_phases import qwen3_config
from torch.profiler import ProfilerActivity, profile
from transformers import AutoModelForCausalLM

from rlvr.clients.local_load import attention_backends
from rlvr.clients.local_slots import SlotDecoder


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--size", default="0.5b", help="a bench_scale.py size: 0.5b, 1.7b, 4b")
    p.add_argument("--slots", type=int, default=256)
    p.add_argument("--top", type=int, default=8)
    args = p.parse_args()
    torch.manual_seed(0)
    dev = torch.device("cuda")
    config = qwen3_config(args.size)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16).to(dev).eval()
    need = 232  # the rows' highest position + 1 (they start at 100-199)
    for compiled in (False, True):
        dec = SlotDecoder(model, graphs=True, max_length=1024, dtype=torch.bfloat16, compiled=compiled)
        dec.reserve(args.slots, 256)
        dec.keys.normal_()
        dec.values.normal_()
        dec.tokens.copy_(torch.randint(0, config.vocab_size, (dec.slots,), device=dev))
        dec.temps.fill_(1.0)
        start = torch.randint(100, 200, (dec.slots,), device=dev)
        name = "compiled" if compiled else "eager"
        with torch.inference_mode(), attention_backends(dev):

            def reset() -> None:
                dec.pos.copy_(start)
                dec.counts.zero_()

            reset()
            dec.step(args.slots, need)  # compiles (the first time) and captures
            for _ in range(3):
                reset()
                torch.cuda.synchronize()
                t0 = time.perf_counter()
                for _ in range(30):
                    dec.step(args.slots, need)
                torch.cuda.synchronize()
                ms = 1e3 * (time.perf_counter() - t0) / 30
                print(
                    f"{args.size} {name}: {ms:.3f} ms a replayed step (span {dec.span(need)}, {dec.attention.__name__})"
                )
            reset()
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                for _ in range(5):
                    dec.step(args.slots, need)
                torch.cuda.synchronize()
        events = prof.key_averages()
        busy = sum(e.self_device_time_total for e in events) / 5 / 1e3
        launches = sum(e.count for e in events) / 5
        print(f"{args.size} {name}: kernels {busy:.3f} ms a step, {launches:.0f} kernels a step")
        print(events.table(sort_by="self_cuda_time_total", row_limit=args.top, max_name_column_width=60))


if __name__ == "__main__":
    main()
