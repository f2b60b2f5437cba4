"""wiki_search: a consistent seeded world, a cached FTS5 index, tools, rewards and players."""

from __future__ import annotations

import json
import sqlite3
import statistics

import pytest
from wiki_search import WikiSearchEnv, articles, load_environment
from wiki_search.players import oracle_policy
from wiki_search.questions import (
    TEMPLATES,
    fact_pattern,
    make_tasks,
    normalize,
    parse_question,
    resolve,
)
from wiki_search.store import WikiDB, ensure_index, index_path, require_fts5
from wiki_search.tools import read_section, search_pages, view_sections
from wiki_search.world import SIZES, World

from rlvr import Policy, check_env
from rlvr.cli import main
from rlvr.engine import run_rollouts
from rlvr.errors import EnvError, UsageError
from rlvr.types import Completion, ToolCall


@pytest.fixture(scope="session")
def cache(tmp_path_factory: pytest.TempPathFactory) -> str:
    return str(tmp_path_factory.mktemp("wiki-cache"))


@pytest.fixture(scope="session")
def small(cache: str) -> World:
    world = World(0, "small")
    ensure_index(world, cache)
    return world


def _env(cache: str, **kw):
    return load_environment(size=kw.pop("size", "small"), cache_dir=cache, **kw)


async def _play(env, policy, n_rollouts=1, tasks=None):
    try:
        return await run_rollouts(env, policy, tasks or env.tasks(), rollouts_per_task=n_rollouts)
    finally:
        await env.aclose()


# ---- the world ------------------------------------------------------------------------------


def test_world_is_reproducible_and_consistent() -> None:
    a, b = World(3, "small"), World(3, "small")
    assert [(p.id, [s.body for s in p.sections]) for p in articles.pages(a)] == [
        (p.id, [s.body for s in p.sections]) for p in articles.pages(b)
    ]
    assert sorted(World(4, "small").entities) != sorted(a.entities)
    w = World(0, "full")
    assert len(w.entities) == sum(v for k, v in SIZES["full"].items() if k != "cities") + 16 * 12 == 2992
    e = w.entities
    for x in e.values():
        if x.kind == "person":
            assert e[x.links["birth_city"]].year < x.year < x.numbers.get("died", 2025)
            if "mentor" in x.links:
                assert 15 <= x.year - e[x.links["mentor"]].year <= 45
            if "university" in x.links:
                assert e[x.links["university"]].year <= x.year + 18
        elif x.kind in ("university", "company"):
            assert e[x.links["founder"]].year + 24 <= x.year
        elif x.kind == "work":
            creator = e[x.links["creator"]]
            assert creator.year + 18 <= x.year <= creator.numbers.get("died", 2023)
        elif x.kind == "country":
            assert e[x.links["capital"]].links["country"] == x.name


def test_reading_the_articles_gives_the_answer_of_every_template(small: World) -> None:
    """For each template, follow `reads` through the rendered text: same answer as the relations."""
    pages = {p.title: {s.heading: s.body for s in p.sections} for p in articles.pages(small)}
    checked = 0
    for template in TEMPLATES:
        subjects = [x for x in small.entities.values() if resolve(small, template, x) is not None]
        assert subjects, template.name
        for subject in subjects[:25]:
            name = subject.name
            for heading, fact, field in template.reads:
                name = fact_pattern(fact, field).search(pages[name][heading])[field]
            assert name == resolve(small, template, subject)[0], (template.name, subject.name)
            checked += 1
    assert checked > 300


def test_tasks_are_seeded_prefix_stable_and_span_one_to_three_hops(small: World) -> None:
    a = make_tasks(small, "eval", 60, 0, 1, 3)
    assert [t.to_dict() for t in a] == [t.to_dict() for t in make_tasks(small, "eval", 60, 0, 1, 3)]
    assert [t.question for t in make_tasks(small, "eval", 70, 0, 1, 3)[:60]] == [t.question for t in a]
    assert [t.question for t in make_tasks(small, "train", 60, 0, 1, 3)] != [t.question for t in a]
    assert {t.info["hops"] for t in a} == {1, 2, 3}
    assert {t.info["hops"] for t in make_tasks(small, "eval", 30, 0, 2, 2)} == {2}
    for t in a:
        template, subject = parse_question(t.question)
        assert template.name == t.info["template"] and subject == t.info["chain"][0]


def test_normalize() -> None:
    assert normalize("The Ostva River.") == normalize("ostva river") == "ostva river"
    assert normalize("1,840") == "1840" and normalize("Ada  Kerr ") == "ada kerr"


# ---- the index ------------------------------------------------------------------------------


def test_index_is_cached_rebuilt_on_request_and_when_corrupt(tmp_path, monkeypatch) -> None:
    world = World(7, "small")
    first = ensure_index(world, tmp_path)
    assert first.built and first.pages == len(world.entities) and first.path == index_path(7, "small", tmp_path)
    assert not ensure_index(world, tmp_path).built
    assert ensure_index(world, tmp_path, rebuild=True).built
    first.path.write_bytes(b"not a database")
    assert ensure_index(world, tmp_path).built
    assert not list(tmp_path.glob("*.tmp-*"))  # builds write a temporary file, then rename it
    monkeypatch.setenv("RLVR_WIKI_CACHE", str(tmp_path / "env"))
    assert ensure_index(world).path.parent == tmp_path / "env"


def test_missing_fts5_is_a_clear_error(monkeypatch) -> None:
    class NoFts:
        def execute(self, sql):
            raise sqlite3.OperationalError("no such module: fts5")

    monkeypatch.setattr("wiki_search.store.sqlite3.connect", lambda *a, **k: NoFts())
    with pytest.raises(EnvError, match="FTS5"):
        require_fts5()


def test_tools_search_view_read(small: World, cache: str) -> None:
    db = WikiDB(index_path(0, "small", cache))
    try:
        person = next(x for x in sorted(small.entities.values(), key=lambda x: x.name) if x.kind == "person")
        hits = search_pages(person.name, db).splitlines()
        assert hits[0].startswith(f"[{person.name.lower().replace(' ', '_')}] {person.name} — ")
        page_id = hits[0][1 : hits[0].index("]")]
        sections = view_sections(page_id, db)
        assert f"[{page_id}:early_life] Early life" in sections
        text = read_section(f"{page_id}:early_life", db)
        assert text.startswith(f"{person.name} — Early life\n") and str(person.year) in text
        assert "No pages match" in search_pages("zzzqqq", db)
        assert "No pages match" in search_pages('"(*) NEAR AND', db)  # FTS syntax is never passed through
        for call, arg in ((search_pages, " "), (view_sections, "nope"), (read_section, "nope:x")):
            with pytest.raises(Exception, match="empty|no page|no section"):
                call(arg, db)
    finally:
        db.close()


# ---- the environment ------------------------------------------------------------------------


async def test_oracle_scores_one_and_no_tools_scores_low(cache: str) -> None:
    env = _env(cache, size="full", eval_tasks=40)
    oracle = await _play(env, env.policies()["oracle"]())
    assert all(r.error is None and r.stop_reason == "no_tool_call" for r in oracle)
    assert statistics.fmean(r.reward for r in oracle) == 1.0
    for r in oracle:  # it looked everything up: 3 calls per page read, never a failed call
        assert r.rewards["search_pages_calls"] == r.rewards["read_section_calls"] == r.info["hops"]
        assert r.rewards["failed_tool_calls"] == 0 and r.metrics["turns"] == 3 * r.info["hops"] + 1
    summary = env.summarize(oracle)
    assert summary["exact_match 3 hops"] == 1.0 and summary["tool calls per rollout"] > 3
    env = _env(cache, size="full", eval_tasks=40)
    guesses = await _play(env, env.policies()["no_tools"](), n_rollouts=2)
    assert statistics.fmean(r.reward for r in guesses) < 0.1
    assert all(r.rewards["search_pages_calls"] == 0 for r in guesses)


async def test_the_oracle_only_knows_what_the_tools_tell_it(cache: str) -> None:
    """Same questions, but the database of another world: the oracle cannot answer."""
    other = ensure_index(World(1, "small"), cache)
    tasks = make_tasks(World(0, "small"), "eval", 12, 0, 1, 3)
    base = _env(cache)
    await base.aclose()
    env = WikiSearchEnv(tasks, db=WikiDB(other.path), parser=base.parser, rubric=base.rubric, max_turns=24)
    rollouts = await _play(env, env.policies()["oracle"]())
    assert statistics.fmean(r.reward for r in rollouts) == 0.0


def _scripted(calls: list[tuple[str, str]], final: str) -> Policy:
    """A policy making `calls` (name, raw JSON arguments) one per turn, then answering."""

    def fn(messages, rng):
        done = sum(m["role"] == "tool" for m in messages)
        if done < len(calls):
            name, args = calls[done]
            return Completion(text="", tool_calls=[ToolCall(f"c{done}", name, args)], finish_reason="tool_calls")
        return f"<answer>{final}</answer>"

    return Policy(fn, name="scripted")


async def test_bad_tool_calls_become_tool_errors_and_the_episode_goes_on(cache: str) -> None:
    env = _env(cache, eval_tasks=1)
    task = env.tasks()[0]
    bad = [
        ("search_pages", '{"query": '),
        ("no_such_tool", "{}"),
        ("search_pages", '{"query": 5}'),
        ("view_sections", "{}"),
        ("search_pages", '{"query": "x", "db": "mine"}'),
        ("view_sections", '{"page_id": "no_such_page"}'),
        ("read_section", '["a"]'),
        ("search_pages", '""'),
    ]
    [r] = await _play(env, _scripted(bad, task.answer), tasks=[task])
    replies = [t.env_messages[0]["content"] for t in r.turns[:-1]]
    assert all(reply.startswith("Error: ") for reply in replies), replies
    assert "not valid JSON" in replies[0] and "unknown tool 'no_such_tool'" in replies[1]
    assert "argument 'query' must be string, got integer 5" in replies[2]
    assert "missing required argument 'page_id'" in replies[3] and "unknown argument 'db'" in replies[4]
    assert "no page with id 'no_such_page'" in replies[5] and "must be a JSON object" in replies[6]
    assert r.error is None and r.rewards["failed_tool_calls"] == len(bad) and r.reward == 1.0


async def test_hermes_tool_call_text_drives_the_env(cache: str) -> None:
    """The oracle's calls written as a chat template writes them (`<tool_call>` blocks), read back
    by LocalModel's parser, then executed; a malformed block becomes a tool error."""
    from rlvr.clients.tool_calls import parse_tool_calls

    oracle, broken_once = oracle_policy, []

    def hermes(messages, rng):  # the oracle retries a call that got an error
        completion = oracle([m for m in messages if not str(m.get("content")).startswith("Error:")], rng)
        if not completion.tool_calls:
            return completion
        call = completion.tool_calls[0]
        block = json.dumps({"name": call.name, "arguments": json.loads(call.arguments)})
        if not broken_once:
            broken_once.append(1)
            block = block[:-2]  # cut the JSON: the env must say so
        text, calls = parse_tool_calls(f"Let me look.<tool_call>{block}</tool_call>", "call")
        return Completion(text=text, tool_calls=calls, finish_reason="tool_calls")

    env = _env(cache, eval_tasks=1)
    rollouts = await _play(env, Policy(hermes), tasks=env.tasks())
    [r] = rollouts
    replies = [m["content"] for m in r.completion if m["role"] == "tool"]
    assert replies[0].startswith("Error: arguments are not valid JSON") and r.rewards["failed_tool_calls"] == 1
    assert r.turns[1].completion.text == "Let me look." and r.reward == 1.0


def test_check_env_and_bad_arguments(cache: str) -> None:
    check_env(_env(cache, eval_tasks=3))
    for kwargs in ({"size": "huge"}, {"min_hops": 2, "max_hops": 1}, {"max_hops": 4}, {"eval_tasks": 0}):
        with pytest.raises(UsageError):
            _env(cache, **kwargs)


async def test_judge_reward_option(cache: str) -> None:
    env = _env(cache, eval_tasks=8, judge_model="policy:reference", judge_weight=0.5)
    rollouts = await _play(env, env.policies()["oracle"]())
    assert all(r.rewards["judge_reward"] == 1.0 and r.reward == 1.5 for r in rollouts)
    env = _env(cache, eval_tasks=8, judge_model="policy:reference")
    rollouts = await _play(env, env.policies()["no_tools"]())
    assert all(r.rewards["judge_reward"] == r.rewards["exact_match"] for r in rollouts)


def test_cli_eval_oracle_offline(cache: str, tmp_path, capsys) -> None:
    args = json.dumps({"size": "small", "cache_dir": cache})
    out = tmp_path / "run"
    assert (
        main(["eval", "wiki_search", "-m", "policy:oracle", "-a", args, "-n", "10", "-r", "1", "-q", "-o", str(out)])
        == 0
    )
    assert "saved 10 rollouts" in capsys.readouterr().out
    rows = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert len(rows) == 10 and all(row["reward"] == 1.0 for row in rows)
