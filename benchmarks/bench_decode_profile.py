"""Where the static-slot decode step's device time goes: a Qwen3-shaped random model (the
shapes of bench_scale.py) on CUDA, 256 slots at positions 100-199, the step replayed as a CUDA
graph, eager and with `compile_decode`'s compiled parts, with each of the step's attentions that
runs here (`--attentions`; default: the one the decoder picks):

    python benchmarks/bench_decode_profile.py --size 0.5b --attentions attend,attend_cudnn

For each: ms per replayed step (3 rounds of 30 replays), then bench_scale's `profile_forward`
over 5 replays: the kernels' time a step, how many kernels a step launches, and the `--top`
kernels by time. Random keys and values fill the buffers (the step's cost does not depend on
their values).
"""

from __future__ import annotations

import argparse
import itertools
import time

import torch
from bench_scale_phases import profile_forward, qwen3_config
from transformers import AutoModelForCausalLM

from rlvr.clients import local_step
from rlvr.clients.local_decode import SlotDecoder
from rlvr.clients.local_load import attention_backends


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--size", default="0.5b", help="a bench_scale.py size: 0.5b, 1.7b, 4b")
    p.add_argument("--slots", type=int, default=256)
    p.add_argument("--top", type=int, default=8)
    p.add_argument("--attentions", default="", help="comma-separated names in rlvr.clients.local_step (attend, ...)")
    args = p.parse_args()
    torch.manual_seed(0)
    dev = torch.device("cuda")
    config = qwen3_config(args.size)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16).to(dev).eval()
    need = 232  # the rows' highest position + 1 (they start at 100-199)
    for attention, compiled in itertools.product(
        args.attentions.split(",") if args.attentions else [""], (False, True)
    ):
        dec = SlotDecoder(model, graphs=True, max_length=1024, dtype=torch.bfloat16, compiled=compiled)
        if attention:
            dec.attention = getattr(local_step, attention)
        dec.reserve(args.slots, 256)
        dec.keys.normal_()
        dec.values.normal_()
        dec.tokens.copy_(torch.randint(0, config.vocab_size, (dec.slots,), device=dev))
        dec.temps.fill_(1.0)
        start = torch.randint(100, 200, (dec.slots,), device=dev)
        name = f"{dec.attention.__name__} " + ("compiled" if compiled else "eager")

        def step() -> None:  # from the same positions each time: the span stays put
            dec.pos.copy_(start)
            dec.counts.zero_()
            dec.step(args.slots, need)

        with torch.inference_mode(), attention_backends(dev):
            step()  # compiles (the first time) and captures
            for _ in range(3):
                torch.cuda.synchronize()
                t0 = time.perf_counter()
                for _ in range(30):
                    step()
                torch.cuda.synchronize()
                ms = 1e3 * (time.perf_counter() - t0) / 30
                print(f"{args.size} {name}: {ms:.3f} ms a replayed step (span {dec.span(need)})")
            prof = profile_forward(step, calls=5, top=args.top)
        print(
            f"{args.size} {name}: kernels {prof['device_busy_ms_per_call']:.3f} ms a step, "
            f"{prof['launches_per_call']:.0f} kernels a step"
        )


if __name__ == "__main__":
    main()
