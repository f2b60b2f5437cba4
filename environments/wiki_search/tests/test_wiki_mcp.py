"""wiki_search over MCP: the same tools served by a real MCP server (a subprocess started over
stdio), the same scores and the same conversations as the in-process tools."""

from __future__ import annotations

import json
import os
import statistics

import pytest

pytest.importorskip("mcp")

from wiki_search import WikiSearchMCPEnv, load_environment
from wiki_search.store import ensure_index
from wiki_search.world import World

from rlvr import Policy
from rlvr.cli import main
from rlvr.engine import run_rollouts
from rlvr.types import Completion, ToolCall


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = str(tmp_path_factory.mktemp("wiki-mcp-cache"))
    ensure_index(World(0, "small"), path)
    return path


def _servers() -> set[int]:
    """Pids of running wiki MCP servers started by this process (Linux): its descendants only,
    since tests on other workers, or other jobs on the machine, start their own."""
    found = set()
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if b"wiki_search.server" in f.read() and _descends_from_us(int(pid)):
                    found.add(int(pid))
        except OSError:
            pass
    return found


def _descends_from_us(pid: int) -> bool:
    me = os.getpid()
    while pid > 1:
        try:
            with open(f"/proc/{pid}/stat") as f:  # "pid (comm) state ppid ...": comm may hold spaces
                pid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            return False
        if pid == me:
            return True
    return False


def _bad_then_answer(messages, rng) -> Completion | str:
    if not any(m["role"] == "tool" for m in messages):
        return Completion(
            text="",
            tool_calls=[
                ToolCall("c0", "view_sections", '{"page_id": "nope"}'),
                ToolCall("c1", "read_section", '{"section_id": 3}'),
            ],
        )
    return "<answer>unknown</answer>"


async def test_mcp_variant_gives_the_same_scores_and_conversations(cache: str) -> None:
    before = _servers()
    results = {}
    for mcp in (False, True):
        env = load_environment(size="small", cache_dir=cache, eval_tasks=12, mcp=mcp)
        try:
            if mcp:
                assert isinstance(env, WikiSearchMCPEnv)
                await env.start()
                schemas = {s["function"]["name"]: s["function"]["parameters"] for s in env.tool_schemas(None)}
                assert schemas["search_pages"]["properties"]["query"]["type"] == "string"
                assert set(schemas) == {"search_pages", "view_sections", "read_section"}
                assert len(_servers() - before) == 1
            results[mcp] = {
                name: await run_rollouts(env, policy, env.tasks(), rollouts_per_task=2, concurrency=8)
                for name, policy in [
                    ("oracle", env.policies()["oracle"]()),
                    ("no_tools", env.policies()["no_tools"]()),
                    ("bad", Policy(_bad_then_answer)),
                ]
            }
        finally:
            await env.aclose()
    assert _servers() == before  # aclose stopped the server
    for name in ("oracle", "no_tools", "bad"):
        direct, served = results[False][name], results[True][name]
        assert [r.error for r in served] == [None] * 24
        assert [r.reward for r in direct] == [r.reward for r in served]
        assert [r.rewards for r in direct] == [r.rewards for r in served]
        assert [r.completion for r in direct] == [r.completion for r in served]  # same tool replies, errors too
    assert statistics.fmean(r.reward for r in results[True]["oracle"]) == 1.0
    assert statistics.fmean(r.reward for r in results[True]["no_tools"]) < 0.2
    errors = [m["content"] for m in results[True]["bad"][0].completion if m["role"] == "tool"]
    assert errors[0].startswith("Error: no page with id 'nope'") and "must be string" in errors[1]


def test_cli_eval_through_mcp_offline_and_the_server_is_stopped(cache: str, tmp_path, capsys) -> None:
    before = _servers()
    out = tmp_path / "run"
    args = json.dumps({"size": "small", "cache_dir": cache, "mcp": True})
    assert (
        main(["eval", "wiki_search", "-m", "policy:oracle", "-a", args, "-n", "8", "-r", "2", "-q", "-o", str(out)])
        == 0
    )
    rows = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert len(rows) == 16 and all(row["reward"] == 1.0 and row["error"] is None for row in rows)
    assert _servers() == before
