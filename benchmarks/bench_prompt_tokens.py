"""Prompt ids for one tic-tac-toe RL step's requests: the whole render tokenized every turn (as
`LocalModel.render` did) against `PromptTokens` (each turn tokenized from the previous prompt's
last added token on), alternated in one run, CPU seconds:

    OMP_NUM_THREADS=1 python benchmarks/bench_prompt_tokens.py
    OMP_NUM_THREADS=1 python benchmarks/bench_prompt_tokens.py --tasks 32 --group 8 --repeats 7 --out r.json

Why: a profile of the 17.6M tic-tac-toe step on an H200 (docs/benchmarks.md) put two thirds of
the generation thread in admitting requests, re-rendering and re-tokenizing every conversation
whole among it.

The trace: `--tasks` tasks of the recipe's environment (a perfect opponent with traps, 4 random
replies; `bench_tictactoe_step.py`'s ENV_ARGS) x `--group` rollouts, played all at once through
the engine by the `teacher` player (its replies have the trained model's format; `--explore` of
them the `random` player's, so that a group's games part as a sampling model's do), every prompt
recorded in the order the engine asked it. Each repeat then computes every prompt's ids from
empty caches, in that order, three ways: `whole` (the earlier `LocalModel.render`: equal
messages rendered once, else the chat template and the whole text tokenized), `incremental`
(`PromptTokens`), and `template` (the chat template alone, no tokenizing: the floor of any way
that renders the whole conversation). Timed by `time.process_time` (this process's CPU time),
the ways alternated in each repeat; ids are checked equal once.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from transformers import AutoTokenizer

from rlvr.clients.local_load import encodable
from rlvr.clients.local_tokens import PromptTokens
from rlvr.engine import run_rollouts
from rlvr.registry import load_environment
from rlvr.types import Completion, Messages, SamplingArgs

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
from bench_tictactoe_step import ENV_ARGS  # noqa: E402  (the recipe's environment)

Prompt = tuple[Messages, Any]


class Recorder:
    """Records every prompt asked, in order; the teacher answers, or (one reply in `explore`,
    seeded) the random player, so that a group's games part as a sampling model's do."""

    def __init__(self, teacher: Any, other: Any, explore: float) -> None:
        self.teacher, self.other, self.explore = teacher, other, explore
        self.rng = random.Random(0)
        self.prompts: list[Prompt] = []
        self.name = "recorder"

    async def chat(self, messages: Messages, sampling: SamplingArgs, tools: Any = None) -> Completion:
        self.prompts.append(([dict(m) for m in messages], tools))
        player = self.other if self.rng.random() < self.explore else self.teacher
        return await player.chat(messages, sampling, tools)


def trace(tasks: int, group: int, explore: float) -> list[Prompt]:
    env = load_environment("tictactoe", **ENV_ARGS)
    players = env.policies()
    recorder = Recorder(players["teacher"](), players["random"](), explore)
    chosen = list(env.tasks("train"))[:tasks]
    asyncio.run(run_rollouts(env, recorder, chosen, rollouts_per_task=group, concurrency=tasks))
    return recorder.prompts


def whole_prompt(
    tokenizer: Any, kept: dict[str, tuple[int, ...]], messages: Messages, tools: Any, generation_prompt: bool = True
) -> list[int]:
    """The earlier `LocalModel.render`: a repeated prompt (in `kept`) rendered once, else
    rendered and tokenized whole."""
    key = json.dumps([messages, tools or None, generation_prompt], sort_keys=True)
    if (hit := kept.get(key)) is None:
        text = tokenizer.apply_chat_template(
            messages, tools=tools or None, add_generation_prompt=generation_prompt, tokenize=False
        )
        hit = kept[key] = tuple(tokenizer(encodable(text), add_special_tokens=False)["input_ids"])
    return list(hit)


def whole_ids(tokenizer: Any, prompts: list[Prompt]) -> list[list[int]]:
    kept: dict[str, tuple[int, ...]] = {}
    return [whole_prompt(tokenizer, kept, messages, tools) for messages, tools in prompts]


def incremental_ids(tokenizer: Any, prompts: list[Prompt]) -> list[list[int]]:
    tokens = PromptTokens(tokenizer)
    return [tokens.ids(messages, tools) for messages, tools in prompts]


def template_only(tokenizer: Any, prompts: list[Prompt]) -> list[list[int]]:
    for messages, tools in prompts:
        tokenizer.apply_chat_template(messages, tools=tools, add_generation_prompt=True, tokenize=False)
    return []


WAYS = {"whole": whole_ids, "incremental": incremental_ids, "template": template_only}


def spread(values: list[float]) -> str:
    return f"{statistics.median(values):.4f} [{min(values):.4f}-{max(values):.4f}]"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default=str(ROOT / "models" / "tictactoe-tiny"), help="tokenizer and chat template")
    p.add_argument("--tasks", type=int, default=32, help="tasks a step (the recipe: 256 rollouts / 8)")
    p.add_argument("--group", type=int, default=8, help="rollouts a task")
    p.add_argument("--explore", type=float, default=0.3, help="share of replies the random player gives")
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--out", type=Path, default=None, help="also write the results here as JSON")
    args = p.parse_args()
    tokenizer = AutoTokenizer.from_pretrained(args.model)
    prompts = trace(args.tasks, args.group, args.explore)
    counter = PromptTokens(tokenizer)
    assert incremental_ids(tokenizer, prompts) == whole_ids(tokenizer, prompts), "incremental ids differ"
    for messages, tools in prompts:
        counter.ids(messages, tools)
    distinct = len({json.dumps([m, t], sort_keys=True) for m, t in prompts})
    rendered = sum(
        len(encodable(tokenizer.apply_chat_template(m, tools=t, add_generation_prompt=True, tokenize=False)))
        for m, t in {json.dumps([m, t], sort_keys=True): (m, t) for m, t in prompts}.values()
    )
    seconds: dict[str, list[float]] = {way: [] for way in WAYS}
    for _ in range(args.repeats):
        for way, run in WAYS.items():
            start = time.process_time()
            run(tokenizer, prompts)
            seconds[way].append(time.process_time() - start)
    ratios = [w / i for w, i in zip(seconds["whole"], seconds["incremental"])]
    s = counter.stats
    print(
        f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS')}"
    )
    print(f"step: {len(prompts)} prompts, {distinct} distinct (renders: whole {distinct}, incremental {s.renders})")
    print(f"characters tokenized: whole {rendered:,}, incremental {s.chars:,} ({s.extended} extended, {s.whole} whole)")
    for way in WAYS:
        print(f"{way:12s} CPU s a step: {spread(seconds[way])}")
    print(
        f"whole / incremental: {statistics.median(ratios):.2f}x [{min(ratios):.2f}-{max(ratios):.2f}] over {args.repeats} repeats"
    )
    if args.out:
        result = {"prompts": len(prompts), "distinct": distinct, "stats": vars(s), "chars_whole": rendered}
        args.out.write_text(json.dumps({**result, "seconds": seconds, "ratios": ratios}, indent=1))


if __name__ == "__main__":
    main()
