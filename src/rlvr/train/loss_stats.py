"""Loss statistics of one update, summed over micro-batches and ranks (see docs/training.md).

The losses return per-micro-batch statistics (`rlvr.train.losses`, 0-dim tensors); `LossStats`
adds them up the way the batch loss would have computed them in one piece, and reads them back
from the device once per step. Sequences that skipped the passes (advantage 0, `rlvr.train.update`)
add their exact part: 0 to the loss terms, their share to the normaliser of the loss means, their
tokens to `tokens/trained`; the per-token means (entropy, ratio, clipping, mismatch) and
`tokens/processed` cover the sequences that ran.
"""

from __future__ import annotations

import math
import statistics

import torch

from rlvr.train.distributed import Dist
from rlvr.train.sequences import MicroBatch, TrainSequence


class LossStats:
    """Loss statistics over micro-batches (and ranks): loss terms add up by their batch share,
    other means are weighted by trainable tokens, min/max stay min/max."""

    SUMMED = ("loss/policy", "loss/total", "kl/ref")

    def __init__(self) -> None:
        self.sums: dict[str, float] = {}
        self.mins: dict[str, float] = {}
        self.maxs: dict[str, float] = {}
        self.grad_norms: list[float] = []
        self._pending: list[tuple[list[str], list[torch.Tensor], float, float, int]] = []

    def add(
        self, stats: dict[str, torch.Tensor], ent: torch.Tensor | None, logp: torch.Tensor, mb: MicroBatch, share: float
    ) -> None:
        """Queue a micro-batch's statistics; they are read back from the device all at once, by
        `result` (a read per value would make the CPU wait for the GPU each time)."""
        tokens = float(mb.cpu_mask.sum())
        if tokens == 0:
            return
        on = mb.mask > 0
        known = on & torch.isfinite(mb.gen_logp)
        names, values = list(stats), [torch.as_tensor(v, device=logp.device).float() for v in stats.values()]
        zero = logp.new_zeros(())
        if ent is not None:
            names.append("entropy/mean")
            values.append(torch.where(on, ent, zero).sum().float())
        names += ["_mismatch", "_known"]
        values += [torch.where(known, (mb.gen_logp - logp).abs(), zero).sum().float(), known.sum().float()]
        self._pending.append((names, values, share, tokens, mb.tokens))

    def skip(self, seqs: list[TrainSequence], share: float) -> None:
        """Sequences left out of the passes, whose `share` of the loss normaliser adds 0 to each
        loss term (kl/ref is never computed where they are left out)."""
        if not seqs:
            return
        s = self.sums
        for name in ("loss/policy", "loss/total"):
            s[name] = s.get(name, 0.0)
        s["_updates"] = s.get("_updates", 0.0) + share
        s["_skipped_tokens"] = s.get("_skipped_tokens", 0.0) + sum(sum(q.mask[1:]) for q in seqs)

    def count_sequences(self, total: int, skipped: int) -> None:
        """This rank's sequences in the update, and how many of them skipped the passes."""
        self.sums["_seqs"] = self.sums.get("_seqs", 0.0) + total
        self.sums["_skipped_seqs"] = self.sums.get("_skipped_seqs", 0.0) + skipped

    def _flush(self) -> None:
        if not self._pending:
            return
        flat = torch.stack([v for _, values, *_ in self._pending for v in values]).tolist()
        at = 0
        s = self.sums
        for names, _, share, tokens, processed in self._pending:
            for name in names:
                v, at = flat[at], at + 1
                if name in self.SUMMED:
                    s[name] = s.get(name, 0.0) + v * share
                elif name.endswith("/min"):
                    self.mins[name] = min(self.mins.get(name, math.inf), v)
                elif name.endswith("/max"):
                    self.maxs[name] = max(self.maxs.get(name, -math.inf), v)
                elif name.startswith("_") or name == "entropy/mean":
                    s[name] = s.get(name, 0.0) + v
                else:
                    s[name] = s.get(name, 0.0) + v * tokens
            s["_tokens"] = s.get("_tokens", 0.0) + tokens
            s["tokens/processed"] = s.get("tokens/processed", 0.0) + processed
            s["_updates"] = s.get("_updates", 0.0) + share
        self._pending.clear()

    def result(self, dist: Dist) -> dict[str, float]:
        self._flush()
        parts = dist.gather([(self.sums, self.mins, self.maxs)])
        sums: dict[str, float] = {}
        mins: dict[str, float] = {}
        maxs: dict[str, float] = {}
        for s, lo, hi in parts:
            for k, v in s.items():
                sums[k] = sums.get(k, 0.0) + v
            for k, v in lo.items():
                mins[k] = min(mins.get(k, math.inf), v)
            for k, v in hi.items():
                maxs[k] = max(maxs.get(k, -math.inf), v)
        tokens = sums.pop("_tokens", 0.0)
        known = sums.pop("_known", 0.0)
        mismatch = sums.pop("_mismatch", 0.0)
        updates = sums.pop("_updates", 0.0)
        skipped_tokens = sums.pop("_skipped_tokens", 0.0)
        seqs, skipped = sums.pop("_seqs", 0.0), sums.pop("_skipped_seqs", 0.0)
        out: dict[str, float] = {
            "tokens/trained": tokens + skipped_tokens,
            "tokens/processed": sums.pop("tokens/processed", 0.0),
            "batch/skipped_seqs_frac": skipped / max(seqs, 1.0),
        }
        for k, v in sums.items():
            out[k] = v / max(updates, 1e-12) if k in self.SUMMED else v / max(tokens, 1.0)
        out.update(mins)
        out.update(maxs)
        if known:
            out["logprob/gen_mismatch"] = mismatch / known
        if self.grad_norms:
            out["grad/norm"] = statistics.fmean(self.grad_norms)
        return out
