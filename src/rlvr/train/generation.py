"""Where training rollouts are generated: in process, or on a running vLLM server.

- In process (the default): `LocalModel` generates with the very model being trained, so there
  is no copy and no weight sync; after a step only its KV caches (of the old weights) go.
- On a vLLM server (`vllm_url`): `OpenAIClient` asks `/v1/chat/completions` for `logprobs`
  and vLLM's `return_token_ids`, which give the prompt ids and the sampled ids the trainer trains
  on (never re-tokenised text). Before the first rollout the trainer checks that the server
  serves the model it trains (`/v1/models`) and answers with ids and logprobs, then pushes the
  starting weights; after every optimizer step it pushes the new ones
  (`rlvr.train.weight_sync`), so each step's rollouts come from the current policy.

With overlap (`--async`), the next batch is played during the update, on weights one step
behind: in process, a `Snapshot` of the trainable weights refreshed before each batch starts,
played by a second `LocalModel` (`open_player`); on a server, the weights it has, since the new
ones are pushed only after that batch is in. The snapshot's no-grad pass gives the old
log-probs of the update that follows (`rlvr.train.update`), on either path.

The server's logprobs feed only `logprob/gen_mismatch`. vLLM reports the logprobs of the raw
logits unless started with `--logprobs-mode processed_logprobs`; the trainer's are at the
sampling temperature, so at a temperature other than 1 the metric is only meaningful in that mode.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from rlvr.clients.base import ChatClient
from rlvr.clients.local import LocalModel
from rlvr.errors import UsageError
from rlvr.train.config import TrainConfig
from rlvr.train.distributed import Dist
from rlvr.train.model import use_bf16
from rlvr.train.session import RunAsync
from rlvr.types import SamplingArgs

if TYPE_CHECKING:  # the server path's modules import openai: loaded only when a server is named
    from rlvr.clients.openai import OpenAIClient
    from rlvr.train.weight_sync import WeightSync

REQUEST_TIMEOUT_S = 600.0
"""Deadline of one generation request to the server (a turn of a large batch may queue)."""


class Generation:
    """The client that plays the rollouts, and what happens to it after each optimizer step."""

    def __init__(self, client: ChatClient, sync: WeightSync | None = None) -> None:
        self.client, self.sync = client, sync

    def weights_changed(self) -> None:
        """The local model's weights were changed in place (a weight average swapped in or out):
        its kept KV caches go. (A server's weights are not swapped: see TrainConfig.ema_decay.)"""
        if isinstance(self.client, LocalModel):
            self.client.clear_cache()

    def counters(self) -> dict[str, float]:
        """The in-process generator's running counts (`GenerationStats`: prefills, decode steps,
        prompt tokens prefilled, reused and shared; `TokenStats`: chat-template renders and the
        characters tokenized), {} for a server. A step's `gen/*` metrics
        are their differences across its rollouts."""
        if not isinstance(self.client, LocalModel):
            return {}
        stats = self.client.stats
        return {
            "gen/prefills": stats.prefills,
            "gen/decode_steps": stats.decode_steps,
            "gen/prefilled_tokens": stats.prompt_tokens,
            "gen/reused_tokens": stats.reused_tokens,
            "gen/shared_tokens": stats.shared_tokens,
            "gen/renders": self.client.prompts.stats.renders,
            "gen/tokenized_chars": self.client.prompts.stats.chars,
        }

    def after_step(self, model: nn.Module, step: int, run_async: RunAsync[Any], dist: Dist) -> None:
        """Make the next rollouts come from the weights of `step`."""
        if self.sync is None:
            self.weights_changed()  # the kept KV caches belong to the old weights
            return
        run_async(self.sync.push(model, step))
        dist.barrier()  # no rank generates before rank 0 has pushed


class Snapshot:
    """A frozen copy of the trainable weights that overlap plays the next batch with (frozen
    weights and buffers are shared, not copied: LoRA copies only its adapters)."""

    def __init__(self, model: nn.Module) -> None:
        shared = {id(t): t for t in [*model.parameters(), *model.buffers()] if not t.requires_grad}
        self.model = copy.deepcopy(model, memo=shared)
        pairs = zip(self.model.parameters(), model.parameters(), strict=True)
        self.pairs = [(mine, theirs) for mine, theirs in pairs if theirs.requires_grad]
        for mine, _ in self.pairs:
            mine.requires_grad_(False)

    @torch.no_grad()
    def refresh(self) -> None:
        """Copy the trained weights in (in place: a decoder's CUDA graphs stay valid)."""
        for mine, theirs in self.pairs:
            mine.copy_(theirs)


def open_player(cfg: TrainConfig, generation: Generation, snapshot: Snapshot, tokenizer: Any, dist: Dist) -> Generation:
    """What plays the batches ahead (overlap): in process, a second `LocalModel` on the snapshot;
    on a vLLM server, the server itself, whose weights change only after the update."""
    if generation.sync is not None:
        return generation
    local = LocalModel(
        cfg.model,
        model=snapshot.model,
        tokenizer=tokenizer,
        max_batch_size=max(cfg.batch_size // dist.world, 1),
        autocast="bfloat16" if use_bf16(cfg.bf16, dist.device) else None,
        compile_decode=cfg.compile_decode,
    )
    return Generation(local)


def open_generation(
    cfg: TrainConfig,
    model: nn.Module,
    tokenizer: Any,
    *,
    run_dir: Path,
    step: int,
    dist: Dist,
    run_async: RunAsync[Any],
) -> Generation:
    """The generation backend of `cfg` (local: under bf16 autocast where `use_bf16`); on a vLLM
    server, checked and given the weights of `step`."""
    batch = max(cfg.batch_size // dist.world, cfg.eval_tasks)
    if cfg.vllm_url is None:
        local = LocalModel(
            cfg.model,
            model=model,
            tokenizer=tokenizer,
            max_batch_size=batch,
            autocast="bfloat16" if use_bf16(cfg.bf16, dist.device) else None,
            compile_decode=cfg.compile_decode,
        )
        return Generation(local)
    from rlvr.clients.openai import OpenAIClient
    from rlvr.clients.vllm import VLLMServer
    from rlvr.train.weight_sync import TRANSPORTS, LoraSync, TransferSync

    server = VLLMServer(cfg.vllm_url)
    name = run_async(server.served_name(cfg.model))
    client = OpenAIClient(name, base_url=server.openai_url, timeout_s=REQUEST_TIMEOUT_S, concurrency=batch)
    run_async(check_token_ids(client, server.url))
    sync: WeightSync
    if cfg.sync == "lora":
        sync = LoraSync(server, client, run_dir / "vllm_adapters", main=dist.main)
    else:
        sync = TransferSync(server, TRANSPORTS[cfg.sync](), main=dist.main)
    run_async(sync.setup(model))
    generation = Generation(client, sync)
    generation.after_step(model, step, run_async, dist)  # the server starts from the trainer's weights
    return generation


async def check_token_ids(client: OpenAIClient, url: str) -> None:
    """One short request: `UsageError` unless the answer holds prompt ids, sampled ids and logprobs."""
    reply = await client.chat([{"role": "user", "content": "Hi"}], SamplingArgs(max_tokens=1, logprobs=True))
    got = {"prompt_token_ids": reply.prompt_token_ids, "token_ids": reply.token_ids, "logprobs": reply.logprobs}
    missing = [k for k, v in got.items() if v is None]
    if missing:
        raise UsageError(
            f"the server at {url} answered without {', '.join(missing)}; training trains on the sampled ids, so "
            "it needs a vLLM server that honours return_token_ids and logprobs (vLLM >= 0.10.2)"
        )
