"""rlm: questions over a long context through a sandboxed REPL and budgeted llm_query sub-calls."""

from __future__ import annotations

import os
import random
import time
from typing import Any

import pytest
from rlm import RLMEnv, final_answer, load_environment
from rlm.corpus import build_context, page_text

from rlvr import Policy, check_env
from rlvr.engine import run_rollouts
from rlvr.errors import UsageError
from rlvr.sandbox import SandboxSession
from rlvr.types import Completion, Messages, Usage

SMALL = {"size": "small", "num_tasks": 4, "eval_tasks": 6}


def scripted(*turns: str) -> Policy:
    """A player that says `turns` in order, one a model turn (the sub-queries it gets: 'sub')."""

    def play(messages: Messages, rng: random.Random) -> str:
        if len(messages) == 1:  # a sub-call: one user message
            return "sub"
        return turns[sum(m["role"] == "assistant" for m in messages)]

    return Policy(play, name="scripted")


def cell(code: str) -> str:
    return f"```python\n{code}\n```"


def outputs(rollout: Any) -> list[str]:
    return [str(m["content"]) for t in rollout.turns for m in t.env_messages]


def test_the_context_is_the_whole_encyclopedia_and_pages_are_found_in_it() -> None:
    context = build_context(0, "small")
    assert len(context) == 131_482 and context.count("\n# ") + 1 == 295
    assert build_context(0, "full").count("\n# ") + 1 == 2992
    env = load_environment(**SMALL)
    for task in env.tasks():
        assert page_text(context, task.info["chain"][0]) is not None  # every question's first page is there
    assert len(env.initial_prompt(env.tasks()[0])[1]["content"]) < 200
    assert context in load_environment(**SMALL, mode="long_prompt").initial_prompt(env.tasks()[0])[1]["content"]


@pytest.mark.parametrize("mode", ["rlm", "long_prompt"])
async def test_the_oracle_answers_every_question_in_both_modes(mode: str) -> None:
    env = load_environment(**SMALL, mode=mode)
    rollouts = await run_rollouts(env, env.policies()["oracle"](), env.tasks(), concurrency=3)
    assert [r.reward for r in rollouts] == [1.0] * 6 and {r.stop_reason for r in rollouts} == {"answered"}
    assert {r.info["hops"] for r in rollouts} == {1, 2, 3}
    for r in rollouts:  # one sub-call a page read, each kept in the rollout with its reply
        calls = r.info.get("sub_calls", [])
        assert len(calls) == (r.info["hops"] if mode == "rlm" else 0)
        assert all(c["depth"] == 1 and c["prompt"].startswith("Reply with only the") and c["reply"] for c in calls)
    guess = await run_rollouts(env, env.policies()["guess"](), env.tasks())
    assert sum(r.reward for r in guess) <= 1


async def test_variables_last_across_turns_and_no_process_outlives_the_rollout(monkeypatch: Any) -> None:
    started: list[SandboxSession] = []
    start = SandboxSession.start.__func__  # type: ignore[attr-defined]

    async def spy(cls: type[SandboxSession], code: str, limits: Any = None, **options: Any) -> SandboxSession:
        session = await start(cls, code, limits, **options)
        started.append(session)
        return session

    monkeypatch.setattr(SandboxSession, "start", classmethod(spy))
    env = load_environment(**SMALL)
    player = scripted(cell("n = len(context)"), cell("print(n * 2)"), "FINAL(done)")
    [r] = await run_rollouts(env, player, env.tasks()[:1])
    assert outputs(r)[1] == f"[cell 1 output]\n{2 * 131_482}\n" and r.stop_reason == "answered"
    assert len(started) == 1 and started[0].proc.returncode is not None
    with pytest.raises(ProcessLookupError):  # bwrap's process group (the REPL inside it) is gone
        os.killpg(started[0].pid, 0)


async def test_sub_calls_are_budgeted_counted_and_their_usage_added() -> None:
    def sub(messages: Messages, rng: random.Random) -> Completion:
        return Completion(
            text=f"read {len(messages[0]['content'])}", usage=Usage(prompt_tokens=10, completion_tokens=5)
        )

    env = load_environment(**SMALL, max_sub_calls=2)
    env.sub_client = Policy(sub, name="sub")
    code = "for i in range(3):\n    try:\n        print(llm_query(context[:100 * (i + 1)]))\n    except RuntimeError as e:\n        print(e)"
    [r] = await run_rollouts(env, scripted(cell(code), "FINAL(x)"), env.tasks()[:1])
    assert outputs(r)[0].splitlines()[1:] == [
        "read 100",
        "read 200",
        "llm_query refused: all 2 calls of this episode are used",
    ]
    assert [(c["prompt_chars"], c["reply"]) for c in r.info["sub_calls"]] == [(100, "read 100"), (200, "read 200")]
    assert r.usage == Usage(prompt_tokens=20, completion_tokens=10)  # the player's own turns report none
    assert r.rewards["sub_calls"] == 2 and r.rewards["sub_tokens"] == 30

    env = load_environment(**SMALL, max_sub_tokens=15)  # the call that crosses the budget is the last
    env.sub_client = Policy(sub, name="sub")
    [r] = await run_rollouts(env, scripted(cell(code), "FINAL(x)"), env.tasks()[:1])
    assert outputs(r)[0].splitlines()[3] == "llm_query refused: 15 of 15 sub-call tokens are used"


async def test_above_the_last_level_a_sub_call_is_an_rlm_episode_over_its_prompt() -> None:
    """max_depth 3: the top cell asks level 1, an episode whose REPL holds the prompt; its cell asks
    level 2, another episode; its cell asks level 3, a plain call. Each answer climbs back up."""

    def sub(messages: Messages, rng: random.Random) -> Completion:
        if messages[0]["role"] == "user":  # the last level: one plain user message
            return Completion(text=f"plain:{messages[0]['content']}", usage=Usage(prompt_tokens=3, completion_tokens=1))
        said = [m["content"] for m in messages if m["role"] == "user"]
        if len(said) == 1:  # a nested episode's first turn: look into `context`, ask one level down
            text = cell("print(llm_query(context[:6] + '|' + str(len(context))))")
        else:  # the cell's output came back: answer with it
            text = "FINAL(" + said[-1].splitlines()[1] + ")"
        return Completion(text=text, usage=Usage(prompt_tokens=2, completion_tokens=2))

    env = load_environment(**SMALL, max_depth=3, max_turns=3)
    env.sub_client = Policy(sub, name="sub")
    [r] = await run_rollouts(env, scripted(cell("print(llm_query('abcdefghij'))"), "FINAL(x)"), env.tasks()[:1])
    assert outputs(r)[0] == "[cell 1 output]\nplain:abcdef|9\n"  # level 2 cut level 1's context, level 3 answered
    calls = r.info["sub_calls"]
    assert [c["depth"] for c in calls] == [3, 2, 1]  # each call is recorded once it has returned
    assert [c["reply"] for c in calls] == ["plain:abcdef|9"] * 3
    assert "transcript" in calls[1] and "transcript" in calls[2] and "transcript" not in calls[0]
    assert calls[2]["transcript"][-1] == {"role": "assistant", "content": "FINAL(plain:abcdef|9)"}
    assert r.usage == Usage(prompt_tokens=3 + 4 * 2, completion_tokens=1 + 4 * 2)  # 4 nested turns, 1 plain call
    assert r.rewards["sub_calls"] == 3

    env = load_environment(**SMALL, max_depth=2, max_turns=2)  # an episode that never answers is refused
    env.sub_client = Policy(lambda messages, rng: "thinking", name="sub")
    [r] = await run_rollouts(env, scripted(cell("print(llm_query('q'))"), "FINAL(x)"), env.tasks()[:1])
    assert "gave no FINAL(answer) in 2 turns" in outputs(r)[0]


async def test_by_default_the_sub_model_is_the_client_playing_the_rollout() -> None:
    env = load_environment(**SMALL)
    [r] = await run_rollouts(env, scripted(cell("print(llm_query('hi'))"), "FINAL(x)"), env.tasks()[:1])
    assert outputs(r)[0] == "[cell 1 output]\nsub\n" and r.info["sub_calls"][0]["prompt"] == "hi"


@pytest.mark.parametrize(
    ("code", "expected"),
    [
        ("open('/etc/passwd').read()", "PermissionError: sandbox: reading '/etc/passwd' is not allowed"),
        ("import socket; socket.create_connection(('127.0.0.1', 80))", "network access is disabled"),
        ("import os; os.listdir('/')", "listing '/' is not allowed"),
    ],
)
async def test_the_repl_sees_neither_host_files_nor_the_network(code: str, expected: str) -> None:
    env = load_environment(**SMALL)
    [r] = await run_rollouts(env, scripted(cell(code), "FINAL(x)"), env.tasks()[:1])
    assert expected in outputs(r)[0] and r.error is None


async def test_a_hanging_cell_is_killed_and_the_next_cell_gets_a_new_repl() -> None:
    env = load_environment(**SMALL, cell_timeout_s=1.0)
    player = scripted(
        cell("x = 1"), cell("while True:\n    pass"), cell("print(len(context), 'x' in globals())"), "FINAL(x)"
    )
    [r] = await run_rollouts(env, player, env.tasks()[:1])
    said = outputs(r)
    assert "time limit exceeded: the cell ran for more than 1 s" in said[1] and "restarted" in said[1]
    assert said[2] == "[cell 1 output]\n131482 False\n"
    assert r.rewards["repl_errors"] == 1 and r.rewards["repl_cells"] == 3


async def test_a_turn_without_code_or_answer_is_told_so_and_final_ends_it() -> None:
    env = load_environment(**SMALL, max_turns=2)
    [r] = await run_rollouts(env, scripted("hmm", "<final>Holm</final>"), env.tasks()[:1])
    assert "No ```python code block" in outputs(r)[0] and r.stop_reason == "answered"
    assert final_answer("x = 1\nFINAL(`Holm`)") == "Holm" and final_answer("FINAL") is None
    started = time.perf_counter()  # degenerate replies: linear time (a regex took 40 s on the first)
    assert final_answer("FINAL(" * 50_000) is None and final_answer("<final>" * 50_000) is None
    assert time.perf_counter() - started < 2.0


def test_check_env_and_clear_refusals() -> None:
    check_env(load_environment(**SMALL))
    with pytest.raises(UsageError, match="max_depth must be an integer >= 1"):
        load_environment(**SMALL, max_depth=0)
    with pytest.raises(UsageError, match="mode one of"):
        load_environment(**SMALL, mode="chunked")
    assert isinstance(load_environment(**SMALL, sub_model="policy:oracle"), RLMEnv)


@pytest.mark.parametrize(
    ("written", "expected"),
    [
        # a `done` message past the server's own cut: 1 MB of output (once kept whole in results.jsonl)
        (
            'ch.write(json.dumps({"op": "done", "stdout": "x" * 1_000_000}) + "\\n")',
            "more characters of output dropped",
        ),
        # 20 MB on one line: past the line limit (a prompt quoting all of `context`), the REPL ends (once accepted)
        ('ch.write(json.dumps({"op": "done", "stdout": "x" * 20_000_000}) + "\\n")', "the REPL process ended"),
        ('ch.buffer.write(b"\\xff\\xfe\\n")', "the REPL process ended"),  # not UTF-8: a host exception once
        ('ch.write("[" * 100_000 + "\\n")', "the REPL process ended"),  # past the JSON parser's depth
        ('ch.write(json.dumps({"op": "done", "stdout": "\\ud800", "error": {"a": 1}}) + "\\n")', "{'a': 1}"),
    ],
    ids=["output", "long-line", "not-utf8", "deep", "types"],
)
async def test_what_a_cell_writes_to_the_channel_itself_is_checked_on_the_host(written: str, expected: str) -> None:
    """A cell can reach the server's channel (`llm_query.__globals__["_channel"]`) and write any
    message; the host cuts it and turns malformed data into the cell's error, never its own."""
    env = load_environment(**SMALL)
    code = f'import json\nch = llm_query.__globals__["_channel"]\n{written}\nch.flush()'
    [r] = await run_rollouts(env, scripted(cell(code), "FINAL(x)"), env.tasks()[:1])
    said = outputs(r)[0]
    assert r.error is None and expected in said, (r.error, said[:500])
    assert len(said) < 10_000 and said.encode("utf-8")  # cut, and valid UTF-8 (a lone surrogate replaced)
