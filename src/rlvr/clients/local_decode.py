"""`SlotDecoder`: a static KV cache with one slot per row, and a one-token decode step over it
that CUDA graphs can replay.

- Per layer, keys and values live in buffers of (slots, kv heads, length, head dim); a row's
  token at position p has its keys and values at index p of its slot (no padding).
- The step is a hand-written forward for one token per slot (write the new keys and values at
  each slot's position, attend over positions <= it, MLP, logits), then the token is drawn
  (`rlvr.clients.local_sampling.draw`, per-slot seeds and temperatures). Its parts are in
  `rlvr.clients.local_step`, eager or through `torch.compile` (`compiled`).
- Its shapes depend only on (slots in use, rounded up to a power of two; span), so on CUDA it
  is captured once per shape as a CUDA graph and replayed. A capture that fails falls back to
  running the step eagerly, and a compile that fails to the eager parts, each with a warning.
- A step attends over the first `span` positions of the buffers, not all of them: the longest
  row's next position, rounded up to an eighth of the buffer where graphs replay (a graph per
  span). The positions left out are masked anyway, so the tokens are the same, and the keys and
  values read per step follow the rows' lengths instead of the buffer's (on the CPU, where the
  step is bound by reading them, the exact span takes 8% off a step of 19 rows at 550 positions
  against the rounded 640: 42.7 against 46.5 ms).
- The step stays synchronous: the host's share of a step is under 10%.

Buffers start at the sizes the first rows need and grow when a row outgrows them: by doubling
where graphs replay (they are then captured again), else to the need and a quarter more (a
tic-tac-toe walk's 640 positions made 1024 by doubling); they are kept between batches (the
trainer's next step reuses them). Headline: ~12 ms a step with the transformers cache against 1.6-1.8 ms
replayed (H200, the 17.6M model, 256 rows); the measurements are in docs/benchmarks.md.
"""

from __future__ import annotations

import sys
import warnings
from typing import Any

import torch

from rlvr.clients.local_batch import Request
from rlvr.clients.local_load import base_model
from rlvr.clients.local_step import EAGER, attend, attend_cudnn, compiled_parts, step_bias

MIN_SLOTS, MIN_LENGTH = 8, 128
GRAIN = 64
"""Without graphs, buffers grow to what the rows need plus a quarter, in multiples of this."""

Step = tuple[torch.Tensor, torch.Tensor, torch.Tensor]
"""What a decode step returns: logits (n, V), drawn tokens (n,), their logprobs (n,)."""


def _bucket(n: int, least: int, most: int | None = None) -> int:
    size = least
    while size < n:
        size *= 2
    return size if most is None else min(size, max(most, n))


def _grown(need: int, now: int, grain: int) -> int:
    """A buffer size for `need` that grows by at least a quarter of `now`, rounded up to `grain`.

    >>> _grown(10, 0, 8), _grown(17, 16, 8), _grown(600, 512, 64), _grown(1000, 512, 64)
    (16, 24, 640, 1024)
    """
    want = max(need, now + now // 4)
    return -(-want // grain) * grain


class SlotDecoder:
    """Per-layer key and value buffers of (slots, kv heads, length, head dim), and the one-token
    decode forward over them (graph-captured on CUDA)."""

    def __init__(
        self, model: Any, graphs: bool, max_length: int, dtype: torch.dtype | None = None, compiled: bool = False
    ) -> None:
        self.model = model
        causal = base_model(model)
        self.core = causal.model
        self.head = causal.lm_head
        attn = self.core.layers[0].self_attn
        config = causal.config
        self.head_dim = attn.head_dim
        self.kv_heads = config.num_key_value_heads or config.num_attention_heads
        self.q_heads = config.num_attention_heads
        self.rope = sys.modules[type(attn).__module__].apply_rotary_pos_emb
        self.graphs = graphs
        self.max_length = max_length
        param = next(model.parameters())
        self.device, self.dtype = param.device, dtype or param.dtype  # of the keys and values
        self.slots = self.length = 0
        self.keys = self.values = torch.empty(0)
        # per slot: its next input token, that token's position, and its sampling state (the
        # seed, how many tokens the row has sampled, its temperature); the decode step advances
        # them itself
        self.tokens = self.pos = self.seeds = self.counts = torch.zeros(0, dtype=torch.long)
        self.temps = torch.zeros(0)
        self.captured: dict[tuple[int, int], tuple[Any, Step]] = {}  # by (slots, span)
        self.pool: Any = None
        self._weights: Any = None
        self.captures = 0
        self.held: list[Request] = []  # finished rows whose keys and values wait in their slots
        self.parts: tuple[Any, ...] = compiled_parts() if compiled else EAGER
        """the step's parts around the attention, and its sampler: `EAGER`, or `compiled_parts()`"""
        self.attention = attend_cudnn if cudnn_attention_works(self) else attend
        """the step's attention: `attend_cudnn` where it runs here, else `attend` (compiled or not)"""

    # ---- buffers --------------------------------------------------------------------------

    def reserve(self, slots: int, length: int) -> None:
        """Make room for `slots` slots of `length` positions (contents kept): doubling where
        graphs replay (a graph per size), else the need and a quarter more, in multiples of
        `GRAIN` (on the CPU a walk's rows need 640 positions: doubling made 1024)."""
        if slots <= self.slots and length <= self.length:
            return
        if self.graphs:
            new_slots = max(self.slots, _bucket(slots, MIN_SLOTS))
            new_length = max(self.length, _bucket(length, MIN_LENGTH, self.max_length))
        else:
            new_slots = max(self.slots, _grown(slots, self.slots, MIN_SLOTS))
            new_length = max(self.length, min(_grown(length, self.length, GRAIN), max(self.max_length, length)))
        shape = (len(self.core.layers), new_slots, self.kv_heads, new_length, self.head_dim)
        keys = torch.zeros(shape, dtype=self.dtype, device=self.device)
        values = torch.zeros(shape, dtype=self.dtype, device=self.device)
        if self.slots:
            keys[:, : self.slots, :, : self.length] = self.keys
            values[:, : self.slots, :, : self.length] = self.values
        self.keys, self.values = keys, values
        for name in ("tokens", "pos", "seeds", "counts", "temps"):
            old = getattr(self, name)
            new = old.new_zeros(new_slots, device=self.device)
            new[: old.shape[0]] = old
            setattr(self, name, new)
        self.slots, self.length = new_slots, new_length
        self._drop_graphs()  # they point at the old buffers

    # ---- the decode step ------------------------------------------------------------------

    def check_weights(self) -> None:
        """Forget the graphs when a parameter was swapped (they read the old storage; an update
        in place is fine)."""
        sig = tuple(p.data_ptr() for p in self.model.parameters())
        if sig != self._weights:
            self._drop_graphs()
            self._weights = sig

    def span(self, need: int) -> int:
        """The positions a step attends over when the rows in it need `need` (the highest
        position written, plus one): `need` rounded up to an eighth of the buffer (at least
        MIN_LENGTH), so a step reads the keys and values of the rows' lengths, not the buffer's
        (a graph per span: at most 8 per slot count). Without graphs, `need` itself: the step
        reads no position past the rows'."""
        if not self.graphs:
            return min(self.length, max(need, 1))
        grain = max(MIN_LENGTH, self.length // 8)
        return min(self.length, -(-max(need, 1) // grain) * grain)

    def step(self, n: int, need: int | None = None) -> Step:
        """Decode one token for each of slots [0, n') (n rounded up): logits from `tokens` at
        `pos`, a token drawn by `rlvr.clients.local_sampling.draw` (no top-p) into `tokens`,
        and `pos` and `counts` advanced. Attention covers the first `span(need)` positions
        (None: the whole buffer), so every row's `pos` must be below `need`."""
        n = min(_bucket(n, MIN_SLOTS), self.slots) if self.graphs else min(n, self.slots)  # graphs replay per count
        span = self.length if need is None else self.span(need)
        try:
            return self._step(n, span)
        except RuntimeError as exc:
            if self.parts is EAGER or not _compile_error(exc):
                raise
            warnings.warn(
                f"rlvr: compiling the decode step failed ({_first_line(getattr(exc, 'inner_exception', exc))}); "
                "decoding without torch.compile",
                RuntimeWarning,
                stacklevel=2,
            )
            self.parts = EAGER
            self._drop_graphs()
            return self._step(n, span)

    def _step(self, n: int, span: int) -> Step:
        if not self.graphs:
            return self.decode(n, span)
        if (n, span) not in self.captured:
            try:
                self.captured[n, span] = self._capture(n, span)
            except RuntimeError as exc:  # an op that cannot be captured (some adapter, kernel)
                if self.parts is not EAGER and _compile_error(exc):
                    raise  # not the graph's fault: `step` decodes without compiling
                warnings.warn(
                    f"rlvr: CUDA graph capture failed ({_first_line(exc)}); decoding without CUDA graphs",
                    RuntimeWarning,
                    stacklevel=2,
                )
                self.graphs = False
                self._drop_graphs()
                return self.decode(n, span)
        graph, out = self.captured[n, span]
        graph.replay()
        return out

    def _drop_graphs(self) -> None:
        """Forget the captured graphs, and their memory pool with them (a pool whose last graph
        is gone cannot take a new capture)."""
        self.captured.clear()
        self.pool = None

    def _capture(self, n: int, span: int) -> tuple[Any, Step]:
        """Warm up on a side stream (lazy kernel set-up must not happen during capture), then
        record `decode(n, span)`. The per-slot state is put back after the warm-up runs (and after a
        failure), so they only rewrite keys and values that the next step writes again."""
        state = [t.clone() for t in (self.tokens, self.pos, self.counts)]

        def restore() -> None:
            for t, saved in zip((self.tokens, self.pos, self.counts), state):
                t.copy_(saved)

        try:
            stream = torch.cuda.Stream(self.device)
            stream.wait_stream(torch.cuda.current_stream(self.device))
            with torch.cuda.stream(stream):
                for _ in range(2):
                    self.decode(n, span)
                    restore()
            torch.cuda.current_stream(self.device).wait_stream(stream)
            if self.pool is None:
                self.pool = torch.cuda.graph_pool_handle()
            graph = torch.cuda.CUDAGraph()
            # thread_local: a capture forbids unsafe CUDA calls of this thread only, not those of
            # a trainer updating the weights in another thread meanwhile (overlap, `rlvr.train.batch`)
            with torch.cuda.graph(graph, pool=self.pool, capture_error_mode="thread_local"):
                out = self.decode(n, span)
        finally:
            restore()
        self.captures += 1
        return graph, out

    def decode(self, n: int, span: int | None = None) -> Step:
        """`forward`, then draw each slot's token and advance its state (what a graph holds)."""
        logits = self.forward(n, span)
        choice, logprob = self.parts[3](self._rows_only(logits), self.temps[:n], self.seeds[:n], self.counts[:n])
        self.tokens[:n] = choice
        self.pos[:n] += 1
        self.counts[:n] += 1
        return logits, choice, logprob

    def _rows_only(self, t: torch.Tensor) -> torch.Tensor:
        """`t`, with every size but the first (the slots) marked static when the parts are
        compiled: a dynamic size of equal value (a head size of 32 at 32 slots) would share the
        slots' symbol, and the model's constant would then pin the compiled parts to that slot
        count (a recompile)."""
        if self.parts is not EAGER:
            for dim in range(1, t.dim()):
                torch._dynamo.mark_static(t, dim)
        return t

    def forward(self, n: int, span: int | None = None) -> torch.Tensor:
        """One token for each of slots [0, n): the model's layers, called module by module, with
        attention over the first `span` positions of the slot buffers (None: all of them)."""
        span = self.length if span is None else span
        tokens = self.tokens[:n]
        pos = self.pos[:n].clamp(max=self.length - 1)  # free slots keep counting up
        rows = torch.arange(n, device=self.device)
        x = self.core.embed_tokens(tokens[:, None])  # (n, 1, hidden)
        cos, sin = self.core.rotary_emb(x, pos[:, None])
        bias = step_bias(pos, span)  # (n, 1, 1, span)
        groups = self.q_heads // self.kv_heads
        first, second, last, _ = self.parts
        rows_only = self._rows_only
        cos, sin = rows_only(cos), rows_only(sin)
        for i, layer in enumerate(self.core.layers):
            q, k, v = first(layer, rows_only(x), cos, sin, self.rope, self.dtype)
            keys, values = self.keys[i], self.values[i]
            keys[rows, :, pos] = k
            values[rows, :, pos] = v
            q = q.reshape(n, self.kv_heads, groups, self.head_dim)  # q head j*groups+g uses kv j
            out = self.attention(q, keys[:n, :, :span], values[:n, :, :span], bias, layer.self_attn.scaling)
            x = second(layer, x, rows_only(out.reshape(n, 1, self.q_heads * self.head_dim)))
        return last(self.core.norm, self.head, rows_only(x))


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]


def _compile_error(exc: BaseException) -> bool:
    """Whether `exc` came from torch.compile (Dynamo or Inductor), not from running the step."""
    return type(exc).__module__.startswith(("torch._dynamo", "torch._inductor"))


def cudnn_attention_works(decoder: SlotDecoder) -> bool:
    """Whether `attend_cudnn` runs for `decoder`'s shapes and dtype, and agrees with `attend`
    (one small call each, eagerly; any error or disagreement means no)."""
    if decoder.device.type != "cuda" or decoder.dtype not in (torch.bfloat16, torch.float16):
        return False
    groups, dev = decoder.q_heads // decoder.kv_heads, decoder.device
    try:
        gen = torch.Generator(device=dev).manual_seed(0)
        shape = (8, decoder.kv_heads, 32, decoder.head_dim)  # a span of 16 of a 32-position buffer, as the step slices
        keys, values = (torch.randn(shape, generator=gen, device=dev).to(decoder.dtype)[:, :, :16] for _ in range(2))
        q = torch.randn(8, decoder.kv_heads, groups, decoder.head_dim, generator=gen, device=dev)
        bias = step_bias(torch.tensor([3, 15, 0, 7, 9, 1, 12, 15], device=dev), 16)
        scaling = decoder.head_dim**-0.5
        with torch.no_grad():
            got = attend_cudnn(q, keys, values, bias, scaling).float()
            want = attend(q.to(decoder.dtype), keys, values, bias, scaling).float()
        return bool(torch.allclose(got, want, atol=3e-2, rtol=3e-2))
    except RuntimeError:  # no cuDNN sdpa for these shapes, dtype or GPU
        return False
