"""A static KV cache with one slot per row, and a decode step that CUDA graphs can replay.

`Batch` (rlvr.clients.local_batch) keeps the rows' keys and values in a transformers
`DynamicCache`: every decode step concatenates a column onto every layer, and every admission or
removal copies the whole cache. On a GPU with a small model that loop is bound by kernel launches
(measured, H200, 17.6M model, 256 rows: ~700 launches and ~12 ms a step, the GPU busy 17% of
the time). `SlotBatch` keeps them instead in preallocated buffers, one slot per row:

- a row's token at position p has its keys and values at index p of its slot (no padding);
- a joiner is prefilled by the model's own forward (as in `Batch`, with kept prefixes), and its
  keys and values are then gathered into a free slot;
- a finished row leaves the batch at once; with KV reuse on, its slot is held until the next
  admission copies its keys and values into the reuse cache (one copy for all such rows, and
  none when the cache was cleared meanwhile, as the trainer does after each update);
- the decode step is a hand-written forward for one token per slot over those buffers (write
  the new keys and values at each slot's position, attend over positions <= it, MLP, logits),
  then the token is drawn (`rlvr.clients.local_sampling.draw`, per-slot seeds and temperatures;
  rows with top-p < 1 are sampled again outside). Its shapes depend only on (slots in use,
  rounded up to a power of two; span, below), so on CUDA it is captured once per shape as a
  CUDA graph and replayed: 1.6-1.8 ms a step in the same setting. A capture that fails falls
  back to running the step eagerly, with a warning.
- a step attends over the first `span` positions of the buffers, not all of them: the longest
  row's next position rounded up to an eighth of the buffer (`SlotDecoder.span`; one graph per
  (slot count, span)). The positions left out are masked anyway, so the tokens are the same;
  the keys and values read per step follow the rows' lengths instead of the buffer's, which
  doubles when one row outgrows it and is kept between batches. Measured on an H100, Qwen3-0.6B
  shapes, 256 rows of 128 new tokens: 19.0-19.2 ms a step over the whole 1,024-position buffer,
  10.6 ms with spans (the attention's two batched matmuls had been 65% of the device's time).
  Replaying step k + 1 before the host books step k (a "lookahead", tried 2026-11-27, commit
  a92d756) gave nothing there (off/on 0.92x and 0.94x at 0.5B and 1.7B: the host's share of a
  step is under 10%), so the step stays synchronous.
- the step's attention (`SlotDecoder.attention`) is cuDNN's fused sdpa kernel where it runs
  (CUDA, bfloat16 or float16 buffers; probed once per decoder, outside any capture, against
  the matmul path), else `attend`'s two batched matmuls and a float32 softmax. Measured on an
  H100, Qwen3-0.6B shapes, 256 rows of 128 new tokens, 3 alternated rounds of whole runs:
  8.26 [8.18-8.28] ms a step against 8.83 [8.80-8.91] (1.07x; the captured step alone 1.11x).
  The same sdpa call without forcing cuDNN takes the math kernel under the backends generation
  allows (`attention_backends`: no cuDNN, and the memory-efficient kernel refuses
  `enable_gqa`): 10x slower (`benchmarks/bench_slot_attention.py`). FlashAttention's varlen
  forward (`aten._flash_attention_forward` with `seqused_k`, reading each slot's own keys in
  place) was measured and not kept (2026-12-01, H200, 0.5B): 99-101 us a call against cuDNN's
  72-74, though it reads less (docs/benchmarks.md).

- with `compiled` (`LocalModel(compile_decode=True)`), each layer's parts before and after the
  attention, the logits and the sampler run through `torch.compile(dynamic=True)`
  (`compiled_parts`: four graphs shared by every layer, model and slot count), inside the same
  CUDA graphs. Measured on an H200, 256 rows of 128 new tokens, the captured step: 9.32 -> 6.72
  ms at Qwen3-0.6B shapes, 10.24 -> 7.50 ms at 1.7B (1.39x, 1.37x), after 8-12 s of compiling.
  The attention is then half of the step's kernel time (cuDNN, 72 us a layer at 256 rows x 256
  positions, 2.6x its memory floor); FlexAttention there was slower (119 against 81 us a call,
  compiled with static shapes) and did not compile with dynamic ones (torch 2.11).

Buffers start at the sizes the first rows need (powers of two) and double when a row outgrows
them (the graphs are then captured again); they are kept between batches (the trainer's next
step reuses them). The decode forward covers decoder-only models with rotary embeddings, full
attention and no extra scaling: the llama, mistral (without sliding window), qwen2 and qwen3
families (`supported`). Others use `Batch`.
"""

from __future__ import annotations

import itertools
import sys
import warnings
from typing import Any

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

from rlvr.clients.local_batch import Batch, Decoding, GenerationStats, Request, _layers
from rlvr.clients.local_load import base_model
from rlvr.clients.local_prefix import KV, PrefixCache
from rlvr.clients.local_sampling import draw, row_key
from rlvr.errors import UsageError

FAMILIES = frozenset({"llama", "mistral", "qwen2", "qwen3"})
_ROPE = frozenset({None, "default", "linear", "llama3", "yarn"})  # no data-dependent rescaling
MIN_SLOTS, MIN_LENGTH = 8, 128

Step = tuple[torch.Tensor, torch.Tensor, torch.Tensor]
"""What a decode step returns: logits (n, V), drawn tokens (n,), their logprobs (n,)."""


def supported(model: Any) -> bool:
    """Whether `SlotDecoder`'s forward reproduces this model's (see the module docstring)."""
    causal = base_model(model)
    config = causal.config
    core = getattr(causal, "model", None)
    if getattr(config, "model_type", None) not in FAMILIES or core is None:
        return False
    if not all(hasattr(core, a) for a in ("embed_tokens", "layers", "norm", "rotary_emb")):
        return False
    if not all(hasattr(layer.self_attn, "head_dim") for layer in core.layers):
        return False
    if any(t != "full_attention" for t in getattr(config, "layer_types", None) or ()):
        return False
    if getattr(config, "use_sliding_window", False) or (
        config.model_type == "mistral" and getattr(config, "sliding_window", None)
    ):
        return False
    rope = getattr(core.rotary_emb, "rope_type", None)
    return rope in _ROPE and not getattr(config, "pretraining_tp", 1) > 1


def use_static_cache(model: Any, requested: bool | None, name: str) -> bool:
    """Whether `LocalModel(static_cache=requested)` decodes over slots: None = wherever the
    family is supported (CUDA or CPU); True for an unsupported model is an error. On the CPU it
    was the transformers cache until the sixteenth session: slots were 8-13% slower while a step
    attended over the whole buffer, and with spans they are faster (2-core CPU, 64 games of 4
    turns, 3 alternated pairs: 1.54x [1.40-1.67] the tokens/s for the 1M tiny preset, 1.06x
    [1.05-1.07] for the 17.6M tic-tac-toe model; `bench_local_model.py`)."""
    ok = supported(model)
    if requested and not ok:
        raise UsageError(
            f"static_cache needs a model of the {sorted(FAMILIES)} families with full attention; {name} is not one"
        )
    return ok and (requested is None or requested)


def _bucket(n: int, least: int, most: int | None = None) -> int:
    size = least
    while size < n:
        size *= 2
    return size if most is None else min(size, max(most, n))


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
        """Make room for `slots` slots of `length` positions (doubling; contents kept)."""
        if slots <= self.slots and length <= self.length:
            return
        new_slots = max(self.slots, _bucket(slots, MIN_SLOTS))
        new_length = max(self.length, _bucket(length, MIN_LENGTH, self.max_length))
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

    def write(self, slots: torch.Tensor, cache: Any, mask: torch.Tensor, length: int) -> None:
        """Copy the prefill cache's real (mask = 1) columns of each row into its slot, in order,
        for the first `length` positions."""
        order = torch.sort((mask == 0).to(torch.int8), dim=1, stable=True).indices  # real first
        order = order[:, :length]
        layers = _layers(cache)
        for buffers, src in (
            (self.keys, [layer.keys for layer in layers]),
            (self.values, [layer.values for layer in layers]),
        ):
            stacked = torch.stack(src)  # (layers, rows, heads, width, dim)
            index = order[None, :, None, :, None].expand(
                stacked.shape[0], stacked.shape[1], stacked.shape[2], length, stacked.shape[4]
            )
            buffers[:, slots, :, :length] = stacked.gather(3, index).to(self.dtype)

    def copy_rows(self, slots: list[int], n: int) -> KV:
        """A copy of the first `n` positions of `slots`: keys and values of (layers, rows,
        heads, n, dim), one kernel each."""
        at = torch.tensor(slots, device=self.device)
        return self.keys[:, at, :, :n], self.values[:, at, :, :n]

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
        (a graph per span: at most 8 per slot count)."""
        grain = max(MIN_LENGTH, self.length // 8)
        return min(self.length, -(-max(need, 1) // grain) * grain)

    def step(self, n: int, need: int | None = None) -> Step:
        """Decode one token for each of slots [0, n') (n rounded up where graphs replay, one per
        slot count): logits from `tokens` at `pos`, a token drawn by
        `rlvr.clients.local_sampling.draw` (no top-p) into `tokens`, and `pos` and `counts`
        advanced. Attention covers the first `span(need)` positions (None: the whole buffer), so
        every row's `pos` must be below `need`."""
        n = min(_bucket(n, MIN_SLOTS), self.slots) if self.graphs else min(n, self.slots)
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
            with torch.cuda.graph(graph, pool=self.pool):
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


def layer_first(
    layer: Any, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, rope: Any, dtype: torch.dtype
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """A layer's step up to its attention: q (n, heads, 1, d) with rotary embeddings, and the
    new key (n, kv, d) and value (n, kv, d) in the buffers' dtype. (The head size is read from
    the module, a constant when compiled: as an argument it would be a symbol, and Dynamo
    could tie it to the slot count.)"""
    attn, n, head_dim = layer.self_attn, x.shape[0], layer.self_attn.head_dim
    h = _rms_norm(layer.input_layernorm, x)
    q = attn.q_proj(h).view(n, 1, -1, head_dim)
    k = attn.k_proj(h).view(n, 1, -1, head_dim)
    v = attn.v_proj(h).view(n, 1, -1, head_dim)
    if getattr(attn, "q_norm", None) is not None:
        q, k = _rms_norm(attn.q_norm, q), _rms_norm(attn.k_norm, k)
    q, k = rope(q.transpose(1, 2), k.transpose(1, 2), cos, sin)  # (n, heads, 1, d)
    return q, k[:, :, 0].to(dtype), v[:, 0].to(dtype)


def layer_second(layer: Any, x: torch.Tensor, attended: torch.Tensor) -> torch.Tensor:
    """A layer's step after its attention (n, 1, heads * d): output projection, MLP, residuals."""
    x = x + layer.self_attn.o_proj(attended.to(x.dtype))
    return x + layer.mlp(_rms_norm(layer.post_attention_layernorm, x))


def logits_of(norm: Any, head: Any, x: torch.Tensor) -> torch.Tensor:
    """The step's float32 logits (n, V) from the last layer's output (n, 1, hidden)."""
    return head(_rms_norm(norm, x)[:, 0]).float()


def sample(
    logits: torch.Tensor, temps: torch.Tensor, seeds: torch.Tensor, counts: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Each slot's token and its logprob (`draw`, no top-p), keyed by its seed and count."""
    return draw(logits, temps, row_key(seeds, counts))


EAGER = (layer_first, layer_second, logits_of, sample)

COMPILE_BACKEND = "inductor"
"""torch.compile's backend for `compiled_parts` (tests on a CPU without a C++ build use another)."""

_COMPILED: list[Any] = []


def compiled_parts() -> tuple[Any, ...]:
    """`EAGER`'s functions through `torch.compile(dynamic=True)`, made once per process: the
    modules are arguments, so every layer of every model shares one graph per function (and the
    slot count is a dynamic size: one compile for all buckets). Compiled, the sampler's passes
    over the vocabulary fuse too (256 x 151,936 on an H200: 0.35 ms against 0.96 eager)."""
    if not _COMPILED:
        _COMPILED.extend(torch.compile(fn, dynamic=True, backend=COMPILE_BACKEND) for fn in EAGER)
    return tuple(_COMPILED)


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]


def _compile_error(exc: BaseException) -> bool:
    """Whether `exc` came from torch.compile (Dynamo or Inductor), not from running the step."""
    return type(exc).__module__.startswith(("torch._dynamo", "torch._inductor"))


def step_bias(pos: torch.Tensor, span: int) -> torch.Tensor:
    """The decode step's additive attention mask, (n, 1, 1, span) float32: 0 at the positions a
    row has written (<= its `pos`), -inf after. Every row sees position 0, so no row is masked
    entirely (a free slot's clamped `pos` may pass the span: it then sees all).

    >>> step_bias(torch.tensor([0, 2]), 4)[:, 0, 0].tolist()
    [[0.0, -inf, -inf, -inf], [0.0, 0.0, 0.0, -inf]]
    """
    after = torch.arange(span, device=pos.device)[None, :] > pos[:, None]
    return torch.zeros(after.shape, device=pos.device).masked_fill(after, float("-inf"))[:, None, None, :]


def attend(
    q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, bias: torch.Tensor, scaling: float
) -> torch.Tensor:
    """The decode step's attention: q (n, kv, g, d) against keys and values (n, kv, L, d) with
    an additive bias (n, 1, 1, L); two batched matmuls and a float32 softmax."""
    scores = torch.matmul(q, keys.transpose(-1, -2))  # (n, kv, g, L)
    probs = torch.softmax(scores.float() * scaling + bias, dim=-1).to(values.dtype)
    return torch.matmul(probs, values)


def attend_cudnn(
    q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, bias: torch.Tensor, scaling: float
) -> torch.Tensor:
    """`attend` by cuDNN's fused sdpa kernel, the kv * g query heads as heads of one query each
    (`enable_gqa`), whatever backends the caller allows. CUDA, bfloat16 or float16 only (see
    `cudnn_attention_works`). A new shape costs cuDNN a plan once; a captured graph's shapes
    are fixed."""
    n, kv, g, d = q.shape
    q = q.to(values.dtype).reshape(n, kv * g, 1, d)  # under autocast, rotary leaves q in float32
    with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
        out = torch.nn.functional.scaled_dot_product_attention(
            q, keys, values, attn_mask=bias.to(q.dtype), scale=scaling, enable_gqa=True
        )
    return out.reshape(n, kv, g, d)


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


def _rms_norm(norm: Any, x: torch.Tensor) -> torch.Tensor:
    """`norm(x)` for the llama/qwen `RMSNorm` (weight * (x / rms(x)) in float32, cast back
    before the weight), with torch's fused kernel: 2-3 kernels instead of 7."""
    eps = getattr(norm, "variance_epsilon", None)
    if eps is None:
        return norm(x)
    normed = torch.nn.functional.rms_norm(x.float(), (x.shape[-1],), eps=eps)
    return norm.weight * normed.to(x.dtype)


class SlotBatch(Batch):
    """`Batch` over a `SlotDecoder`: same admission (kept and shared prefixes), sampling and
    answers; rows live in slots instead of one padded cache."""

    def __init__(self, dec: Decoding, prefix: PrefixCache | None, stats: GenerationStats, decoder: SlotDecoder) -> None:
        super().__init__(dec, prefix, stats)
        self.decoder = decoder
        self.index: torch.Tensor | None = None  # (rows,) each row's slot, on the device

    def admit(self, joiners: list[Request]) -> None:
        self.prune()
        decoder, device = self.decoder, self.dec.device
        if decoder.held:  # kept now, before the lookup that may use them, and their slots freed
            held, decoder.held = decoder.held, []
            self._store(held)
        cache, mask, next_pos, tokens = self._prefill(joiners)
        used = {r.slot for r in self.rows}  # the lowest free slots: fewer to decode each step
        slots = list(itertools.islice((s for s in itertools.count() if s not in used), len(joiners)))
        longest = max(len(r.prompt_ids) for r in joiners)
        decoder.reserve(max(slots) + 1, max(r.seq_len for r in (*self.rows, *joiners)) + 1)
        at = torch.tensor(slots, device=device)
        decoder.write(at, cache, mask, longest)
        decoder.check_weights()
        decoder.tokens[at] = tokens
        decoder.pos[at] = next_pos
        state = [(r.seed & 0xFFFFFFFF, len(r.ids)) for r in joiners]
        decoder.seeds[at], decoder.counts[at] = torch.tensor(state, device=device).T
        decoder.temps[at] = torch.tensor([r.temperature for r in joiners], device=device)
        for r, s in zip(joiners, slots):
            r.slot = s
        self.rows.extend(joiners)
        self.index = None
        self.stats.max_batch = max(self.stats.max_batch, len(self.rows))

    def step(self) -> None:
        decoder = self.decoder
        need = max(r.seq_len for r in self.rows) + 1  # the highest position this step writes, + 1
        decoder.reserve(0, need)
        if self.index is None:
            self.index = torch.tensor([r.slot for r in self.rows], device=self.dec.device)
        logits, choice, logprob = decoder.step(max(r.slot for r in self.rows) + 1, need)
        self.stats.decode_steps += 1
        if all(r.top_p >= 1.0 or r.temperature == 0 for r in self.rows):  # drawn in the step
            tokens, logprobs = choice.tolist(), logprob.tolist()
            self._record(self.rows, [tokens[r.slot] for r in self.rows], [logprobs[r.slot] for r in self.rows])
        else:  # top-p: sample again outside the step, and overwrite its tokens
            decoder.tokens[self.index] = self._sample(logits.index_select(0, self.index), self.rows)

    def _keep(self, rows: list[Request]) -> None:
        """Hold the rows' slots: the next admission copies their keys and values (one copy for
        all; none when the trainer cleared the cache meanwhile). Until then the decode step
        writes only past their kept positions."""
        self.decoder.held.extend(rows)

    def _prune_finished(self) -> None:
        self.prune()  # leaving costs nothing here

    def prune(self) -> None:
        keep = [r for r in self.rows if r.finish is None and not r.cancelled]
        if len(keep) < len(self.rows):
            self.rows, self.index = keep, None

    def _copy_kv(self, rows: list[Request]) -> list[KV | None]:
        """One copy of all the rows' slots, then each row's part on its own: a view would keep
        the whole copy alive while any one entry of it stays in the reuse cache, past its bytes."""
        lengths = [r.seq_len for r in rows]
        keys, values = self.decoder.copy_rows([r.slot for r in rows], max(lengths))
        return [(keys[:, i, :, :n].contiguous(), values[:, i, :, :n].contiguous()) for i, n in enumerate(lengths)]
