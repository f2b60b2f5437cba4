"""The step-0 temperature probe: does sampling at the training temperature keep what greedy has?

    result = await probe(probe_set(env, cfg.probe_tasks), client, sampling)   # before step 1
    line = collapse_warning(result)                                           # None: carry on

A model fresh from SFT can be right greedily and still fall apart when sampled: at T = 1 the
low-probability tail of each token adds up over a reply, and the replies turn malformed. RL then
sees almost no reward and no group contrast, and makes the greedy model worse. The probe plays
the first `probe_tasks` training tasks once greedily and once at the training temperature (two
small evaluations through `rlvr.train.evaluation.evaluate`) and compares mean reward and the
share of well-formatted replies (the env's parser, when it has one with `format_reward`).
A collapse is a sampled reward below half the greedy one (when greedy scores above 0) or a
format share more than 30 points lower; the trainer then prints one line with both numbers and
what to try, and trains anyway.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any

from rlvr.clients.base import ChatClient
from rlvr.envs.multiturn import MultiTurnEnv
from rlvr.summary import summarize
from rlvr.train.evaluation import EvalSet, evaluate
from rlvr.types import Rollout, SamplingArgs

REWARD_RATIO = 0.5
"""A sampled mean reward below this share of the greedy one (greedy above 0) is a collapse."""
FORMAT_DROP = 0.30
"""A well-formatted share this much lower (0-1) when sampled than greedily is a collapse."""


@dataclass(frozen=True)
class ProbeResult:
    """Mean reward and format share of the same tasks played greedily and sampled."""

    temperature: float
    tasks: int
    greedy_reward: float
    sampled_reward: float
    greedy_format: float | None
    """share of well-formatted replies (None: the env's parser judges no format)"""
    sampled_format: float | None

    def metrics(self) -> dict[str, float]:
        """`probe/*` metrics, logged at step 0 (see docs/training.md)."""
        out = {"probe/reward_greedy": self.greedy_reward, "probe/reward_sampled": self.sampled_reward}
        if self.greedy_format is not None and self.sampled_format is not None:
            out["probe/format_greedy"] = self.greedy_format
            out["probe/format_sampled"] = self.sampled_format
        return out


def probe_set(
    env: MultiTurnEnv[Any], tasks: int, env_args: dict[str, Any], *, rank: int = 0, world: int = 1
) -> EvalSet:
    """The first `tasks` training tasks of `env` (this process's share of them)."""
    first = list(env.tasks("train")[:tasks])
    return EvalSet("probe", env, first[rank::world], env_args, size=len(first))


async def probe(played_by: EvalSet, client: ChatClient, sampling: SamplingArgs) -> tuple[list[Rollout], list[Rollout]]:
    """The probe's rollouts: greedy, then at `sampling`'s temperature (same tasks, same seeds)."""
    greedy = SamplingArgs(max_tokens=sampling.max_tokens, temperature=0.0, stop=sampling.stop)
    at_t = SamplingArgs(
        max_tokens=sampling.max_tokens, temperature=sampling.temperature, top_p=sampling.top_p, stop=sampling.stop
    )
    first = await evaluate([played_by], client, greedy)
    second = await evaluate([played_by], client, at_t)
    return first["probe"], second["probe"]


def compare(env: MultiTurnEnv[Any], greedy: list[Rollout], sampled: list[Rollout], temperature: float) -> ProbeResult:
    """Mean reward and format share of both sets of rollouts (all processes' rollouts)."""
    return ProbeResult(
        temperature=temperature,
        tasks=len(greedy),
        greedy_reward=_mean_reward(greedy),
        sampled_reward=_mean_reward(sampled),
        greedy_format=format_share(env, greedy),
        sampled_format=format_share(env, sampled),
    )


def format_share(env: MultiTurnEnv[Any], rollouts: list[Rollout]) -> float | None:
    """Mean of the env parser's `format_reward` over the rollouts; None without such a parser."""
    judge = getattr(env.parser, "format_reward", None)
    if judge is None or not rollouts:
        return None
    return statistics.fmean(judge(r.completion) for r in rollouts)


def collapse_warning(r: ProbeResult) -> str | None:
    """One line when sampling at the training temperature loses the greedy reward or format.

    >>> collapse_warning(ProbeResult(1.0, 16, 0.32, 0.05, 0.96, 0.05))[:72]
    'warning: at temperature 1 the model loses what it does greedily (reward '
    >>> collapse_warning(ProbeResult(1.0, 16, 0.32, 0.30, 0.96, 0.90)) is None
    True
    """
    reward_lost = r.greedy_reward > 0 and r.sampled_reward < REWARD_RATIO * r.greedy_reward
    format_lost = (
        r.greedy_format is not None
        and r.sampled_format is not None
        and r.greedy_format - r.sampled_format > FORMAT_DROP
    )
    if not (reward_lost or format_lost):
        return None
    numbers = f"reward {r.sampled_reward:.3f} vs {r.greedy_reward:.3f} greedy"
    if r.greedy_format is not None and r.sampled_format is not None:
        numbers += f", well-formatted {100 * r.sampled_format:.0f}% vs {100 * r.greedy_format:.0f}%"
    return (
        f"warning: at temperature {r.temperature:g} the model loses what it does greedily ({numbers}, "
        f"{r.tasks} tasks), so RL will see little signal; try a lower --temperature (e.g. "
        f"{min(0.3, r.temperature / 2):g}) or more SFT (--probe-tasks 0 skips this check)"
    )


def _mean_reward(rollouts: list[Rollout]) -> float:
    return float(summarize(rollouts)["reward"]["mean"]) if rollouts else 0.0
