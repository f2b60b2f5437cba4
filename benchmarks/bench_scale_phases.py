"""The measurements of `bench_scale.py`, one phase per process (run by it, not by hand):

    python benchmarks/bench_scale_phases.py --phase decode --size 0.5b --work DIR --phase-out OUT.json

`build` writes the random model to DIR/model; the other phases read it. Each writes its
results as JSON to OUT.json. Shapes, workloads and what each phase measures: bench_scale.py.
"""

from __future__ import annotations

import argparse
import functools
import importlib.util
import json
import os
import resource
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

VOCAB = 151_936


@dataclass(frozen=True)
class Shape:
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int


SHAPES = {
    "tiny": Shape(64, 2, 2, 1, 32, 128),  # CPU smoke check, real vocabulary
    "0.5b": Shape(1024, 28, 16, 8, 128, 3072),  # Qwen3-0.6B
    "1.7b": Shape(2048, 28, 16, 8, 128, 6144),  # Qwen3-1.7B
    "4b": Shape(2560, 36, 32, 8, 128, 9728),  # Qwen3-4B
}
SMALL = {"games": 8, "max_tokens": 8, "prefill": (2, 64), "seqs": 8, "prompt": 32, "reply": (64, 128), "micro": 4}
GPU = {"games": 256, "max_tokens": 128, "prefill": (8, 512), "seqs": 64, "prompt": 128, "reply": (32, 256), "micro": 8}


def phase_build(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    import torch
    from transformers import Qwen3ForCausalLM

    from rlvr.models.tiny import default_corpus, sampling_generation_config
    from rlvr.models.tokenizer import ENDOFTEXT, IM_END, train_tokenizer

    tokenizer = train_tokenizer(default_corpus(), vocab_size=4096, model_max_length=4096)
    pad, eos = tokenizer.convert_tokens_to_ids(ENDOFTEXT), tokenizer.convert_tokens_to_ids(IM_END)
    config = qwen3_config(args.size, bos_token_id=pad, eos_token_id=eos, pad_token_id=pad)
    torch.manual_seed(0)
    torch.set_default_dtype(torch.bfloat16)  # built in bf16 on the device: 4B is 8 GB, seconds on a GPU
    with torch.device(args.device):
        model = Qwen3ForCausalLM(config).to(torch.bfloat16)
    torch.set_default_dtype(torch.float32)
    model.generation_config = sampling_generation_config(pad_id=pad, eos_ids=[eos, pad])
    model.save_pretrained(work / "model")
    tokenizer.save_pretrained(work / "model")
    shape = asdict(SHAPES[args.size])
    return {"params": sum(p.numel() for p in model.parameters()), "shape": shape, **environment(args.device)}


def qwen3_config(size: str, **ids: int) -> Any:
    """The transformers config of a size: Qwen3, the real vocabulary, tied embeddings."""
    from transformers import Qwen3Config

    s = SHAPES[size]
    return Qwen3Config(
        vocab_size=VOCAB,
        hidden_size=s.hidden,
        intermediate_size=s.intermediate,
        num_hidden_layers=s.layers,
        num_attention_heads=s.heads,
        num_key_value_heads=s.kv_heads,
        head_dim=s.head_dim,
        max_position_embeddings=4096,
        tie_word_embeddings=True,
        **ids,
    )


def phase_decode(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    from rlvr.clients.local import LocalModel
    from rlvr.train.hardware import device_peak

    w = workload(args.size, args.device)
    lm = LocalModel(str(work / "model"), device=args.device, max_batch_size=w["games"])
    out: dict[str, Any] = {"dtype": str(lm.model.dtype), "games": w["games"], "max_tokens": w["max_tokens"]}
    timed(lm, w, w["max_tokens"])  # warm-up at full size: kernels, CUDA graphs for every slot count
    short = timed(lm, w, 1)  # prefill and one token: what the decode steps are not
    run = timed(lm, w, w["max_tokens"])
    s = SHAPES[args.size]
    kv_per_token = 2 * s.layers * s.kv_heads * s.head_dim * lm.model.dtype.itemsize
    weights = sum(p.numel() * p.element_size() for p in lm.model.parameters())
    rows = (run["tokens"] - short["tokens"]) / max(run["decode_steps"] - short["decode_steps"], 1)
    # a row's keys and values: its whole prompt (not only the part its prefill ran: prompts share
    # a prefix that is prefilled once, and how often depends on arrival timing) + half its reply
    context = run["prompt_tokens_per_request"] + w["max_tokens"] / 2
    out.update(
        tokens_per_s=run["tokens_per_s"], tokens=run["tokens"], decode_steps=run["decode_steps"], rows_per_step=rows
    )
    out["prefill_and_first_token_s"] = short["seconds"]
    out["ms_per_step"] = ms_per_step(short, run)
    out["bytes_per_step"] = weights + rows * context * kv_per_token
    out["prompt_tokens_per_request"] = run["prompt_tokens_per_request"]
    # what the floor's context counted until 2026-12-01 (shared prefixes left out):
    out["prefilled_tokens_per_request"] = run["prompt_tokens"] / max(run["requests"], 1)
    peak = device_peak(lm.device)
    if peak is not None:
        out["floor_ms_per_step"] = 1e3 * out["bytes_per_step"] / peak.bandwidth
        out["floor_share"] = out["floor_ms_per_step"] / out["ms_per_step"]
    if lm.static_cache and not args.no_split:
        out["step_split"] = step_split(lm, w["games"])
    if lm.static_cache:
        out["runs_with_attention"] = runs_with_attention(lm, w, short, compiled=args.compile_decode)
        out["runs_compiled"] = runs_compiled(lm, w, short)
    try:
        out["prefill"] = prefill(lm.model, lm.device, *w["prefill"], peak=peak)
    except Exception as exc:  # e.g. a transformers without logits_to_keep
        out["prefill"] = {"error": f"{type(exc).__name__}: {str(exc)[:300]}"}
    return out


def timed(lm: Any, w: dict[str, Any], max_tokens: int) -> dict[str, Any]:
    """One run of `w["games"]` single-turn requests: `play`'s numbers, with the decode steps and
    prompt tokens it took."""
    from bench_local_model import play

    lm.clear_cache()  # every run prefills its prompts
    before = (lm.stats.decode_steps, lm.stats.prompt_tokens)
    run = play(lm, w["games"], argparse.Namespace(max_turns=1, max_tokens=max_tokens, temperature=1.0))
    return {
        **run,
        "decode_steps": lm.stats.decode_steps - before[0],
        "prompt_tokens": lm.stats.prompt_tokens - before[1],
    }


def ms_per_step(short: dict[str, Any], run: dict[str, Any]) -> float:
    """A run's time less that of a run of one token (prefill and first token), per step between."""
    return 1e3 * (run["seconds"] - short["seconds"]) / max(run["decode_steps"] - short["decode_steps"], 1)


def runs_with_attention(
    lm: Any, w: dict[str, Any], short: dict[str, Any], rounds: int = 3, compiled: bool = False
) -> dict[str, Any]:
    """`alternated_runs` with the step's attention set to `attend` (two matmuls) and to
    `attend_cudnn`, the rest of the step eager or, with `compiled`, through
    `compile_decode`'s compiled parts. A gain in the replayed step must survive a real run (an
    sdpa layout gained 12% in replays and cost 10x in the run, 2026-11-27)."""
    from rlvr.clients import local_step

    decoder = lm.slot_decoder()
    own, own_parts = decoder.attention, decoder.parts
    fns = {"attend": local_step.attend, "attend_cudnn": local_step.attend_cudnn}  # one that raises is reported
    try:
        decoder.parts = local_step.compiled_parts() if compiled else local_step.EAGER
        variants = {name: functools.partial(setattr, decoder, "attention", fn) for name, fn in fns.items()}
        out = alternated_runs(lm, w, short, variants, rounds)
    finally:
        decoder.attention, decoder.parts = own, own_parts
        decoder._drop_graphs()
    return {"in_use": own.__name__, "compiled": compiled, **out}


def runs_compiled(lm: Any, w: dict[str, Any], short: dict[str, Any], rounds: int = 3) -> dict[str, Any]:
    """`alternated_runs` with the step eager and with its layers and sampler through
    torch.compile (`compile_decode`; the attention is cuDNN's either way). The first warm-up of
    each variant includes its compiling (`first_*_run_s`)."""
    from rlvr.clients import local_step

    decoder = lm.slot_decoder()
    own = decoder.parts
    parts = {"eager": local_step.EAGER, "compiled": local_step.compiled_parts()}
    try:
        variants = {name: functools.partial(setattr, decoder, "parts", p) for name, p in parts.items()}
        out = alternated_runs(lm, w, short, variants, rounds)
        if decoder.parts is not parts["compiled"] and "ms_per_step_compiled" in out:
            out["failed"] = "the compiled step fell back to the eager one (see the warning above)"
    finally:
        decoder.parts = own
        decoder._drop_graphs()
    return {"attention": decoder.attention.__name__, **out}


def alternated_runs(
    lm: Any, w: dict[str, Any], short: dict[str, Any], variants: dict[str, Callable[[], None]], rounds: int
) -> dict[str, Any]:
    """Whole generation runs with each of `variants` applied to the slot decoder (graphs
    captured again at each switch, then a warm-up run and a timed run), alternated `rounds`
    times; after each timed run, the captured step alone (`replayed_ms`). Per variant: ms a step
    of the runs and of the replays (medians and each round's), the first warm-up's seconds
    (compiling, where a variant compiles), and the first variant's replay ms over each other's
    (median [min-max] over the rounds). A variant that raises is reported and left out."""
    decoder = lm.slot_decoder()
    runs: dict[str, list[float]] = {name: [] for name in variants}
    replays: dict[str, list[float]] = {name: [] for name in variants}
    out: dict[str, Any] = {}
    for r in range(rounds):
        for name, apply in variants.items():
            if f"error_{name}" in out:
                continue
            apply()
            decoder._drop_graphs()
            try:
                warm = timed(lm, w, w["max_tokens"])  # captures this variant's graphs
            except Exception as exc:  # e.g. no cuDNN sdpa here, a failed compile
                out[f"error_{name}"] = f"{type(exc).__name__}: {str(exc)[:300]}"
                continue
            if r == 0:
                out[f"first_{name}_run_s"] = warm["seconds"]
            runs[name].append(ms_per_step(short, timed(lm, w, w["max_tokens"])))
            replays[name].append(replayed_ms(lm, decoder))
    base = next(iter(variants))
    for name in variants:
        if runs[name]:
            out[f"ms_per_step_{name}"], out[f"ms_per_step_{name}_each"] = statistics.median(runs[name]), runs[name]
            out[f"device_ms_{name}"], out[f"device_ms_{name}_each"] = statistics.median(replays[name]), replays[name]
        if name != base and replays[name] and len(replays[base]) == len(replays[name]):
            ratios = [a / b for a, b in zip(replays[base], replays[name])]
            out[f"device_{base}_over_{name}"] = {"median": statistics.median(ratios), "min": min(ratios), "max": max(ratios)}  # fmt: skip
    return out


def replayed_ms(lm: Any, decoder: Any, repeats: int = 30) -> float:
    """The step at the rows' span where the last run left the slots, replayed `repeats` times
    back to back (its graph captured first if needed): the device's ms a step."""
    import torch

    from rlvr.clients.local_load import attention_backends

    n = decoder.slots
    need = min(int(decoder.pos[:n].max()) + 1, decoder.length)
    state = [t.clone() for t in (decoder.tokens, decoder.pos, decoder.counts)]
    with torch.inference_mode(), attention_backends(lm.device):
        try:
            decoder.step(n, need)
            sync(lm.device)
            t0 = time.perf_counter()
            for _ in range(repeats):
                decoder.step(n, need)
            sync(lm.device)
        finally:
            for t, saved in zip((decoder.tokens, decoder.pos, decoder.counts), state):
                t.copy_(saved)
    return 1e3 * (time.perf_counter() - t0) / repeats


def step_split(lm: Any, rows: int, repeats: int = 30) -> dict[str, float]:
    """Where a decode step's time goes: the captured step alone (forward and sampling, replayed
    back to back: the device's time, no host work between steps; attending over the rows' span
    as generation does, over the whole buffer as it did before, and over the span with `attend`
    and each sdpa candidate of bench_slot_attention as the step's attention, alternated), its sampling
    alone (`draw` on (rows, vocab) float32 logits) and its forward alone (eager). `ms_per_step` less `device_ms`
    is what the host adds per step (reading tokens back, per-row bookkeeping, scheduling)."""
    import torch

    from rlvr.clients import local_step
    from rlvr.clients.local_load import attention_backends
    from rlvr.clients.local_sampling import draw

    decoder = lm.slot_decoder()
    n = min(rows, decoder.slots)

    def per_call(fn: Any) -> float:
        fn()  # warm-up (and the graph capture of this bucket, if it was not captured)
        sync(lm.device)
        t0 = time.perf_counter()
        for _ in range(repeats):
            fn()
        sync(lm.device)
        return 1e3 * (time.perf_counter() - t0) / repeats

    logits = torch.randn(n, lm.model.config.vocab_size, device=lm.device)
    temps = torch.ones(n, device=lm.device)
    keys = torch.arange(n, device=lm.device, dtype=torch.long)
    need = min(int(decoder.pos[:n].max()) + 1, decoder.length)  # as the run left the rows

    def stepped(*args: Any) -> Any:
        """`decoder.step` under the attention backends generation uses (`LocalModel`): an sdpa
        candidate gets the kernel it would get in a real run (without them, torch may pick cuDNN,
        which generation leaves out)."""
        with attention_backends(lm.device):
            return decoder.step(*args)

    def with_attention(fn: Any) -> float:
        """The captured step over the span with the step's attention = fn (graphs captured again)."""
        own = decoder.attention
        decoder.attention = fn
        decoder._drop_graphs()
        try:
            return per_call(lambda: stepped(n, need))
        finally:
            decoder.attention = own
            decoder._drop_graphs()

    from bench_slot_attention import CANDIDATES

    swaps = {"attend": local_step.attend, **CANDIDATES}  # the matmuls too: the step may use cuDNN

    with torch.inference_mode():
        whole, spanned = [], []
        swapped: dict[str, list[float]] = {name: [] for name in swaps}
        for _ in range(3):  # alternated: over the whole buffer, over the rows' span, and the span
            whole.append(per_call(lambda: stepped(n)))  # with each sdpa candidate swapped in
            spanned.append(per_call(lambda: stepped(n, need)))
            for name, fn in swaps.items():
                swapped[name].append(with_attention(fn))
        split = {
            "rows": float(n),
            "device_ms": statistics.median(spanned),
            "device_ms_whole_buffer": statistics.median(whole),
            "device_ms_each": spanned,
            "device_ms_whole_buffer_each": whole,
            **{f"device_ms_attention_{name}": statistics.median(ts) for name, ts in swapped.items()},
            **{f"device_ms_attention_{name}_each": ts for name, ts in swapped.items()},
            "span": float(decoder.span(need)),
            "buffer_length": float(decoder.length),
            "sampling_ms": per_call(lambda: draw(logits, temps, keys)),
            "forward_eager_ms": per_call(lambda: decoder.forward(n, decoder.span(need))),
        }
        if os.environ.get("RLVR_PROFILE") and lm.device.type == "cuda":  # where the eager forward's time goes
            split["profile"] = profile_forward(lambda: decoder.forward(n, decoder.span(need)))
    return split


def profile_forward(fn: Any, calls: int = 5, top: int = 15) -> dict[str, Any]:
    """The CUDA kernels of `calls` runs of `fn`, by total device time: the `top` ones, in ms per
    call (printed as torch.profiler's table too); and per call, the wall time and the sum of
    every kernel's own time (the device's busy time: the rest of the wall, the device waited)."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
        wall = time.perf_counter() - t0
    averages = prof.key_averages()
    events = sorted(averages, key=lambda e: e.device_time_total, reverse=True)
    print(averages.table(sort_by="device_time_total", row_limit=top), file=sys.stderr)
    busy = sum(e.self_device_time_total for e in averages) / 1e3 / calls
    kernels = [
        {"kernel": e.key[:120], "ms_per_call": e.device_time_total / 1e3 / calls, "count_per_call": e.count / calls}
        for e in events[:top]
    ]
    launches = sum(e.count for e in averages) / calls
    return {"wall_ms_per_call": wall * 1e3 / calls, "device_busy_ms_per_call": busy, "launches_per_call": launches, "kernels": kernels}  # fmt: skip


def prefill(model: Any, device: Any, batch: int, length: int, *, peak: Any) -> dict[str, Any]:
    """One no-grad forward of `batch` x `length` random ids, the last position's logits only."""
    import torch

    ids = torch.randint(0, VOCAB, (batch, length), device=device)
    seconds = []
    with torch.no_grad():
        for _ in range(4):  # the first is a warm-up
            sync(device)
            t0 = time.perf_counter()
            model(input_ids=ids, logits_to_keep=1, use_cache=False)
            sync(device)
            seconds.append(time.perf_counter() - t0)
    best = statistics.median(seconds[1:])
    out = {"batch": batch, "length": length, "tokens_per_s": batch * length / best}
    if peak is not None:
        out["mfu"] = 2 * sum(p.numel() for p in model.parameters()) * batch * length / best / peak.flops
    return out


def phase_update(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    import random

    import torch

    from rlvr.train import logprobs
    from rlvr.train.distributed import Dist
    from rlvr.train.losses import LossConfig
    from rlvr.train.model import load_trainable, make_optimizer
    from rlvr.train.sequences import TrainSequence
    from rlvr.train.update import UpdateSettings, update_policy

    w, device = workload(args.size, args.device), torch.device(args.device)
    model = load_trainable(str(work / "model"), lora=None, device=device).eval()
    optimizer = make_optimizer(model, 1e-7)
    rng = random.Random(0)
    seqs = []
    for i in range(w["seqs"]):
        reply = rng.randint(*w["reply"])
        ids = [rng.randrange(VOCAB) for _ in range(w["prompt"] + reply)]
        mask = [0] * w["prompt"] + [1] * reply
        seqs.append(TrainSequence(ids, mask, rng.uniform(-1, 1), [float("nan")] * len(ids), i))
    micro = args.micro_batch_size or (4 if args.size == "4b" else w["micro"])
    variants: dict[str, dict[str, Any]] = {
        "padded": {},
        "packed": {"pack_sequences": True},
        "padded+checkpointing": {"gradient_checkpointing": True},
        "full-logits": {"chunk": 0},
    }
    if device.type == "cuda":  # each decoder layer through torch.compile (fuses the elementwise work)
        variants["padded+compile"] = {"compile_blocks": True}
    if logprobs.unavailable(model) is None:  # "packed" ran torch's varlen kernel; beside it the block mask
        variants["packed+mask"] = {"pack_sequences": True, "mask": True}
        variants["packed+compile"] = {"pack_sequences": True, "compile_blocks": True}
    if importlib.util.find_spec("flash_attn") is not None:
        variants["packed+flash_attention_2"] = {"pack_sequences": True, "attn": "flash_attention_2"}
    out: dict[str, Any] = {"sequences": len(seqs), "tokens": sum(len(s.ids) for s in seqs), "micro_batch": micro}
    out["attn_implementation"] = model.config._attn_implementation
    out["packed_attention"] = logprobs.unavailable(model) or "rlvr_varlen (torch.nn.attention.varlen)"
    for name, v in variants.items():
        if time.time() > args.deadline - 30:
            out[name] = {"skipped": "budget"}
            continue
        how = UpdateSettings(
            "grpo", LossConfig(), 1, micro, 1.0, device.type == "cuda", 1.0, 0,
            pack_sequences=v.get("pack_sequences", False), gradient_checkpointing=v.get("gradient_checkpointing", False),
            compile_blocks=v.get("compile_blocks", False),
        )  # fmt: skip
        saved_chunk, saved_attn = logprobs.CHUNK_ELEMENTS, model.config._attn_implementation
        saved_unavailable = logprobs.unavailable
        try:
            logprobs.CHUNK_ELEMENTS = v.get("chunk", saved_chunk)
            if v.get("mask"):  # packed rows through sdpa with a block-diagonal mask, as before varlen
                logprobs.unavailable = lambda m: "forced: the block mask"  # type: ignore[assignment]
            if "attn" in v:
                model.set_attn_implementation(v["attn"])
            runs, seconds = [], []
            with PeakMemory(device) as memory:
                for _ in range(3):  # the first is a warm-up
                    sync(device)
                    t0 = time.perf_counter()
                    runs.append(update_policy(model, None, seqs, len(seqs), how, optimizer, Dist(device=device)))
                    seconds.append(time.perf_counter() - t0)
            t = runs[1:]
            out[name] = {
                "tokens_per_s": out["tokens"] / statistics.fmean(seconds[1:]),
                **({"mfu": statistics.fmean(r["throughput/train_mfu"] for r in t)} if "throughput/train_mfu" in t[0] else {}),
                "peak_memory_gb": memory.peak,
                "above_start_gb": None if memory.peak is None else memory.peak - memory.start,
            }  # fmt: skip
        except Exception as exc:  # out of memory, a missing kernel: this variant only
            out[name] = {"error": f"{type(exc).__name__}: {str(exc)[:300]}"}
        finally:
            logprobs.CHUNK_ELEMENTS, logprobs.unavailable = saved_chunk, saved_unavailable
            if model.config._attn_implementation != saved_attn:
                model.set_attn_implementation(saved_attn)
            optimizer.zero_grad(set_to_none=True)
            if device.type == "cuda":
                torch.cuda.empty_cache()
        print(f"  update {name}: {out[name]}", flush=True)
    if os.environ.get("RLVR_PROFILE") and device.type == "cuda":  # where the padded update's time goes
        how = UpdateSettings("grpo", LossConfig(), 1, micro, 1.0, True, 1.0, 0)
        out["profile"] = profile_forward(
            lambda: update_policy(model, None, seqs, len(seqs), how, optimizer, Dist(device=device)), calls=2, top=30
        )
        print(f"  update profile: {out['profile']['wall_ms_per_call']:.0f} ms wall, "
              f"{out['profile']['device_busy_ms_per_call']:.0f} ms of kernels per update", flush=True)  # fmt: skip
    return out


def phase_train(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    import torch
    from bench_train_vs_trl import run_rlvr, run_trl

    w = workload(args.size, args.device)
    tokens = 4 if args.size == "tiny" else w["max_tokens"]
    batch = 8 if args.size == "tiny" else 64
    micro = args.micro_batch_size or (4 if args.size in ("tiny", "4b") else 16)
    ns = argparse.Namespace(
        warmup=args.warmup, steps=args.steps, batch_size=batch, group_size=4 if args.size == "tiny" else 8, lr=1e-6,
        max_tokens=tokens, micro_batch_size=micro, device=args.device, gradient_checkpointing=args.size == "4b",
    )  # fmt: skip  # 4b: float32 weights + AdamW are 64 GB before activations, for both trainers
    here = Path(tempfile.mkdtemp(dir=work, prefix=args.phase))
    if args.phase == "rlvr":
        run = run_rlvr(
            work / "model", ns, here, probe_tasks=0, gradient_checkpointing=ns.gradient_checkpointing,
            compile_blocks=args.compile_blocks, compile_decode=args.compile_decode, pack_sequences=args.pack or None,
        )  # fmt: skip
    else:
        run = run_trl(work / "model", ns, here)
    run["peak_memory_gb"] = peak_memory(torch.device(args.device)) / 1e9
    return run


PHASES = {"build": phase_build, "decode": phase_decode, "update": phase_update, "rlvr": phase_train, "trl": phase_train}


def workload(size: str, device: str) -> dict[str, Any]:
    """The work each phase does: the GPU's, or a small one for the tiny model or a CPU."""
    return SMALL if size == "tiny" or device == "cpu" else GPU


def sync(device: Any) -> None:
    import torch

    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


class PeakMemory:
    """The most the CUDA allocator held within the block (None on a CPU: the resident set of
    one process never shrinks back, see bench_logprobs_memory.py for CPU measurements)."""

    def __init__(self, device: Any) -> None:
        self.device, self.peak, self.start = device, None, None

    def __enter__(self) -> PeakMemory:
        import torch

        if self.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(self.device)
            self.start = torch.cuda.memory_allocated(self.device) / 1e9
        return self

    def __exit__(self, *exc: object) -> None:
        if self.device.type == "cuda":
            self.peak = peak_memory(self.device) / 1e9


def peak_memory(device: Any) -> float:
    """Bytes: the most the CUDA allocator held, or this process's peak resident set on a CPU."""
    import torch

    if device.type == "cuda":
        return float(torch.cuda.max_memory_allocated(device))
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024.0


def environment(device: str) -> dict[str, Any]:
    import torch
    import transformers

    from rlvr.train.hardware import peak_for

    name = torch.cuda.get_device_name() if device == "cuda" else "cpu"
    peak = peak_for(name)
    versions = {"torch": torch.__version__, "transformers": transformers.__version__}
    for extra in ("trl", "flash_attn"):
        versions[extra] = getattr(__import__(extra), "__version__", "?") if importlib.util.find_spec(extra) else None
    return {"device": name, "peak": asdict(peak) if peak else None, "versions": versions}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--phase", choices=sorted(PHASES), required=True)
    p.add_argument("--size", choices=sorted(SHAPES), required=True)
    p.add_argument("--work", required=True, help="folder of the model (build writes it)")
    p.add_argument("--phase-out", required=True, help="JSON results of the phase")
    p.add_argument("--device", default="cuda")
    p.add_argument("--steps", type=int, default=3, help="timed optimizer steps per training run")
    p.add_argument("--warmup", type=int, default=1, help="untimed optimizer steps first")
    p.add_argument("--micro-batch-size", type=int, default=None)
    p.add_argument("--compile-blocks", action="store_true", help="rlvr's trainer with compile_blocks")
    p.add_argument("--compile-decode", action="store_true", help="rlvr's trainer with compile_decode")
    p.add_argument("--pack", action="store_true", help="rlvr's trainer with pack_sequences")
    p.add_argument("--no-split", action="store_true", help="decode: skip the step split and the attention runs")
    p.add_argument("--deadline", type=float, default=float("inf"), help="epoch seconds: skip what would run past")
    args = p.parse_args()
    import torch

    torch.manual_seed(0)
    result = PHASES[args.phase](args, Path(args.work))
    Path(args.phase_out).write_text(json.dumps(result, default=str))


if __name__ == "__main__":
    main()
