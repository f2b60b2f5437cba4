"""Group-relative advantages and group filters: pure Python, no torch.

Rollouts arrive grouped: with `group_size` G, `rewards[g*G:(g+1)*G]` are the G rollouts of
group g (the same task sampled G times). Rewards may be any sequence of numbers (a list, a
numpy array, a 1-D tensor); results are plain lists of floats, which the trainer turns into
the `adv` (B,) tensor of `rlvr.train.losses` (`torch.tensor(advantages)`).

Choices:
- Advantage = reward - group mean (GRPO, DeepSeekMath), optionally divided by
  (group std + eps), std being the population std (ddof = 0), so a scaled group has unit
  variance. Dr. GRPO ("Understanding R1-Zero-Like Training") drops the std scaling:
  use `scale_std=False` with the dr_grpo loss.
- A group whose rewards are all exactly equal gets advantages of exactly 0.0 (never NaN, never
  float noise blown up by the std division).
- DAPO's dynamic sampling (Yu et al. 2025) drops groups whose rewards are all equal: they carry
  no gradient but still count in DAPO's token normalisation. `drop_uniform_groups` says which
  groups to keep; the trainer calls it when the loss's row of `rlvr.train.loss_specs.SPECS`
  says `drop_uniform_groups` (dapo). Rewards within `atol` of each other count as equal.
- `batch_advantages` applies all this to a batch of rollouts: failed rollouts (an error) are
  never trained on and take their group's mean of scored rewards for the baseline, so they
  shift nobody's advantage; truncated ones are left out of the loss with `mask_truncated`.
- Turn credit (`turn_advantages`, the trainer's `turn_credit`): where the env scores each
  model turn on its own (`TurnScored.turn_rewards`), a turn's tokens get the episode's
  advantage plus `weight` x that turn's score normalised over every scored turn of its group
  (mean 0, unit population std; the process-supervision normalisation of DeepSeekMath, Shao et
  al. 2024, taken per turn rather than summed over later steps: an env that wants later turns
  credited puts them in its scores). One shared advantage per episode cannot tell the turn that
  lost a game from the good turns before it; this can.
- Sharpening (`own_logprob`, the trainer's `sharpen`): each rollout's advantage gains
  `weight` x (its log-probability minus its group's mean of them), the log-probability being
  what its sampler gave its sampled tokens, summed over its model turns (replies given by
  `restart_explore` are not the policy's and count 0). REINFORCE on log p(y) is the gradient of
  minus the policy's entropy (E[log p * grad log p] = -grad H), the entropy-minimisation
  objective of Agarwal et al. 2025 ("The Unreasonable Effectiveness of Entropy Minimization in
  LLM Reasoning"), with the group mean as its baseline: the rare replies of a group lose against
  its likely ones, so the sampled policy concentrates where its greedy one already is. The term
  is added after the env advantage's std scaling, as turn credit's is, so `weight` alone sets
  its size: a group whose env rewards tie gets `weight`-sized advantages, not unit ones. DAPO's
  filter still judges groups by their env rewards.
- `group_stats` gives logging metrics: `group/zero_std_frac` (share of groups whose rewards are
  all equal, i.e. that teach nothing), `group/reward_std_mean` (mean within-group std),
  `group/count`.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

from rlvr.errors import UsageError
from rlvr.types import Rollout


def _groups(rewards: Sequence[float], group_size: int) -> list[list[float]]:
    if group_size < 1:
        raise UsageError(f"group_size must be >= 1, got {group_size}")
    if len(rewards) % group_size:
        raise UsageError(
            f"{len(rewards)} rewards do not split into groups of {group_size}; "
            f"pass group_size rollouts per task, grouped contiguously"
        )
    values = [float(r) for r in rewards]
    return [values[i : i + group_size] for i in range(0, len(values), group_size)]


def _mean_std(group: list[float]) -> tuple[float, float]:
    mean = math.fsum(group) / len(group)
    var = math.fsum((r - mean) ** 2 for r in group) / len(group)
    return mean, math.sqrt(var)


def group_advantages(rewards: Sequence[float], group_size: int, scale_std: bool, eps: float = 1e-6) -> list[float]:
    """Reward minus its group's mean, divided by (group std + eps) when `scale_std`.

    >>> group_advantages([1.0, 0.0, 0.5, 0.5], group_size=2, scale_std=False)
    [0.5, -0.5, 0.0, 0.0]
    >>> [round(a, 4) for a in group_advantages([1.0, 0.0], group_size=2, scale_std=True)]
    [1.0, -1.0]
    """
    out: list[float] = []
    for group in _groups(rewards, group_size):
        if all(r == group[0] for r in group):
            out.extend(0.0 for _ in group)
            continue
        mean, std = _mean_std(group)
        scale = std + eps if scale_std else 1.0
        out.extend((r - mean) / scale for r in group)
    return out


def _is_uniform(group: list[float], atol: float) -> bool:
    return max(group) - min(group) <= atol


def drop_uniform_groups(rewards: Sequence[float], group_size: int, atol: float = 1e-9) -> list[bool]:
    """DAPO dynamic sampling: one flag per group, True = keep (its rewards are not all equal).

    Expand to rollouts with `[k for k in keep for _ in range(group_size)]`.

    >>> drop_uniform_groups([1.0, 1.0, 0.0, 1.0, 0.0, 0.0], group_size=2)
    [False, True, False]
    """
    return [not _is_uniform(g, atol) for g in _groups(rewards, group_size)]


def own_logprob(rollout: Rollout) -> float | None:
    """The log-probability its sampler gave a rollout's sampled tokens, summed over its model
    turns (given replies excluded); None when a sampled turn came without logprobs."""
    total = 0.0
    for turn in rollout.turns:
        c = turn.completion
        if c.finish_reason == "given":
            continue
        if c.logprobs is None or len(c.logprobs) != len(c.token_ids or ()):
            return None
        try:
            total += math.fsum(c.logprobs)
        except (OverflowError, ValueError):  # hostile logprobs (-1e308 twice, inf and -inf)
            total += sum(c.logprobs)
    return total


def _logprobs(rollouts: Sequence[Rollout], weight: float) -> list[float]:
    """Each rollout's `own_logprob`, failed rollouts 0.0 (never trained on); raises where a
    sampled turn has none or a non-finite one."""
    out = []
    for i, r in enumerate(rollouts):
        lp = own_logprob(r) if r.error is None else 0.0
        if lp is None or not math.isfinite(lp):
            raise UsageError(
                f"sharpen = {weight} needs the log-probability of every sampled token; rollout {i} "
                f"({r.task_id!r}) has {lp}: the generation backend returned no (or non-finite) logprobs"
            )
        out.append(lp)
    return out


def _sharpen(advantages: list[float], rollouts: Sequence[Rollout], group_size: int, weight: float) -> list[float]:
    """`advantages` plus `weight` x (own log-probability - its group's mean over scored rollouts);
    failed rollouts are left as they are."""
    lps = _logprobs(rollouts, weight)
    out = list(advantages)
    for start in range(0, len(rollouts), group_size):
        rows = [i for i in range(start, start + group_size) if rollouts[i].error is None]
        mean = _mean_std([lps[i] for i in rows])[0] if rows else 0.0
        for i in rows:
            out[i] += weight * (lps[i] - mean)
    return out


def batch_advantages(
    rollouts: Sequence[Rollout],
    group_size: int,
    *,
    scale_std: bool,
    mask_truncated: bool,
    drop_uniform: bool,
    sharpen: float = 0.0,
) -> tuple[list[float], list[bool], float]:
    """Each rollout's advantage, whether to train on it, and the share of groups kept (1.0
    unless `drop_uniform`, DAPO's filter). `sharpen` > 0 adds that weight x each rollout's
    `own_logprob` relative to its group's mean (module docstring)."""
    g = group_size
    rewards = [r.reward for r in rollouts]
    for start in range(0, len(rollouts), g):  # failed rollouts take their group's mean
        group = rollouts[start : start + g]
        scored = [rewards[start + i] for i, r in enumerate(group) if r.error is None]
        fill = statistics.fmean(scored) if scored else 0.0
        for i, r in enumerate(group):
            if r.error is not None:
                rewards[start + i] = fill
    advantages = group_advantages(rewards, g, scale_std=scale_std)
    if sharpen:
        advantages = _sharpen(advantages, rollouts, g, sharpen)
    trainable = [r.error is None and not (mask_truncated and r.truncated) for r in rollouts]
    kept = 1.0
    if drop_uniform:
        keep = drop_uniform_groups(rewards, g)
        trainable = [t and keep[i // g] for i, t in enumerate(trainable)]
        kept = sum(keep) / max(len(keep), 1)
    return advantages, trainable, kept


def turn_advantages(
    advantages: Sequence[float],
    scores: Sequence[Sequence[float] | None],
    turns: Sequence[int],
    group_size: int,
    weight: float,
    eps: float = 1e-6,
) -> list[list[float]]:
    """Each rollout's advantage per model turn: its episode advantage plus `weight` x its
    turn's score normalised within the group (module docstring). `scores[i]` holds one score
    per model turn of rollout i (`turns[i]` of them) or is None (not scored: every turn gets
    the episode advantage alone); a group with fewer than two scored turns, or scores all
    equal, adds nothing.

    >>> got = turn_advantages([0.5, -0.5], [[1.0, 0.0], [0.0]], [2, 1], group_size=2, weight=1.0)
    >>> [[round(a, 3) for a in row] for row in got]  # scores 1, 0, 0: mean 1/3, std 0.471
    [[1.914, -0.207], [-1.207]]
    >>> turn_advantages([0.0, 0.0], [None, [2.0, 2.0]], [1, 2], group_size=2, weight=1.0)
    [[0.0], [0.0, 0.0]]
    """
    out: list[list[float]] = []
    for start in range(0, len(advantages), group_size):
        rows = range(start, min(start + group_size, len(advantages)))
        pooled = [float(x) for i in rows for x in (scores[i] or [])]
        mean, std = _mean_std(pooled) if len(pooled) > 1 else (0.0, 0.0)
        for i in rows:
            own = scores[i]
            if own is None or std == 0.0:
                out.append([float(advantages[i])] * turns[i])
            else:
                out.append([float(advantages[i]) + weight * (float(x) - mean) / (std + eps) for x in own])
    return out


def group_stats(rewards: Sequence[float], group_size: int, atol: float = 1e-9) -> dict[str, float]:
    """Logging metrics over the groups of a batch.

    >>> group_stats([1.0, 1.0, 0.0, 1.0], group_size=2)
    {'group/count': 2.0, 'group/zero_std_frac': 0.5, 'group/reward_std_mean': 0.25}
    """
    groups = _groups(rewards, group_size)
    if not groups:
        return {"group/count": 0.0, "group/zero_std_frac": 0.0, "group/reward_std_mean": 0.0}
    uniform = sum(_is_uniform(g, atol) for g in groups)
    return {
        "group/count": float(len(groups)),
        "group/zero_std_frac": uniform / len(groups),
        "group/reward_std_mean": math.fsum(_mean_std(g)[1] for g in groups) / len(groups),
    }
