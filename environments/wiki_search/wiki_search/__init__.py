"""Wiki search: answer questions about a fictional world by searching a local encyclopedia.

The world (countries, cities, rivers, mountains, people, universities, companies, works) is
generated from a seed; its ~3,000 articles (`size="full"`; ~300 for `size="small"`) are
indexed with SQLite FTS5 and cached on disk (`wiki_search.store`). Questions need one to three
page lookups ("In which country was the founder of University of Drindrilburg born?") and have exact
answers. Tools:

    search_pages(query)        best-matching pages: [page_id] title — snippet (BM25 ranking)
    view_sections(page_id)     the page's sections: [section_id] heading
    read_section(section_id)   the section's text

The database handle is a hidden argument (`StatefulToolEnv`); with `mcp=True` the same tools
are served by an MCP server (`python -m wiki_search.server`) started over stdio, and with
`mcp_url=...` reached over streamable HTTP.

Rewards:

    exact_match          weight 1   the final <answer> equals the reference (normalised)
    judge_reward         optional   a judge model's verdict (`judge_model=`, `judge_weight=`)
    <tool>_calls         weight 0   calls to each tool (metrics)
    failed_tool_calls    weight 0   calls that returned an error (metric)

The engine records turns per rollout. Reference players: `oracle` (looks up every hop through
tool calls, reward 1), `no_tools` (answers without tools, reward ~0).
"""

from __future__ import annotations

import functools
import statistics
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Unpack

from rlvr import Policy, Rubric, StatefulToolEnv, Task, ToolState, XMLParser
from rlvr.clients.base import ChatClient
from rlvr.deprecation import renamed_arguments
from rlvr.envs.mcp import MCPEnv, MCPServerConfig
from rlvr.envs.multiturn import EnvOptions
from rlvr.errors import UsageError
from rlvr.judge import Judge, judge_reward, reference_judge
from rlvr.types import Messages, Rollout
from wiki_search.players import no_tools_policy, oracle_policy
from wiki_search.questions import make_tasks, normalize
from wiki_search.store import WikiDB, ensure_index
from wiki_search.tools import TOOLS
from wiki_search.world import SIZES, World

__all__ = ["WikiSearchEnv", "WikiSearchMCPEnv", "WikiState", "exact_match", "load_environment"]

SYSTEM_PROMPT = (
    "Answer the question using the encyclopedia tools: search_pages(query) finds pages, "
    "view_sections(page_id) lists a page's sections, read_section(section_id) returns a section's text. "
    "Some questions need several lookups (for example a person's birthplace, then that city's country). "
    "When you know the answer, reply with only <answer>...</answer>: a name or a number, exactly as the "
    "encyclopedia writes it."
)


@dataclass(kw_only=True)
class WikiState(ToolState):
    db: WikiDB | None = None
    """The shared read-only database handle (a hidden tool argument)."""


def _policies() -> dict[str, Callable[[], ChatClient]]:
    return {
        "oracle": functools.partial(Policy, oracle_policy, name="oracle"),
        "no_tools": functools.partial(Policy, no_tools_policy, name="no_tools"),
    }


def _summarize(rollouts: Sequence[Rollout]) -> dict[str, float]:
    """Exact-match accuracy by number of hops, and tool calls per rollout."""
    scored = [r for r in rollouts if r.error is None]
    out: dict[str, float] = {}
    for hops in sorted({int(r.info.get("hops", 0)) for r in scored}):
        group = [r.rewards.get("exact_match", 0.0) for r in scored if r.info.get("hops") == hops]
        out[f"exact_match {hops} hop{'s' if hops > 1 else ''}"] = statistics.fmean(group)
    if scored:
        out["tool calls per rollout"] = statistics.fmean(
            sum(v for k, v in r.rewards.items() if k.endswith("_calls") and k != "failed_tool_calls") for r in scored
        )
    return out


class WikiSearchEnv(StatefulToolEnv[WikiState]):
    """The tools run in-process against the shared database."""

    hidden_args = ("db",)

    def __init__(self, dataset: Sequence[Task], *, db: WikiDB, **options: Unpack[EnvOptions]) -> None:
        super().__init__(dataset, tools=list(TOOLS), **options)
        self.db = db

    def setup_state(self, task: Task) -> WikiState:
        return WikiState(task=task, db=self.db)

    def policies(self) -> dict[str, Callable[[], ChatClient]]:
        return _policies()

    def summarize(self, rollouts: Sequence[Any]) -> dict[str, float] | None:
        return _summarize(rollouts)

    async def aclose(self) -> None:
        """Close the database connection (it reopens if the environment is used again)."""
        self.db.close()


class WikiSearchMCPEnv(MCPEnv):
    """The same tools, served by `python -m wiki_search.server` (stdio) or a running server."""

    def policies(self) -> dict[str, Callable[[], ChatClient]]:
        return _policies()

    def summarize(self, rollouts: Sequence[Any]) -> dict[str, float] | None:
        return _summarize(rollouts)


def exact_match(completion: Messages, answer: str | None, parser: XMLParser) -> float:
    """1 when the final <answer> equals the reference after `normalize`.

    >>> p = XMLParser(["think", "answer"], optional=["think"])
    >>> exact_match([{"role": "assistant", "content": "<answer>the Ostva River</answer>"}], "Ostva River", p)
    1.0
    """
    got = parser.parse_answer(completion)
    return float(got is not None and answer is not None and normalize(got) == normalize(answer))


def _tool_metric(tool: str) -> Callable[[ToolState], float]:
    def metric(state: ToolState) -> float:
        return float(state.tool_calls.get(tool, 0))

    metric.__name__ = f"{tool}_calls"
    metric.__doc__ = f"Calls to {tool} (a metric)."
    return metric


def failed_tool_calls(state: ToolState) -> float:
    """Tool calls that returned an error (unknown tool, bad arguments, missing page...)."""
    return float(state.failed_tool_calls)


def _judge(model: str, base_url: str | None) -> Judge:
    if model == "policy:reference":
        return judge_reward(reference_judge())
    from rlvr.clients.resolve import make_client

    return judge_reward(make_client(model, base_url=base_url))


@renamed_arguments(num_examples="num_tasks", num_eval_examples="eval_tasks")
def load_environment(
    seed: int = 0,
    size: str = "full",
    num_tasks: int = 1000,
    eval_tasks: int = 100,
    min_hops: int = 1,
    max_hops: int = 3,
    max_turns: int = 24,
    mcp: bool = False,
    mcp_url: str | None = None,
    judge_model: str | None = None,
    judge_base_url: str | None = None,
    judge_weight: float = 0.0,
    cache_dir: str | None = None,
    rebuild: bool = False,
) -> WikiSearchEnv | WikiSearchMCPEnv:
    """The wiki-search environment.

    Args:
        seed: world and question seed; same arguments, same world and tasks.
        size: `full` (~3,000 articles) or `small` (~300, for tests).
        num_tasks: training questions.
        eval_tasks: evaluation questions (a separate seeded stream).
        min_hops: fewest pages a question needs.
        max_hops: most pages a question needs (at most 3).
        max_turns: model turns before the episode is cut.
        mcp: serve the tools through an MCP server started over stdio.
        mcp_url: use a running MCP server at this streamable-HTTP URL instead.
        judge_model: add `judge_reward` judged by this model (`policy:reference` = offline judge).
        judge_base_url: OpenAI-compatible endpoint of the judge model.
        judge_weight: weight of `judge_reward` in the total (0: a logged metric).
        cache_dir: where the index is cached (default: see `wiki_search.store`).
        rebuild: rebuild the cached index.
    """
    if size not in SIZES:
        raise UsageError(f"size must be one of {sorted(SIZES)}, got {size!r}")
    if not 1 <= min_hops <= max_hops <= 3:
        raise UsageError(f"need 1 <= min_hops <= max_hops <= 3, got min_hops={min_hops}, max_hops={max_hops}")
    if num_tasks < 1 or eval_tasks < 1:
        raise UsageError(f"num_tasks and eval_tasks must be >= 1, got {num_tasks}, {eval_tasks}")
    world = World(seed, size)
    index = ensure_index(world, cache_dir, rebuild=rebuild)
    parser = XMLParser(["think", "answer"], optional=["think"])
    funcs: list[Any] = [exact_match, *(_tool_metric(t.__name__) for t in TOOLS), failed_tool_calls]
    weights = [1.0] + [0.0] * (len(funcs) - 1)
    if judge_model is not None:
        funcs.append(_judge(judge_model, judge_base_url))
        weights.append(judge_weight)
    common: EnvOptions = {
        "eval_dataset": make_tasks(world, "eval", eval_tasks, seed, min_hops, max_hops),
        "system_prompt": SYSTEM_PROMPT,
        "parser": parser,
        "rubric": Rubric(funcs, weights, parser=parser),
        "max_turns": max_turns,
    }
    train = make_tasks(world, "train", num_tasks, seed, min_hops, max_hops)
    if mcp or mcp_url:
        server = (
            MCPServerConfig("wiki_search", url=mcp_url)
            if mcp_url
            else MCPServerConfig(
                "wiki_search", command=sys.executable, args=("-m", "wiki_search.server", "--db", str(index.path))
            )
        )
        return WikiSearchMCPEnv(train, servers=[server], **common)
    return WikiSearchEnv(train, db=WikiDB(index.path), **common)
