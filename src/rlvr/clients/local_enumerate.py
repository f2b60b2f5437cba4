"""Exact reply distributions of a `LocalModel` (`LocalModel.reply_distribution`): the replies
its sampler can draw, each with the probability that it draws it.

A reply is a token sequence, and its probability the product of the sampler's probability of
each token after the ones before: `rlvr.clients.local_sampling` at the request's temperature and
top-p (the logits over T, top-p's cut by `_top_p`, the weights exp'd in float32 from the row's
maximum and normalised in float64, as `pick` draws from them). A reply ends as `chat`'s does: at
an EOS id, at a stop string (found in the decoded tail, the text cut before it), or at
max_tokens; its text is decoded as `chat` decodes it, and replies with one text merge.

The prefixes form a tree, walked best-first: each step of one worker thread (`Enumerator`)
takes the most probable open prefixes of every distribution asked (up to `batch` rows in all),
runs one forward of their last tokens over the keys and values of their prompt (from one
prefill a distribution) and of the prefix itself (from the step that made it), and files each
child: a finished reply, or a new open prefix. A child whose probability is below the job's
`floor` (or 0, as top-p's cut ones are) is not kept. A job ends when its listed mass reaches
1 - eps, when no open prefix is left, or after `max_nodes` expansions; the mass it did not list
is the caller's to count as unexplored. Where that mass lies is kept beside the listed ids
(`Listed`): each expanded prefix's children left out, and each prefix still open, with their
mass, from which `rlvr.clients.local_unlisted` draws a reply outside the list directly.

The forward is transformers' over a `DynamicCache` (left padded rows, explicit positions), not
the static-slot step `chat` may use: the two agree to float32 rounding (about 1e-6 relative in
a probability, `tests/test_local_enumerate.py`).
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import threading
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

import torch

from rlvr.clients.local_batch import Decoding, new_cache, stop_hit
from rlvr.clients.local_load import generating
from rlvr.clients.local_prefix import PrefixCache, past_cache, prefix_hashes, row_kv
from rlvr.clients.local_replies import reply_text, settle
from rlvr.clients.local_sampling import _top_p
from rlvr.errors import ModelError
from rlvr.types import SamplingArgs

MAX_LISTED = 65_536
"""Prompts whose listed token sequences `Enumerator.listed` keeps (the oldest dropped first)."""

MAX_NODES = 20_000
"""Prefixes expanded (one forward row each) at most for one distribution."""

KV = torch.Tensor
"""Keys and values of a run of tokens, (layers, 2, kv heads, tokens, head size)."""


@dataclass(eq=False)
class Job:
    """One distribution being enumerated (written by the worker thread only)."""

    prompt_ids: list[int]
    max_tokens: int
    temperature: float
    top_p: float
    stop: tuple[str, ...]
    floor: float
    eps: float
    max_nodes: int
    loop: asyncio.AbstractEventLoop
    future: asyncio.Future[list[tuple[str, float]]]
    prompt_kv: KV | None = None
    open: list[tuple[float, int, tuple[int, ...], KV | None]] = field(default_factory=list)
    """A heap of open prefixes: (-probability, order, ids, keys and values of ids[:-1])."""
    replies: dict[str, float] = field(default_factory=dict)
    sequences: set[tuple[int, ...]] = field(default_factory=set)
    """The listed replies' token ids (a final EOS included, as `chat`'s `token_ids`)."""
    listed: float = 0.0
    dropped: dict[tuple[int, ...], float] = field(default_factory=dict)
    """Each expanded prefix -> the mass of its children not kept (below the floor)."""
    expanded: int = 0
    cancelled: bool = False

    @classmethod
    def of(cls, prompt_ids: list[int], room: int, sampling: SamplingArgs, floor: float, eps: float, nodes: int) -> Job:
        """The job of `LocalModel.reply_distribution` (on the running event loop): the limits of
        a `chat` with `sampling` whose prompt leaves `room` tokens."""
        sampling.check()
        loop = asyncio.get_running_loop()
        return cls(
            prompt_ids, room if sampling.max_tokens is None else min(room, sampling.max_tokens),
            float(sampling.temperature), float(sampling.top_p), tuple(s for s in sampling.stop or () if s),
            float(floor), float(eps), nodes, loop, loop.create_future(),
        )  # fmt: skip

    def done(self) -> bool:
        return self.cancelled or not self.open or self.listed >= 1.0 - self.eps or self.expanded >= self.max_nodes


@dataclass(frozen=True)
class Listed:
    """What one distribution of a prompt listed, and where the rest of its mass lies."""

    sequences: frozenset[tuple[int, ...]]
    """the listed replies' token ids (a final EOS included)"""
    exits: tuple[tuple[float, tuple[int, ...], frozenset[int] | None], ...]
    """(mass, prefix ids, next tokens kept) for the children an expanded prefix left out, and
    (probability, prefix ids, None) for a prefix still open: their masses sum to 1 - listed"""
    temperature: float
    top_p: float
    max_tokens: int
    stop: tuple[str, ...]

    @classmethod
    def of(cls, job: Job) -> Listed:
        opened = [ids for _, _, ids, _ in job.open]
        kept: dict[tuple[int, ...], set[int]] = defaultdict(set)
        for ids in itertools.chain(job.sequences, job.dropped, opened):
            if ids:
                kept[ids[:-1]].add(ids[-1])
        exits: list[tuple[float, tuple[int, ...], frozenset[int] | None]] = [
            (m, ids, frozenset(kept.get(ids, ()))) for ids, m in job.dropped.items() if m > 0.0
        ]
        exits += [(-neg, ids, None) for neg, _, ids, _ in job.open]
        limits = (job.temperature, job.top_p, job.max_tokens, job.stop)
        return cls(frozenset(job.sequences), tuple(exits), *limits)


Row = tuple[Job, float, tuple[int, ...], KV | None]
"""A prefix being expanded: its job, probability, ids, and keys and values of all ids but the last."""


class Enumerator:
    """The worker that enumerates every distribution asked of one model (see the module)."""

    def __init__(self, dec: Decoding, autocast: torch.dtype | None, batch: int = 64, max_jobs: int = 32) -> None:
        self.dec, self.autocast, self.batch, self.max_jobs = dec, autocast, batch, max_jobs
        self.prefix = PrefixCache(max_entries=4 * max_jobs, max_bytes=1 << 30)
        """The prompts' keys and values, kept for the prompts that extend them."""
        self._order = itertools.count()
        self._lock = threading.Lock()
        self._pending: list[Job] = []
        self._active: list[Job] = []
        self._thread: threading.Thread | None = None
        self.expansions = 0
        """Prefixes expanded so far (forward rows), all jobs together."""
        self.forwards = 0
        """Forward passes run (prefills and steps)."""
        self.listed: dict[tuple[int, ...], Listed] = {}
        """Prompt ids -> what its last distribution listed (a reply text may also come from
        ids it did not list: that mass is unlisted)."""

    async def ask(self, job: Job) -> list[tuple[str, float]]:
        """`job`'s replies and their probabilities, most probable first."""
        with self._lock:
            self._pending.append(job)
            if self._thread is None:
                self._thread = threading.Thread(target=self._serve, name="rlvr-enumerate")
                self._thread.start()
        try:
            return await job.future
        except asyncio.CancelledError:
            job.cancelled = True
            raise

    def join(self, timeout: float) -> None:
        with self._lock:
            thread = self._thread
        if thread is not None:
            thread.join(timeout)

    def _serve(self) -> None:
        try:
            if self.dec.device.type == "cuda":
                torch.cuda.set_device(self.dec.device)
            while True:
                with self._lock:
                    room = self.max_jobs - len(self._active)
                    joiners, self._pending = self._pending[:room], self._pending[room:]
                    if not joiners and not self._active:
                        self._thread = None
                        return
                with generating(self.dec.model, self.dec.device, self.autocast):
                    if joiners:
                        self._admit([j for j in joiners if not j.cancelled])
                    else:
                        self._step()
                self._settle()
        except BaseException as exc:  # a failed step fails its jobs, never hangs them
            with self._lock:
                failed, self._active, self._pending, self._thread = self._active + self._pending, [], [], None
            for job in failed:
                _resolve(job, exc)

    def _admit(self, jobs: list[Job]) -> None:
        """Prefill the jobs' prompts together (left padded, each after the longest prefix kept
        from an earlier prompt: a game's next decision extends the last one's prompt), keep each
        one's keys and values, and file the children of each root (the reply's first token)."""
        if not jobs:
            return
        dec = self.dec
        hits = self._lookup(jobs)
        width = max(len(j.prompt_ids) - m for j, (_, m) in zip(jobs, hits))
        ids = torch.full((len(jobs), width), dec.pad_id, dtype=torch.long)
        mask = torch.zeros((len(jobs), width), dtype=torch.long)
        for i, (job, (_, m)) in enumerate(zip(jobs, hits)):
            suffix = job.prompt_ids[m:]
            ids[i, width - len(suffix) :] = torch.tensor(suffix)
            mask[i, width - len(suffix) :] = 1
        ids, mask = ids.to(dec.device), mask.to(dec.device)
        start = torch.tensor([m for _, m in hits], device=dec.device)
        positions = (mask.cumsum(-1) - 1).clamp(min=0) + start[:, None]
        cache = new_cache(dec.model)
        if any(m for _, m in hits):
            mask = torch.cat([past_cache(cache, hits, dec.device), mask], dim=1)
        logits = self._forward(ids, mask, positions, cache)
        layers, rows = list(cache.layers), mask.cpu()
        if not all(type(la).__name__ == "DynamicLayer" for la in layers):
            raise ModelError("reply_distribution needs a model whose layers all attend in full (a plain KV cache)")
        for i, job in enumerate(jobs):
            kv = row_kv(layers, rows[i], i, len(job.prompt_ids))
            assert kv is not None
            job.prompt_kv = torch.stack(kv, dim=1)
            self.prefix.store(job.prompt_ids, prefix_hashes(job.prompt_ids), len(job.prompt_ids),
                              (job.prompt_kv[:, 0], job.prompt_kv[:, 1]), self.prefix.version, shared=True)  # fmt: skip
        probs = self._probs(logits, jobs)
        for i, job in enumerate(jobs):
            self._children(job, probs[i], 1.0, (), None)
        self._active.extend(jobs)

    def _lookup(self, jobs: list[Job]) -> list[tuple[tuple[torch.Tensor, torch.Tensor] | None, int]]:
        """Per job: kept keys and values of a prefix of its prompt and its length (None, 0 when
        none), cut so that every row prefills as many tokens (as `Batch._lookup` does)."""
        self.prefix.check_weights(self.dec.model)
        hits = self.prefix.lookup_many([(j.prompt_ids, prefix_hashes(j.prompt_ids)) for j in jobs])
        width = max(len(j.prompt_ids) - m for j, (_, m) in zip(jobs, hits))
        out: list[tuple[tuple[torch.Tensor, torch.Tensor] | None, int]] = []
        for job, (kv, m) in zip(jobs, hits):
            m = max(0, len(job.prompt_ids) - width)
            out.append(((kv[0][:, :, :m], kv[1][:, :, :m]), m) if kv is not None and m else (None, 0))
        return out

    def _take(self) -> list[Row]:
        """The most probable open prefixes of every live job, a fair share of `batch` each."""
        live = [j for j in self._active if not j.done()]
        share = max(1, self.batch // max(1, len(live)))
        rows: list[Row] = []
        for job in live:
            for _ in range(min(share, job.max_nodes - job.expanded, self.batch - len(rows))):
                if not job.open:
                    break
                neg, _, ids, kv = heapq.heappop(job.open)
                rows.append((job, -neg, ids, kv))
        return rows

    def _step(self) -> None:
        """One forward over the taken prefixes' last tokens; their children filed."""
        rows = self._take()
        if not rows:
            return
        dec = self.dec
        context = [_prompt_kv(job).shape[3] + len(ids) - 1 for job, _, ids, _ in rows]
        width = max(context)
        ref = _prompt_kv(rows[0][0])
        kv = ref.new_zeros((ref.shape[0], 2, len(rows), ref.shape[2], width, ref.shape[4]))
        mask = torch.zeros((len(rows), width + 1), dtype=torch.long)
        for i, ((job, _, ids, reply), n) in enumerate(zip(rows, context)):
            prompt = _prompt_kv(job)
            start = width - n
            kv[:, :, i, :, start : start + prompt.shape[3]] = prompt
            if reply is not None:
                kv[:, :, i, :, start + prompt.shape[3] :] = reply
            mask[i, start:] = 1
        cache = new_cache(dec.model)
        for layer in range(kv.shape[0]):
            cache.update(kv[layer, 0], kv[layer, 1], layer)
        last = torch.tensor([[ids[-1]] for _, _, ids, _ in rows], device=dec.device)
        logits = self._forward(last, mask.to(dec.device), torch.tensor(context, device=dec.device)[:, None], cache)
        longest = max(len(ids) for _, _, ids, _ in rows)
        tail = torch.stack([torch.stack([la.keys[:, :, -longest:], la.values[:, :, -longest:]]) for la in cache.layers])
        probs = self._probs(logits, [job for job, _, _, _ in rows])
        for i, (job, prob, ids, _) in enumerate(rows):
            if not job.cancelled:
                self._children(job, probs[i], prob, ids, tail[:, :, i, :, longest - len(ids) :].clone())
        self.expansions += len(rows)

    def _forward(self, ids: torch.Tensor, mask: torch.Tensor, positions: torch.Tensor, cache: Any) -> torch.Tensor:
        dec = self.dec
        kwargs: dict[str, Any] = {dec.cache_kw: cache, "use_cache": True}
        if dec.keep_last:
            kwargs["logits_to_keep"] = 1
        self.forwards += 1
        return dec.model(input_ids=ids, attention_mask=mask, position_ids=positions, **kwargs).logits[:, -1, :].float()

    def _probs(self, logits: torch.Tensor, jobs: list[Job]) -> torch.Tensor:
        return sampler_probs(logits, [j.temperature for j in jobs], [j.top_p for j in jobs])

    def _children(self, job: Job, probs: torch.Tensor, prob: float, ids: tuple[int, ...], kv: KV | None) -> None:
        """File the children of prefix `ids` (probability `prob`, keys and values `kv` of all
        its ids): each finished one listed, each other one kept open; those below the floor dropped."""
        job.expanded += 1
        reach = probs * prob
        kept = (reach >= job.floor) & (probs > 0)
        job.dropped[ids] = float(reach[~kept].sum())  # their own sum, not 1 - kept: no cancellation
        keep = kept.nonzero().squeeze(1)
        eos = self.dec.eos_ids
        for token, p in zip(keep.tolist(), reach[keep].tolist()):
            child = (*ids, token)
            if token in eos:
                self._list(job, child, None, p)
            elif job.stop and (hit := stop_hit(self.dec.tokenizer, list(child), job.stop)) is not None:
                self._list(job, child, hit, p)
            elif len(child) >= job.max_tokens:
                self._list(job, child, None, p)
            else:
                heapq.heappush(job.open, (-p, next(self._order), child, kv))

    def _list(self, job: Job, ids: tuple[int, ...], hit: str | None, p: float) -> None:
        """A finished reply (its ids, a final EOS included) with probability `p`: its text as
        `chat` gives it (`local_replies.deliver`), its mass added to that text's."""
        body = list(ids[:-1] if ids[-1] in self.dec.eos_ids else ids)
        text, _ = reply_text(str(self.dec.tokenizer.decode(body, skip_special_tokens=True)), hit, "call_enumerated")
        job.replies[text] = job.replies.get(text, 0.0) + p
        job.sequences.add(ids)
        job.listed += p

    def _settle(self) -> None:
        """Answer the jobs that are done."""
        done = [j for j in self._active if j.done()]
        if done:
            self._active = [j for j in self._active if not j.done()]
        for job in done:
            self.listed[tuple(job.prompt_ids)] = Listed.of(job)
            job.open.clear()  # their keys and values
            job.dropped.clear()
            while len(self.listed) > MAX_LISTED:
                self.listed.pop(next(iter(self.listed)))
            _resolve(job, sorted(job.replies.items(), key=lambda r: -r[1]))


def sampler_probs(logits: torch.Tensor, temperatures: list[float], top_ps: list[float]) -> torch.Tensor:
    """(B, V) float64 on the CPU: the probability the sampler gives each token of each row
    (`local_sampling.draw`); a row whose weights do not sum to a finite number is its argmax,
    as there."""
    temps = torch.tensor(temperatures, device=logits.device)
    scaled = logits / temps[:, None]
    cut = [(i, p) for i, p in enumerate(top_ps) if p < 1.0]
    if cut:
        scaled = _top_p(scaled, cut)
    weights = (scaled - scaled.amax(dim=-1, keepdim=True)).exp_()
    total = weights.sum(dim=-1, keepdim=True, dtype=torch.float64)
    probs = weights.double() / total
    bad = ~torch.isfinite(total[:, 0])
    if bool(bad.any()):
        probs[bad] = torch.nn.functional.one_hot(logits[bad].argmax(-1), logits.shape[-1]).double()
    return probs.cpu()


def _prompt_kv(job: Job) -> KV:
    assert job.prompt_kv is not None
    return job.prompt_kv


def _resolve(job: Job, result: list[tuple[str, float]] | BaseException) -> None:
    settle(job.loop, job.future, result)
