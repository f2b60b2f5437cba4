"""The token sampler of LocalModel's decode step (`rlvr.clients.local_sampling.draw`) against the
ones it replaced, written out below: Gumbel noise hashed per row and token id (the first), and
the inverse CDF over one float64 running sum of the whole row (the second); on (rows,
vocabulary) float32 logits, alternated, several repeats:

    python benchmarks/bench_sampling.py                        # CPU, 64 rows x 151,936
    python benchmarks/bench_sampling.py --device cuda --rows 256 --compile

All draw from softmax(logits / T) with per-row keys; only the time differs. Prints each
sampler's ms per call (median and range over the repeats) and each earlier one's / the current
one's. `--compile` adds `draw` through torch.compile (dynamic shapes, compiled before timing).
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from rlvr.clients.local_sampling import _M32, _mix32, draw, row_key, uniform


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


def running_sum_draw(
    logits: torch.Tensor, temps: torch.Tensor, keys: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """The sampler before block sums: the inverse CDF over a float64 running sum of the whole
    row (a (rows, vocabulary) float64 array written and searched)."""
    scaled = logits / torch.where(temps > 0, temps, 1.0)[:, None]
    lse = torch.logsumexp(scaled, dim=-1, keepdim=True)
    cdf = (scaled - scaled.amax(dim=-1, keepdim=True)).exp_().double().cumsum_(dim=-1)
    total = cdf[:, -1]
    index = torch.searchsorted(cdf, uniform(keys)[:, None] * total[:, None]).squeeze(1).clamp_(max=cdf.shape[1] - 1)
    choice = torch.where((temps > 0) & torch.isfinite(total), index, logits.argmax(dim=-1))
    return choice, (scaled.gather(1, choice[:, None]) - lse).squeeze(1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--rows", type=int, default=64)
    parser.add_argument("--vocab", type=int, default=151_936)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--calls", type=int, default=5, help="timed calls per repeat")
    parser.add_argument("--compile", action="store_true", help="also draw through torch.compile")
    args = parser.parse_args()
    device = torch.device(args.device)
    logits = 3 * torch.randn(args.rows, args.vocab, generator=torch.Generator().manual_seed(0)).to(device)
    temps = torch.ones(args.rows, device=device)
    keys = row_key(torch.arange(args.rows, device=device), torch.zeros(args.rows, dtype=torch.long, device=device))

    def sync() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    samplers = {"hashed Gumbel": baseline_draw, "one running sum": running_sum_draw, "draw (block sums)": draw}
    if args.compile:
        samplers["draw, compiled"] = torch.compile(draw, dynamic=True)
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
    new = times["draw (block sums)"]
    for name, ms in times.items():
        if name != "draw (block sums)":
            ratios = [b / n for b, n in zip(ms, new, strict=True)]
            print(f"  {name} / draw: {statistics.median(ratios):.2f}x [{min(ratios):.2f}-{max(ratios):.2f}]")


if __name__ == "__main__":
    main()
