"""The token sampler of LocalModel's decode step (`rlvr.clients.local_sampling.draw`) against the
one it replaced (Gumbel noise hashed per row and token id, written out below as the baseline),
on (rows, vocabulary) float32 logits, alternated, several repeats:

    python benchmarks/bench_sampling.py                        # CPU, 64 rows x 151,936
    python benchmarks/bench_sampling.py --device cuda --rows 256

Both draw from softmax(logits / T) with per-row keys; only the time differs. Prints each
sampler's ms per call (median and range over the repeats) and the baseline / current ratio.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from rlvr.clients.local_sampling import _M32, _mix32, draw, row_key


def baseline_draw(logits: torch.Tensor, temps: torch.Tensor, keys: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The sampler before inverse-CDF draws: argmax of logits / T plus Gumbel noise hashed from
    (row key, token id) in int64, 24-bit uniforms."""
    scaled = logits / torch.where(temps > 0, temps, 1.0)[:, None]
    logp = torch.log_softmax(scaled, dim=-1)
    salt = _mix32(torch.arange(logits.shape[-1], device=logits.device, dtype=torch.long) * 0x27D4EB2F & _M32)
    bits = _mix32(keys[:, None] ^ salt[None, :])
    u = ((bits >> 8).float() + 0.5) * 2.0**-24
    sampled = (scaled - torch.log(-torch.log(u))).argmax(dim=-1)
    choice = torch.where(temps > 0, sampled, logits.argmax(dim=-1))
    return choice, logp.gather(1, choice[:, None]).squeeze(1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--rows", type=int, default=64)
    parser.add_argument("--vocab", type=int, default=151_936)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--calls", type=int, default=5, help="timed calls per repeat")
    args = parser.parse_args()
    device = torch.device(args.device)
    logits = 3 * torch.randn(args.rows, args.vocab, generator=torch.Generator().manual_seed(0)).to(device)
    temps = torch.ones(args.rows, device=device)
    keys = row_key(torch.arange(args.rows, device=device), torch.zeros(args.rows, dtype=torch.long, device=device))

    def sync() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    samplers = {"baseline (hashed Gumbel)": baseline_draw, "draw (inverse CDF)": draw}
    times: dict[str, list[float]] = {name: [] for name in samplers}
    with torch.inference_mode():
        for fn in samplers.values():  # warm-up
            fn(logits, temps, keys)
        for _ in range(args.repeats):  # alternated, so drift in the machine hits both
            for name, fn in samplers.items():
                sync()
                t0 = time.perf_counter()
                for _ in range(args.calls):
                    fn(logits, temps, keys)
                sync()
                times[name].append(1e3 * (time.perf_counter() - t0) / args.calls)
    print(
        f"{device}, {torch.get_num_threads()} threads, {args.rows} rows x {args.vocab} tokens, {args.repeats} repeats"
    )
    for name, ms in times.items():
        print(f"  {name:26s} {statistics.median(ms):9.2f} ms a call [{min(ms):.2f}-{max(ms):.2f}]")
    base, new = times["baseline (hashed Gumbel)"], times["draw (inverse CDF)"]
    ratios = [b / n for b, n in zip(base, new, strict=True)]
    print(f"  baseline / draw: {statistics.median(ratios):.2f}x [{min(ratios):.2f}-{max(ratios):.2f}]")


if __name__ == "__main__":
    main()
