"""LocalModel: a transformers causal LM in this process, serving many rollouts at once.

Concurrent `chat()` calls (hundreds of multi-turn games) are queued; one background thread
decodes them together, one token per step for the whole batch, over a KV cache:

- **Admission**: a waiting request joins the running batch between two decode steps (its prompt
  prefilled with the others that arrived meanwhile), and a finished reply is answered at once,
  so a game whose reply came back early plays on. Caches that are not a plain `DynamicCache`
  (sliding-window or hybrid layers) fall back to waves. See `rlvr.clients.local_batch`.
- **Per request**: max_tokens, EOS (the tokenizer's and the generation config's), stop
  strings, temperature (0 = greedy), top_p and seed. Each row's token inverts its cumulative
  distribution at a uniform hashed from (seed, step), so a seeded request gives the same tokens
  whatever else shares its batch.
- **Logprobs** (always returned): `log_softmax(logits / temperature)` of each sampled token
  (plain `log_softmax(logits)` for greedy requests), *before* top-p truncation: with top_p = 1
  a trainer reproduces it with one forward pass over prompt + sampled ids.
- **KV cache reuse** (`reuse_cache=True`): a later prompt that extends a finished one (the next
  turn of a game) prefills only its new tokens; call `clear_cache()` after changing the
  weights. See `rlvr.clients.local_prefix`.
- **Static KV slots and CUDA graphs** (`static_cache`, on by default for the llama, mistral,
  qwen2 and qwen3 families): rows keep their keys and values in preallocated slots, prompts are
  prefilled straight into them, and the one-token step is a hand-written forward replayed as a
  CUDA graph (`compile_decode=True` also runs it through `torch.compile`). See
  `rlvr.clients.local_slots`.
- **Prompt ids**: the chat template's render, tokenized; a prompt that extends one already
  rendered (the next turn of a game) is tokenized from the previous prompt's last added token
  on, with the same ids as the whole text's. See `rlvr.clients.local_tokens`.
- **Exact reply distributions** (`reply_distribution`): every reply `chat` can sample, with its
  probability, enumerated best-first by `rlvr.clients.local_enumerate`; replies outside such a
  list drawn directly (`draw_unlisted`, `rlvr.clients.local_unlisted`).
- **Attention kernels**: on CUDA, the transformers forward runs without cuDNN attention, which
  builds a new plan for every new sequence length (a growing KV cache is one every step).

Why not `model.generate`: it shares one temperature, seed and max length across its batch and
holds every row until the longest finishes. Headline (256 concurrent tic-tac-toe games, tiny
model, bf16, one H200): this client 22,100 tokens/s, `model.generate` on padded batches 4,000;
the measurements are in docs/benchmarks.md (`benchmarks/bench_local_model.py`).

Sharing weights with a trainer: `LocalModel("name", model=model, tokenizer=tokenizer)` takes an
already-loaded (unwrapped, possibly peft) model and always generates with its current weights.
Generation switches the model to eval mode for each step and back; do not run an optimizer step
while a `chat()` is in flight.

Lifecycle: the worker thread starts with the first request and ends by itself once idle (within
~50 ms). `await lm.aclose()` answers the requests already taken, waits for the thread and drops
the KV caches; a later `chat()` raises `ClientClosedError`. Loading is in
`rlvr.clients.local_load`, tool-call parsing in `rlvr.clients.tool_calls`.
"""

from __future__ import annotations

import asyncio
import random
import threading
import time
from typing import Any

import torch
from transformers import PreTrainedTokenizerBase

from rlvr.clients.local_batch import Batch, Decoding, GenerationStats, Request
from rlvr.clients.local_decode import SlotDecoder
from rlvr.clients.local_enumerate import MAX_NODES, Enumerator, Job
from rlvr.clients.local_load import (
    autocast_dtype,
    context_length,
    eos_ids,
    forward_options,
    generating,
    keep_freed_blocks,
    load_pretrained,
)
from rlvr.clients.local_prefix import PrefixCache
from rlvr.clients.local_replies import deliver, reply_ids, resolve
from rlvr.clients.local_slots import SlotBatch, use_static_cache
from rlvr.clients.local_tokens import PromptTokens
from rlvr.clients.local_unlisted import UnlistedDraws
from rlvr.errors import ClientClosedError, ModelError, PromptTooLongError, UsageError
from rlvr.types import Completion, Messages, SamplingArgs, Usage


class LocalModel(UnlistedDraws):
    """A Hugging Face causal LM as a `ChatClient`, with dynamic batching.

    Args:
        path_or_id: a folder written by `save_pretrained`, or a hub id.
        device: "cpu", "cuda", "cuda:1"...; None = CUDA when available, else CPU.
        dtype: "float32", "bfloat16", "float16"; None = bfloat16 on CUDA, float32 on CPU.
        max_batch_size: most requests decoded together; more wait in the queue.
        model, tokenizer: an already-loaded model and tokenizer (then nothing is loaded and the
            model stays where it is); `path_or_id` is then only the name.
        reuse_cache: keep finished requests' KV caches so that the next turn of a conversation
            prefills only its new tokens (call `clear_cache()` after changing the weights).
        cache_entries, cache_bytes: bounds of the reuse cache (None: 2 x max_batch_size
            entries; 2 GiB).
        static_cache: decode over preallocated per-row KV slots with a hand-written one-token
            forward, replayed as a CUDA graph on CUDA (`rlvr.clients.local_slots`); False = the
            transformers forward over a `DynamicCache`; None = static where the model family
            is supported.
        autocast: run generation under `torch.autocast` to this dtype ("bfloat16", "float16";
            None = the weights' dtype). A trainer that keeps float32 weights and trains under
            bf16 autocast passes "bfloat16": the sampler then computes what the training forward
            computes (and its matmuls run at bf16 speed).
        compile_decode: run the static-slot decode step's layers through `torch.compile`
            (fuses their small kernels; the first steps compile; needs `static_cache`).
    """

    def __init__(
        self,
        path_or_id: str,
        *,
        device: str | None = None,
        dtype: str | None = None,
        max_batch_size: int = 256,
        model: Any = None,
        tokenizer: PreTrainedTokenizerBase | None = None,
        reuse_cache: bool = True,
        cache_entries: int | None = None,
        cache_bytes: int | None = None,
        static_cache: bool | None = None,
        autocast: str | None = None,
        compile_decode: bool = False,
    ) -> None:
        if max_batch_size < 1:
            raise UsageError(f"max_batch_size must be >= 1, got {max_batch_size}")
        if (model is None) != (tokenizer is None):
            raise UsageError("pass both model and tokenizer, or neither")
        if model is None or tokenizer is None:
            model, tokenizer = load_pretrained(str(path_or_id), device, dtype)
        if not getattr(tokenizer, "chat_template", None):
            raise ModelError(f"the tokenizer of {path_or_id} has no chat template; use a chat model")
        self.name = str(path_or_id)
        self.model = model
        if self.device.type == "cpu":  # however it was loaded: the trainer passes its policy in
            keep_freed_blocks()
        self.tokenizer = tokenizer
        self.max_batch_size = max_batch_size
        self.stats = GenerationStats()
        self.prefix = (
            PrefixCache(
                max_entries=2 * max_batch_size if cache_entries is None else cache_entries,
                max_bytes=(2 << 30) if cache_bytes is None else cache_bytes,
            )
            if reuse_cache
            else None
        )
        self.context_length = context_length(model, tokenizer)
        """Prompt and reply tokens together at most (a longer prompt: `PromptTooLongError`)."""
        self.eos_ids = eos_ids(model, tokenizer)
        """Tokens that end a reply (read, with `pad_id`, when the worker thread starts)."""
        self.pad_id: int = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else min(self.eos_ids)
        self._forward_options = forward_options(model)
        self.static_cache = use_static_cache(model, static_cache, self.name)
        if compile_decode and not self.static_cache:
            raise UsageError(
                f"compile_decode compiles the static-slot decode step, and {self.name} decodes without static "
                "slots (static_cache=False, or a model family the slots do not cover)"
            )
        self.compile_decode = compile_decode
        self.autocast = autocast_dtype(autocast)
        self._decoder: SlotDecoder | None = None
        self.prompts = PromptTokens(tokenizer)
        """Prompt ids of the conversations rendered so far, each new turn tokenized alone."""
        self._rng = random.Random()
        self._lock = threading.Lock()
        self._pending: list[Request] = []
        self._arrivals = 0
        self._thread: threading.Thread | None = None
        self._closed = False
        self._enumerator: Enumerator | None = None

    def clear_cache(self) -> None:
        """Forget the kept KV caches (call after the weights changed, e.g. an optimizer step)."""
        if self.prefix is not None:
            self.prefix.clear()

    def slot_decoder(self) -> SlotDecoder:
        """The static KV slots and decode step, kept between batches (created on first use)."""
        if self._decoder is None:
            self._decoder = SlotDecoder(
                self.model,
                graphs=self.device.type == "cuda",
                max_length=self.context_length,
                dtype=self.autocast,
                compiled=self.compile_decode,
            )
        return self._decoder

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    # ---- the ChatClient side (event loop) -------------------------------------------------

    def render(self, messages: Messages, tools: list[dict[str, Any]] | None = None) -> list[int]:
        """Prompt token ids: the chat template with `add_generation_prompt=True`, tokenized (only
        what a turn adds to a conversation already rendered: `rlvr.clients.local_tokens`)."""
        return self.prompts.ids(messages, tools)

    def _prompt(self, messages: Messages, tools: list[dict[str, Any]] | None) -> list[int]:
        """`render`, or `PromptTooLongError` where no reply token fits after it."""
        prompt_ids = self.render(messages, tools)
        if len(prompt_ids) >= self.context_length:
            raise PromptTooLongError(f"prompt has {len(prompt_ids)} tokens; {self.name} holds {self.context_length}")
        return prompt_ids

    async def chat(
        self,
        messages: Messages,
        sampling: SamplingArgs,
        tools: list[dict[str, Any]] | None = None,
    ) -> Completion:
        prompt_ids = self._prompt(messages, tools)
        room = self.context_length - len(prompt_ids)
        sampling.check()  # (fields may have changed since it was made): no NaN or infinity reaches the sampler
        loop = asyncio.get_running_loop()
        request = Request(
            prompt_ids=prompt_ids,
            max_tokens=room if sampling.max_tokens is None else min(room, sampling.max_tokens),
            temperature=float(sampling.temperature),
            top_p=float(sampling.top_p),
            seed=self._rng.getrandbits(31) if sampling.seed is None else int(sampling.seed),
            stop=tuple(s for s in sampling.stop or () if s),
            loop=loop,
            future=loop.create_future(),
            arrival_step=self.stats.decode_steps,
        )
        with self._lock:
            if self._closed:
                raise ClientClosedError(f"the client of {self.name} has been closed (aclose); make a new one")
            self._pending.append(request)
            self._arrivals += 1
            if self._thread is None:
                # not a daemon: the interpreter waits for it at exit (it ends within ~50 ms of
                # its last request) instead of killing it inside a torch call, which aborts
                self._thread = threading.Thread(target=self._serve, name="rlvr-local-model")
                self._thread.start()
        try:
            return await request.future
        except asyncio.CancelledError:
            request.cancelled = True
            raise

    async def give(self, messages: Messages, text: str, tools: list[dict[str, Any]] | None = None) -> Completion:
        """`text` as the reply to `messages`, given rather than sampled: the ids it would have
        been sampled as (the chat template's, up to and including its end-of-turn token, so
        that the next turn's prompt extends them), no logprobs, finish reason "given". The
        model does not run."""
        prompt_ids = self._prompt(messages, tools)
        whole = self.prompts.ids([*messages, {"role": "assistant", "content": text}], tools, generation_prompt=False)
        ids = reply_ids(self.tokenizer, self.eos_ids, whole, text, prompt_ids)
        if len(prompt_ids) + len(ids) > self.context_length:  # a sampled reply stops at the context's end
            raise PromptTooLongError(
                f"prompt ({len(prompt_ids)} tokens) and given reply ({len(ids)}) exceed the {self.context_length} "
                f"{self.name} holds"
            )
        return Completion(
            text=text,
            token_ids=ids,
            prompt_token_ids=prompt_ids,
            finish_reason="given",
            usage=Usage(prompt_tokens=len(prompt_ids), completion_tokens=len(ids)),
        )

    async def reply_distribution(
        self,
        messages: Messages,
        sampling: SamplingArgs,
        tools: list[dict[str, Any]] | None = None,
        *,
        floor: float = 0.0,
        eps: float = 0.0,
        max_nodes: int = MAX_NODES,
    ) -> list[tuple[str, float]]:
        """Every reply `chat(messages, sampling, tools)` can give, with the probability that it
        gives it, most probable first (`rlvr.clients.local_enumerate`). Left out, and the rest of
        1: replies through a prefix of probability below `floor`, and what is still open when the
        listed mass reaches 1 - `eps` or after `max_nodes` prefixes. Greedy: its one reply, 1."""
        if float(sampling.temperature) == 0.0:
            return [((await self.chat(messages, sampling, tools)).text, 1.0)]
        if floor > 1.0:  # no reply can be listed
            return []
        prompt_ids = self._prompt(messages, tools)
        job = Job.of(prompt_ids, self.context_length - len(prompt_ids), sampling, floor, eps, max_nodes)
        with self._lock:
            if self._closed:
                raise ClientClosedError(f"the client of {self.name} has been closed (aclose); make a new one")
            if self._enumerator is None:
                self._enumerator = Enumerator(self._decoding(), self.autocast)
        return await self._enumerator.ask(job)

    async def aclose(self) -> None:
        """Take no more requests: those in flight are answered, the worker thread ends (waited
        for up to 10 s) and the KV caches are dropped. A later `chat()` raises
        `ClientClosedError`; the model itself is left as it is. Calling it again does nothing."""
        with self._lock:
            self._closed = True
            thread = self._thread
        if thread is not None:
            await asyncio.to_thread(thread.join, 10.0)
        if self._enumerator is not None:
            await asyncio.to_thread(self._enumerator.join, 10.0)
        self.clear_cache()
        if not (thread and thread.is_alive()):
            self._decoder = None  # its KV buffers and CUDA graphs

    # ---- the worker thread ----------------------------------------------------------------

    def _decoding(self) -> Decoding:
        """What a batch (or the enumerator) needs of the model as it is now."""
        cache_kw, keep_last = self._forward_options
        return Decoding(self.model, self.tokenizer, self.device, self.pad_id, self.eos_ids, cache_kw, keep_last)

    def _new_batch(self) -> Batch:
        """An empty batch, with what it needs of the model as it is now."""
        dec = self._decoding()
        if self.static_cache:
            return SlotBatch(dec, self.prefix, self.stats, self.slot_decoder())
        return Batch(dec, self.prefix, self.stats)

    def _serve(self) -> None:
        batch: Batch | None = None
        joiners: list[Request] | None = None  # out of the queue, maybe not yet rows of the batch
        try:
            batch = self._new_batch()
            if self.device.type == "cuda":  # this thread's current device: graphs capture and
                torch.cuda.set_device(self.device)  # replay on its current stream
            while True:
                joiners = self._take(batch)
                if joiners is None:
                    return
                with generating(self.model, self.device, self.autocast):
                    if joiners:
                        batch.admit(joiners)
                    else:
                        batch.step()
                joiners = None
                self._deliver(batch.pop_finished())
        except BaseException as exc:  # a failed step or admission fails its requests, never hangs them
            with self._lock:
                rows = batch.rows if batch is not None else []
                held = {id(r) for r in rows}
                admitting = [r for r in joiners or [] if id(r) not in held]
                failed, self._pending, self._thread = rows + admitting + self._pending, [], None
            for request in failed:
                resolve(request, exc)

    def _take(self, batch: Batch) -> list[Request] | None:
        """Requests to admit now ([] = just step; None = nothing left, the thread ends)."""
        if not batch.live:
            self._gather()
        with self._lock:
            self._pending = [r for r in self._pending if not r.cancelled]
            if not self._pending and not batch.live:
                self._thread = None
                return None
            live = batch.live
            room = self.max_batch_size - live
            if not self._pending or room < 1 or (live and not batch.mergeable):
                return []
            waited = self.stats.decode_steps - self._pending[0].arrival_step
            if live and len(self._pending) < max(1, live // 8) and waited < 8:
                return []  # let a few more arrive: each admission costs one forward pass
            joiners, self._pending = self._pending[:room], self._pending[room:]
            return joiners

    def _gather(self, quiet_s: float = 0.003, max_wait_s: float = 0.05) -> None:
        """Before starting an empty batch, wait while requests keep arriving (up to 50 ms)."""
        deadline = time.monotonic() + max_wait_s
        seen = -1
        while time.monotonic() < deadline:
            with self._lock:
                if self._arrivals == seen or len(self._pending) >= self.max_batch_size:
                    return
                seen = self._arrivals
            time.sleep(quiet_s)

    def _deliver(self, requests: list[Request]) -> None:
        deliver(requests, self.tokenizer, self.eos_ids, self.stats)
