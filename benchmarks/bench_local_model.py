"""Throughput of LocalModel for many concurrent multi-turn games, against plain `model.generate`.

Every mode plays the same tic-tac-toe games (the built-in `tictactoe` environment; a small
stand-in game when it is not installed) through the ordinary engine, and counts completion
tokens per second of wall time:

    local      LocalModel: concurrent requests share batched decode steps (this is rlvr's client);
               each turn reuses the previous turn's KV cache and prefills only the new tokens;
               requests that arrive together with a long common prefix (the system prompt)
               prefill it once
    local-noshare   LocalModel with reuse across turns but without prefilling a common prefix once
    local-noreuse   the same without KV cache reuse (every request prefills its whole prompt)
    local-dynamic   LocalModel over transformers' `DynamicCache` (`static_cache=False`);
               `local-static` over static per-row KV slots (`static_cache=True`; CUDA graphs
               on CUDA). `local` takes LocalModel's default: static on CUDA where the model
               family allows, dynamic on CPU. `local-dynamic-noreuse` is dynamic without reuse.
               `local-attend` is `local-static` with the step's attention forced to
               `local_step.attend` (on CUDA in bf16 the step picks cuDNN's sdpa by default):
               list both several times, alternated, to compare the two attentions.
               `local-compiled` is `local-static` with `compile_decode=True` (the step's layers
               and sampler through torch.compile; its warm-up compiles)
    generate   `model.generate` once per request, one request at a time (the baseline)
    generate-nocudnn   the same with LocalModel's attention kernels (no cuDNN attention, which
               rebuilds its plan for every new sequence length on some torch/GPU pairs)
    padded     `model.generate` on left-padded batches of whatever requests are waiting
               (one temperature and max length per batch; rows wait for the longest)
    cb         transformers' continuous batching (`init_continuous_batching`, CUDA)

The baseline is serial, so its tokens/s does not depend on the number of games; it plays
`--baseline-games` games to keep the run short. With a random-weight tiny model the replies are
noise: every move is invalid, so games last `--max-turns` turns and replies run to
`--max-tokens` (or an end-of-turn token sampled by chance).

    python benchmarks/bench_local_model.py                      # CPU, tiny model built on the fly
    python benchmarks/bench_local_model.py --device cuda --preset small --games 256
    python benchmarks/bench_local_model.py --model runs/sft/final --modes local,generate,cb
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import tempfile
import threading
import time
import uuid
from typing import Any

import torch

from rlvr import Completion, Messages, MultiTurnEnv, Rubric, SamplingArgs
from rlvr.clients.local import LocalModel
from rlvr.clients.local_load import attention_backends
from rlvr.engine import run_rollouts
from rlvr.types import Usage


@contextlib.contextmanager
def _shared_prefix(on: bool):
    """Turn LocalModel's prefill-a-common-prefix-once off for a run (`local-noshare`)."""
    from rlvr.clients import local_batch

    saved = local_batch.MIN_SHARED
    local_batch.MIN_SHARED = saved if on else 1 << 62
    try:
        yield
    finally:
        local_batch.MIN_SHARED = saved


class PerRequestGenerate:
    """`model.generate` for each request, one at a time (`no_cudnn`: with LocalModel's choice of
    attention kernels)."""

    name = "generate"

    def __init__(self, lm: LocalModel, no_cudnn: bool = False) -> None:
        self.lm, self.lock, self.no_cudnn = lm, threading.Lock(), no_cudnn

    async def chat(self, messages: Messages, sampling: SamplingArgs, tools: Any = None) -> Completion:
        return await asyncio.to_thread(self._generate, self.lm.render(messages, tools), sampling)

    def _generate(self, ids: list[int], s: SamplingArgs) -> Completion:
        backends = attention_backends(self.lm.device) if self.no_cudnn else contextlib.nullcontext()
        with self.lock, backends:
            out = _generate(self.lm, [ids], s.max_tokens or 64, s.temperature, s.top_p)
        return _completion(self.lm, ids, out[0])


class PaddedGenerate:
    """`model.generate` on left-padded batches of the requests waiting when the last one ended."""

    name = "padded"

    def __init__(self, lm: LocalModel) -> None:
        self.lm = lm
        self.pending: list[tuple[list[int], SamplingArgs, asyncio.Future[Completion]]] = []
        self.running = False

    async def chat(self, messages: Messages, sampling: SamplingArgs, tools: Any = None) -> Completion:
        future: asyncio.Future[Completion] = asyncio.get_running_loop().create_future()
        self.pending.append((self.lm.render(messages, tools), sampling, future))
        if not self.running:
            self.running = True
            asyncio.get_running_loop().create_task(self._drain())
        return await future

    async def _drain(self) -> None:
        await asyncio.sleep(0.005)  # let concurrent requests arrive
        while self.pending:
            batch, self.pending = (
                self.pending[: self.lm.max_batch_size],
                self.pending[self.lm.max_batch_size :],
            )
            s = batch[0][1]
            max_tokens = max(b[1].max_tokens or 64 for b in batch)
            outs = await asyncio.to_thread(
                _generate, self.lm, [b[0] for b in batch], max_tokens, s.temperature, s.top_p
            )
            for (ids, _, future), out in zip(batch, outs):
                future.set_result(_completion(self.lm, ids, out))
            await asyncio.sleep(0.005)
        self.running = False


class ContinuousBatching:
    """transformers' ContinuousBatchingManager (paged attention); one sampling config for all."""

    name = "cb"

    def __init__(self, lm: LocalModel, sampling: SamplingArgs) -> None:
        from transformers import GenerationConfig

        self.lm = lm
        config = GenerationConfig(
            do_sample=sampling.temperature > 0,
            temperature=sampling.temperature or 1.0,
            top_p=sampling.top_p,
            max_new_tokens=sampling.max_tokens or 64,
            eos_token_id=sorted(lm.eos_ids),
            pad_token_id=lm.pad_id,
        )
        self.manager = lm.model.init_continuous_batching(generation_config=config)
        self.manager.start()

    async def chat(self, messages: Messages, sampling: SamplingArgs, tools: Any = None) -> Completion:
        ids = self.lm.render(messages, tools)
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        rid = uuid.uuid4().hex

        def done(out: Any) -> None:
            if out.is_finished() and not future.done():
                future.set_result(out)

        self.manager.register_result_handler(rid, done)
        self.manager.add_request(ids, request_id=rid, max_new_tokens=sampling.max_tokens)
        out = await future
        if out.error:
            raise RuntimeError(out.error)
        return _completion(self.lm, ids, list(out.generated_tokens))

    def close(self) -> None:
        self.manager.stop(block=True)


def _generate(
    lm: LocalModel, prompts: list[list[int]], max_tokens: int, temperature: float, top_p: float
) -> list[list[int]]:
    width = max(map(len, prompts))
    ids = torch.tensor([[lm.pad_id] * (width - len(p)) + p for p in prompts], device=lm.device)
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts], device=lm.device)
    sample = (
        {"do_sample": True, "temperature": temperature, "top_p": top_p} if temperature > 0 else {"do_sample": False}
    )
    out = lm.model.generate(
        input_ids=ids,
        attention_mask=mask,
        max_new_tokens=max_tokens,
        pad_token_id=lm.pad_id,
        eos_token_id=sorted(lm.eos_ids),
        **sample,
    )
    rows = []
    for row in out[:, width:].tolist():
        end = next((i + 1 for i, t in enumerate(row) if t in lm.eos_ids), len(row))
        rows.append(row[:end])
    return rows


def _completion(lm: LocalModel, prompt: list[int], ids: list[int]) -> Completion:
    text = lm.tokenizer.decode(ids, skip_special_tokens=True)
    return Completion(
        text=text,
        token_ids=ids,
        prompt_token_ids=prompt,
        usage=Usage(prompt_tokens=len(prompt), completion_tokens=len(ids)),
    )


class StandIn(MultiTurnEnv):
    """A stand-in multi-turn game when tictactoe is not installed: the env always asks again."""

    def __init__(self, n: int, max_turns: int) -> None:
        rows = [{"question": f"Game {i}. Pick a cell from 0 to 8 and answer <move>N</move>."} for i in range(n)]
        super().__init__(rows, rubric=Rubric([]), max_turns=max_turns)

    async def env_response(self, messages: Messages, state: Any) -> Messages:
        return [
            {
                "role": "user",
                "content": "Invalid move. The board:\n0 | 1 | 2\n3 | 4 | 5\n6 | 7 | 8\nTry again.",
            }
        ]


def make_env(games: int, max_turns: int) -> Any:
    try:
        from rlvr.registry import load_environment

        return load_environment("tictactoe", num_tasks=max(games, 64), max_turns=max_turns)
    except Exception as exc:  # not installed: the stand-in plays the same shape of game
        print(f"(tictactoe unavailable: {exc}; using a stand-in game)")
        return StandIn(games, max_turns)


def play(client: Any, games: int, args: argparse.Namespace) -> dict[str, float]:
    env = make_env(games, args.max_turns)
    sampling = SamplingArgs(max_tokens=args.max_tokens, temperature=args.temperature, top_p=1.0)
    t0 = time.perf_counter()
    rollouts = asyncio.run(run_rollouts(env, client, env.tasks("train")[:games], concurrency=games, sampling=sampling))
    seconds = time.perf_counter() - t0
    errors = [r.error for r in rollouts if r.error]
    if errors:
        raise RuntimeError(f"{len(errors)} rollouts failed, e.g. {errors[0]}")
    tokens = sum(t.completion.usage.completion_tokens for r in rollouts for t in r.turns)
    requests = sum(len(r.turns) for r in rollouts)
    played = {r.task_id: [tuple(t.completion.token_ids) for t in r.turns] for r in rollouts}
    prompts = [len(t.completion.prompt_token_ids or ()) for r in rollouts for t in r.turns]
    return {
        "games": games,
        "requests": requests,
        "prompt_tokens_per_request": sum(prompts) / max(len(prompts), 1),  # whole prompts, kept or shared parts too
        "tokens": tokens,
        "seconds": seconds,
        "tokens_per_s": tokens / seconds,
        "played": played,  # each game's completion token ids, to compare two modes' games
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", help="model folder (default: build a tiny model with --preset)")
    p.add_argument("--preset", default="tiny", help="rlvr.models preset when --model is not given")
    p.add_argument("--device", default=None, help="cpu or cuda (default: cuda when available)")
    p.add_argument("--dtype", default=None, help="float32 / bfloat16 (default: bf16 on cuda)")
    p.add_argument("--games", type=int, default=256, help="concurrent games for the batched modes")
    p.add_argument("--baseline-games", type=int, default=8, help="games for the serial per-request baseline")
    p.add_argument("--max-turns", type=int, default=4, help="model turns per game")
    p.add_argument("--max-tokens", type=int, default=48, help="max tokens per reply")
    p.add_argument("--temperature", type=float, default=1.0)
    p.add_argument(
        "--modes",
        default="local,generate,padded",
        help="comma-separated: local,local-noshare,local-noreuse,local-static,local-attend,local-dynamic,"
        "local-dynamic-noreuse,generate,generate-nocudnn,padded,cb",
    )
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    args = p.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    path = args.model
    if path is None:
        from rlvr.models import build_tiny_model

        path = str(build_tiny_model(tempfile.mkdtemp(prefix="rlvr-bench-"), preset=args.preset))
    lm = LocalModel(path, device=args.device, dtype=args.dtype, max_batch_size=args.games)
    device = f"{lm.device}" + (
        f" ({torch.cuda.get_device_name(lm.device)})"
        if lm.device.type == "cuda"
        else f" ({torch.get_num_threads()} threads)"
    )
    params = sum(p.numel() for p in lm.model.parameters())
    print(f"model {path}: {params / 1e6:.1f}M parameters, {lm.model.dtype}, on {device}")
    print(
        f"games: {args.games} concurrent (baseline {args.baseline_games}), {args.max_turns} turns, "
        f"{args.max_tokens} max tokens, temperature {args.temperature}"
    )

    def variant(**kw: Any) -> LocalModel:
        return LocalModel(path, model=lm.model, tokenizer=lm.tokenizer, max_batch_size=args.games, **kw)

    clients = {
        "local": lm,
        "local-noshare": lm,
        "local-noreuse": variant(reuse_cache=False),
        "local-dynamic": variant(static_cache=False),
        "local-static": variant(static_cache=True),
        "local-dynamic-noreuse": variant(static_cache=False, reuse_cache=False),
    }
    if "local-compiled" in args.modes.split(","):
        clients["local-compiled"] = variant(static_cache=True, compile_decode=True)
    if "local-attend" in args.modes.split(","):
        from rlvr.clients.local_step import attend

        clients["local-attend"] = variant(static_cache=True)
        decoder = clients["local-attend"].slot_decoder()  # before its first step captures a graph
        print(f"local-static's step attention: {decoder.attention.__name__}; local-attend's: attend")
        decoder.attention = attend
    play(lm, min(args.games, 8), args)  # warm-up (allocations, kernels)
    results: dict[str, dict[str, float]] = {}
    for mode in args.modes.split(","):
        runs = sum(1 for k in results if k.split("#")[0] == mode)
        key = mode if not runs else f"{mode}#{runs + 1}"  # a mode may be listed more than once
        try:
            if mode in clients:
                client = clients[mode]
                if client is not lm:
                    play(client, min(args.games, 8), args)  # its own warm-up (graphs)
                client.clear_cache()  # replayed games must not hit the last run's entries
                s0 = dataclasses.replace(client.stats)
                with _shared_prefix(mode != "local-noshare"):
                    results[key] = play(client, args.games, args)
                for k in ("prefills", "decode_steps", "prompt_tokens", "reused_tokens", "shared_tokens"):
                    results[key][k] = getattr(client.stats, k) - getattr(s0, k)
            elif mode == "generate":
                results[key] = play(PerRequestGenerate(lm), args.baseline_games, args)
            elif mode == "generate-nocudnn":
                results[key] = play(PerRequestGenerate(lm, no_cudnn=True), args.baseline_games, args)
            elif mode == "padded":
                results[key] = play(PaddedGenerate(lm), args.games, args)
            elif mode == "cb":
                sampling = SamplingArgs(max_tokens=args.max_tokens, temperature=args.temperature)
                cb = ContinuousBatching(lm, sampling)
                try:
                    play(cb, min(args.games, 8), args)  # warm-up (CUDA graphs)
                    results[key] = play(cb, args.games, args)
                finally:
                    cb.close()
            else:
                raise SystemExit(f"unknown mode {mode!r}")
        except Exception as exc:
            print(f"{mode:<17} unavailable: {type(exc).__name__}: {str(exc)[:200]}")
    base = results.get("generate", {}).get("tokens_per_s")
    print(
        f"{'mode':<17} {'games':>6} {'requests':>9} {'tokens':>8} {'seconds':>8} {'tokens/s':>10} {'vs generate':>12}"
    )
    for mode, r in results.items():
        ratio = f"{r['tokens_per_s'] / base:.1f}x" if base else "-"
        print(
            f"{mode:<17} {r['games']:>6.0f} {r['requests']:>9.0f} {r['tokens']:>8.0f} {r['seconds']:>8.2f} "
            f"{r['tokens_per_s']:>10.0f} {ratio:>12}"
        )
    first = {mode.split("#")[0]: r["played"] for mode, r in reversed(results.items())}
    if "local-static" in first and "local-attend" in first and args.temperature == 0:
        a, b = first["local-static"], first["local-attend"]
        same = sum(a[k] == b.get(k) for k in a)
        print(f"greedy games token for token the same under both attentions: {same} of {len(a)}")
    for mode, r in results.items():
        if mode.split("#")[0] in clients:
            print(
                f"{mode}: {r['requests']:.0f} requests in {r['prefills']:.0f} prefills and "
                f"{r['decode_steps']:.0f} decode steps (mean {r['tokens'] / max(r['decode_steps'], 1):.0f} "
                f"rows/step); prompt tokens prefilled {r['prompt_tokens']:.0f} "
                f"(+ {r['shared_tokens']:.0f} once for rows sharing them), reused {r['reused_tokens']:.0f}"
            )


if __name__ == "__main__":
    main()
