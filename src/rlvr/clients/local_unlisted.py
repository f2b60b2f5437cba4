"""Replies outside an enumerated list, drawn directly from the sampler's law
(`LocalModel.draw_unlisted`).

`LocalModel.reply_distribution` lists a prompt's most probable replies and keeps where the rest
of the mass lies (`local_enumerate.Listed`): at each prefix it expanded, the children it left
out (below the floor), and each prefix still open when it stopped. Every reply it did not list
goes through exactly one of these exits, so a draw from the unlisted replies' law is: an exit
drawn by its mass; at an expanded prefix, its next token drawn from the sampler's probabilities
with the kept tokens taken out; then the reply sampled on from there, token by token, with the
sampler's probabilities (`local_enumerate.sampler_probs`: temperature, top-p), ending as `chat`'s
replies end (an EOS id, a stop string, max_tokens). One forward a token, one row, transformers'
forward over a `DynamicCache`: about one `chat` draw's work, where drawing `chat` until a reply
outside the list comes takes about 1 / (unlisted mass) of them.
"""

from __future__ import annotations

import asyncio
import random
from typing import TYPE_CHECKING, Any, Protocol

import torch

from rlvr.clients.local_batch import Decoding, new_cache, stop_hit
from rlvr.clients.local_enumerate import Listed, sampler_probs
from rlvr.clients.local_load import generating
from rlvr.clients.local_replies import reply_text
from rlvr.types import Completion, Messages, SamplingArgs

if TYPE_CHECKING:
    from rlvr.clients.local_enumerate import Enumerator


def draw(dec: Decoding, autocast: torch.dtype | None, prompt_ids: list[int], listed: Listed, seed: int) -> Any:
    """One reply outside `listed` (the ids, a final EOS included, and the stop string it hit),
    seeded by `seed`; None when nothing is left out or the exit drawn has no mass left."""
    if not listed.exits:
        return None
    _, prefix, kept = random.Random(seed).choices(listed.exits, weights=[e[0] for e in listed.exits])[0]
    gen = torch.Generator().manual_seed(seed & 0xFFFFFFFFFFFF)
    ids = list(prefix)
    with generating(dec.model, dec.device, autocast):
        cache = new_cache(dec.model)
        logits = _forward(dec, [*prompt_ids, *ids], cache)
        while True:
            probs = sampler_probs(logits, [listed.temperature], [listed.top_p])[0]
            if kept:  # an expanded prefix: one of its children left out
                probs[list(kept)] = 0.0
                kept = None
            if not float(probs.sum()) > 0.0:
                return None
            token = int(torch.multinomial(probs, 1, generator=gen))
            ids.append(token)
            if token in dec.eos_ids:  # (in the enumeration's order: EOS, a stop string, max_tokens)
                return ids, None
            if listed.stop and (hit := stop_hit(dec.tokenizer, ids, listed.stop)) is not None:
                return ids, hit
            if len(ids) >= listed.max_tokens:
                return ids, None
            logits = _forward(dec, [token], cache)


def _forward(dec: Decoding, ids: list[int], cache: Any) -> torch.Tensor:
    """The last position's logits (1, V) of `ids` run after what `cache` holds."""
    kwargs: dict[str, Any] = {dec.cache_kw: cache, "use_cache": True}
    if dec.keep_last:
        kwargs["logits_to_keep"] = 1
    out = dec.model(input_ids=torch.tensor([ids], device=dec.device), **kwargs)
    return out.logits[:, -1, :].float()


class _Host(Protocol):
    """What `UnlistedDraws` uses of the `LocalModel` it is mixed into."""

    _enumerator: Enumerator | None
    autocast: torch.dtype | None
    tokenizer: Any
    context_length: int

    def _prompt(self, messages: Messages, tools: list[dict[str, Any]] | None) -> list[int]: ...

    def _decoding(self) -> Decoding: ...


def _listed(host: _Host, messages: Messages, tools: list[dict[str, Any]] | None) -> tuple[list[int], Listed | None]:
    prompt_ids = host._prompt(messages, tools)
    return prompt_ids, None if host._enumerator is None else host._enumerator.listed.get(tuple(prompt_ids))


class UnlistedDraws:
    """`LocalModel`'s side of the exact evaluation's tail (`rlvr.exact_tail`): which ids a
    conversation's last `reply_distribution` listed, and replies drawn from the rest."""

    def listed_ids(
        self: _Host, messages: Messages, tools: list[dict[str, Any]] | None = None
    ) -> frozenset[tuple[int, ...]] | None:
        """The token ids (as `chat`'s `Completion.token_ids`) of the replies the last
        `reply_distribution` of this conversation listed; None if it was not asked. A drawn reply
        is in the listed part exactly when its ids are here: one text can also come from ids
        the enumeration did not reach."""
        listed = _listed(self, messages, tools)[1]
        return None if listed is None else listed.sequences

    async def draw_unlisted(
        self: _Host,
        messages: Messages,
        sampling: SamplingArgs,
        tools: list[dict[str, Any]] | None = None,
        *,
        seed: int = 0,
    ) -> Completion | None:
        """A reply drawn from the law of `chat(messages, sampling, tools)` given that its ids are
        not among `listed_ids` (see the module). None when the last `reply_distribution` of this
        conversation was not asked with these sampling settings, or listed everything."""
        prompt_ids, listed = _listed(self, messages, tools)
        stop = tuple(s for s in sampling.stop or () if s)
        same = (float(sampling.temperature), float(sampling.top_p), stop)
        if listed is None or same != (listed.temperature, listed.top_p, listed.stop):
            return None
        room = self.context_length - len(prompt_ids)
        if (room if sampling.max_tokens is None else min(room, sampling.max_tokens)) != listed.max_tokens:
            return None
        dec = self._decoding()
        drawn = await asyncio.to_thread(draw, dec, self.autocast, prompt_ids, listed, seed)
        if drawn is None:
            return None
        ids, hit = drawn
        eos = dec.eos_ids
        body = ids[:-1] if ids[-1] in eos else ids
        text, calls = reply_text(str(self.tokenizer.decode(body, skip_special_tokens=True)), hit, "call_unlisted")
        finish = "tool_calls" if calls else "length" if hit is None and ids[-1] not in eos else "stop"
        return Completion(text=text, token_ids=ids, tool_calls=calls, finish_reason=finish, prompt_token_ids=prompt_ids)
