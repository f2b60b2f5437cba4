"""The engine and `rlvr eval` against a real HTTP server that injects faults.

Every rollout must be accounted for: retried to success, or recorded as an error (never lost),
and the summary must count the errors. Fault fates are seeded per request body, so each run of
these tests sees the same faults whatever the order in which concurrent requests arrive.
"""

from __future__ import annotations

import dataclasses
import json
import re
import sys
import types
from importlib.metadata import EntryPoint

import pytest
from openai_server import Faults, Reply, render_prompt

import rlvr.clients.openai
import rlvr.registry
from rlvr.cli import main
from rlvr.clients.openai import OpenAIClient
from rlvr.engine import run_rollouts
from rlvr.envs.multiturn import SingleTurnEnv
from rlvr.envs.tools import ToolEnv
from rlvr.rubric import Rubric
from rlvr.summary import summarize
from rlvr.types import SamplingArgs

FAULTS = Faults(
    rate_limit=0.1,
    server_error=0.1,
    hang=0.05,
    malformed=0.05,
    seed=7,  # 30% faults
    max_per_request=3,
)  # so that 5 retries always get through
QUESTION = re.compile(r"What is (\d+) \+ (\d+)\?")
TIMEOUT_S = 3.0
"""The client's timeout in the fault tests. A served hang says nothing until the client hangs up,
so any timeout finds it; but a real reply slower than the timeout (the server is a thread of this
process, and a busy machine delays it) is retried, then served twice, and the accounting below
is off by one: at 0.5 s that happened with 4 busy processes on 2 cores."""


def arithmetic_tasks(n: int, poison_every: int = 0) -> list[dict]:
    """`What is a + b?`; with `poison_every`, every such task's requests always fail (500)."""
    tasks = []
    for i in range(n):
        a, b = 3 * i + 1, 2 * i + 5
        poison = poison_every and i % poison_every == poison_every - 1
        tasks.append(
            {
                "id": f"t{i}",
                "question": f"What is {a} + {b}?" + (" (poison)" if poison else ""),
                "answer": str(a + b),
                "seed": i,
            }
        )
    return tasks


def is_poison(messages) -> bool:
    return any("(poison)" in str(m.get("content")) for m in messages)


def solver(messages, tools):
    """Answers right unless a % 4 == 0 (a wrong answer is a reward of 0, not an error)."""
    a, b = map(int, QUESTION.search(messages[-1]["content"]).groups())
    return str(a + b + (a % 4 == 0))


def tool_solver(messages, tools):
    """Calls `add`, then answers with what the tool said."""
    if messages[-1]["role"] == "tool":
        return f"The answer is {messages[-1]['content']}"
    a, b = map(int, QUESTION.search(messages[-1]["content"]).groups())
    return Reply(tool_calls=[("add", {"a": a, "b": b})])


def correct(completion, answer) -> float:
    return float(completion[-1]["content"].split()[-1] == answer)


def add(a: int, b: int) -> int:
    """Add two integers.

    Args:
        a: first number
        b: second number
    """
    return a + b


def arithmetic_env(n: int = 12, poison_every: int = 0) -> SingleTurnEnv:
    return SingleTurnEnv(
        arithmetic_tasks(n, poison_every),
        rubric=Rubric([correct]),
        sampling=SamplingArgs(temperature=0.0, max_tokens=16, logprobs=True),
    )


def tool_env(n: int = 8, poison_every: int = 0) -> ToolEnv:
    return ToolEnv(arithmetic_tasks(n, poison_every), tools=[add], rubric=Rubric([correct]), max_turns=4)


def solver_reward(task) -> float:
    return float(int(QUESTION.search(task.question).group(1)) % 4 != 0)


def check_accounting(
    rollouts,
    env,
    rollouts_per_task,
    server,
    client,
    poisoned: set[str],
    expected_reward=solver_reward,
) -> dict:
    """Every (task, index) once; poisoned tasks are ClientError records, all others scored."""
    keys = [r.key for r in rollouts]
    assert sorted(keys) == sorted((t.id, i) for t in env.dataset for i in range(rollouts_per_task))
    tasks = {t.id: t for t in env.dataset}
    for r in rollouts:
        if r.task_id in poisoned:
            assert r.error is not None and r.error.startswith("ClientError") and r.truncated, r.error
            assert r.stop_reason == "error" and r.reward == 0.0
        else:
            assert r.error is None, r.error
            assert r.reward == expected_reward(tasks[r.task_id])
    summary = summarize(rollouts, rollouts_per_task)
    n_errors = len(poisoned) * rollouts_per_task
    assert summary["errors"] == n_errors
    assert summary["errors_by_kind"] == ({"ClientError": n_errors} if n_errors else {})
    # what the server served, request by request, the client sent; an attempt the client gave up
    # on before the server read it (a busy machine can hold this process's server thread past
    # timeout_s: 123 served of 124 sent, 2 cores under 3 busy jobs) was sent, not served, and retried
    served = sum(server.counts[k] for k in ("ok", "429", "500", "hang", "malformed"))
    assert server.counts["requests"] == served <= client.requests
    assert client.requests - served <= client.retries
    assert server.counts["ok"] == sum(len(r.turns) for r in rollouts)
    # each model call is one first request plus its retries; a poisoned rollout makes one call
    assert client.retries == client.requests - server.counts["ok"] - n_errors
    return summary


async def test_single_turn_eval_without_faults_keeps_token_ids(openai_server) -> None:
    openai_server.reset(solver)
    env = arithmetic_env()
    async with OpenAIClient("scripted", base_url=openai_server.base_url, backoff_s=0.001) as client:
        rollouts = await run_rollouts(env, client, env.dataset, rollouts_per_task=2, concurrency=8)
    check_accounting(rollouts, env, 2, openai_server, client, poisoned=set())
    assert client.retries == 0
    for r in rollouts:
        completion = r.turns[0].completion
        assert completion.token_ids == [ord(c) for c in completion.text]
        assert completion.logprobs is not None and len(completion.logprobs) == len(completion.token_ids)
        assert completion.prompt_token_ids and r.usage.completion_tokens == len(completion.text)
    seeds = {body["seed"] for body in openai_server.bodies}
    assert len(seeds) == len(rollouts)  # each rollout has its own seed


@pytest.mark.parametrize("seed", [7, 8])
async def test_single_turn_eval_with_faults(openai_server, seed) -> None:
    faults = dataclasses.replace(FAULTS, seed=seed)
    openai_server.reset(solver, faults=faults, permanent=is_poison)
    # one of each kind first: which later requests draw a fault depends on timing (a reply slower
    # than timeout_s is retried), and under load one seed once drew no malformed reply at all
    openai_server.force(["429", "500", "hang", "malformed"])
    env = arithmetic_env(n=16, poison_every=5)
    poisoned = {t.id for t in env.dataset if "(poison)" in (t.question or "")}
    client = OpenAIClient(
        "scripted", base_url=openai_server.base_url, timeout_s=TIMEOUT_S, max_retries=5, backoff_s=0.005
    )
    async with client:
        rollouts = await run_rollouts(env, client, env.dataset, rollouts_per_task=3, concurrency=16)
    check_accounting(rollouts, env, 3, openai_server, client, poisoned)
    faults = {k: openai_server.counts[k] for k in ("429", "500", "hang", "malformed")}
    assert all(faults.values()), faults  # every kind of fault was served, and survived
    assert client.retries > 0


async def test_tool_env_with_faults(openai_server) -> None:
    openai_server.reset(tool_solver, faults=FAULTS, permanent=is_poison)
    env = tool_env(n=10, poison_every=4)
    poisoned = {t.id for t in env.dataset if "(poison)" in (t.question or "")}
    client = OpenAIClient("scripted", base_url=openai_server.base_url, timeout_s=TIMEOUT_S, backoff_s=0.005)
    async with client:
        rollouts = await run_rollouts(env, client, env.dataset, rollouts_per_task=2, concurrency=20)
    check_accounting(rollouts, env, 2, openai_server, client, poisoned, expected_reward=lambda task: 1.0)
    for r in rollouts:
        if r.error is None:
            assert len(r.turns) == 2 and r.stop_reason == "no_tool_call" and not r.truncated
            assert r.turns[0].completion.tool_calls[0].name == "add"
            assert r.turns[0].env_messages[0]["role"] == "tool"


async def test_prompt_too_long_ends_the_rollout_as_truncated(openai_server) -> None:
    env = tool_env(n=3)
    longest_first_prompt = max(len(render_prompt(env.initial_prompt(t))) for t in env.dataset)
    openai_server.reset(tool_solver, max_context=longest_first_prompt)  # the second turn won't fit
    async with OpenAIClient("scripted", base_url=openai_server.base_url, backoff_s=0.001) as client:
        rollouts = await run_rollouts(env, client, env.dataset, concurrency=3)
    for r in rollouts:
        assert (r.stop_reason, r.truncated, r.error, len(r.turns)) == (
            "prompt_too_long",
            True,
            None,
            1,
        )
    assert openai_server.counts["context_length"] == 3 and client.retries == 0


# ---- the CLI ------------------------------------------------------------------------------------


@pytest.fixture
def http_arith_env(monkeypatch):
    """Register `http_arith` (the arithmetic env, every 5th task poisoned) as an installed env."""
    module = types.ModuleType("rlvr_test_http_arith")
    module.load_environment = lambda n: arithmetic_env(n=n, poison_every=5)
    monkeypatch.setitem(sys.modules, module.__name__, module)
    found = rlvr.registry._entry_points()
    found["http_arith"] = EntryPoint("http_arith", f"{module.__name__}:load_environment", rlvr.registry.GROUP)
    monkeypatch.setattr(rlvr.registry, "_entry_points", lambda: found)

    created: list[OpenAIClient] = []

    class QuickRetries(OpenAIClient):  # the CLI's client, with millisecond backoffs
        def __init__(self, *args, **kwargs) -> None:
            super().__init__(*args, backoff_s=0.005, **kwargs)
            created.append(self)

    monkeypatch.setattr(rlvr.clients.openai, "OpenAIClient", QuickRetries)
    return created


def eval_cli(server, out, max_retries: int, key_var: str = "RLVR_TEST_NO_SUCH_KEY", timeout: float = TIMEOUT_S) -> int:
    return main(
        [
            "eval",
            "http_arith",
            "-a",
            '{"n": 15}',
            "-n",
            "-1",
            "-r",
            "3",
            "-c",
            "16",
            "-m",
            "scripted",
            "-b",
            server.base_url,
            "-k",
            key_var,
            "--timeout",
            str(timeout),
            "--max-retries",
            str(max_retries),
            "-o",
            str(out),
            "-q",
        ]
    )


def test_cli_eval_with_faults_accounts_for_every_rollout(openai_server, http_arith_env, tmp_path, capsys) -> None:
    openai_server.reset(solver, faults=FAULTS, permanent=is_poison)
    out = tmp_path / "run"
    code = eval_cli(openai_server, out, max_retries=5)
    printed = capsys.readouterr().out
    assert code == 0, printed
    lines = (out / "results.jsonl").read_text().splitlines()
    assert len(lines) == 45
    records = [json.loads(line) for line in lines]
    assert len({(r["task_id"], r["rollout_index"]) for r in records}) == 45
    errors = [r for r in records if r["error"]]
    assert len(errors) == 9 and {r["task_id"] for r in errors} == {"t4", "t9", "t14"}
    assert all(r["error"].startswith("ClientError: model scripted at") for r in errors)
    metadata = json.loads((out / "metadata.json").read_text())
    assert (metadata["status"], metadata["rollouts"], metadata["errors"]) == ("complete", 45, 9)
    assert "errors: 9 (ClientError 9)" in printed
    [client] = http_arith_env
    assert openai_server.counts["requests"] == client.requests and client.retries > 0
    assert openai_server.counts["ok"] == 36


def test_cli_eval_records_random_failures_as_errors(openai_server, http_arith_env, tmp_path, capsys) -> None:
    """One retry only and no cap on faults: some calls fail for good; all are still recorded."""
    openai_server.reset(solver, faults=Faults(rate_limit=0.15, server_error=0.15, seed=1))
    code = eval_cli(openai_server, tmp_path / "run", max_retries=1)
    printed = capsys.readouterr().out
    assert code == 0, printed
    records = [json.loads(line) for line in (tmp_path / "run" / "results.jsonl").read_text().splitlines()]
    assert len({(r["task_id"], r["rollout_index"]) for r in records}) == len(records) == 45
    errors = [r for r in records if r["error"]]
    assert 0 < len(errors) < 45 and all("failed 2 times; last: " in r["error"] for r in errors)
    assert f"errors: {len(errors)} (ClientError {len(errors)})" in printed
    [client] = http_arith_env
    assert client.requests == openai_server.counts["requests"] == 45 + client.retries
    assert openai_server.counts["ok"] == 45 - len(errors)


def test_cli_eval_exits_non_zero_when_every_rollout_failed(openai_server, http_arith_env, tmp_path, capsys) -> None:
    """A server that answers 500 to everything: results are kept, the exit code says failure."""
    openai_server.reset(solver, faults=Faults(server_error=1.0, seed=1))
    code = eval_cli(openai_server, tmp_path / "run", max_retries=0)
    err = capsys.readouterr().err
    assert code == 1 and "all 45 rollouts failed; the first: ClientError" in err
    assert len((tmp_path / "run" / "results.jsonl").read_text().splitlines()) == 45


def test_cli_eval_saves_replies_holding_lone_surrogates(openai_server, http_arith_env, tmp_path, capsys) -> None:
    """`"\\ud800"` is valid JSON a server may send, and no UTF-8: every such reply is saved and read back."""
    openai_server.reset(lambda messages, tools: f"\ud800 x\udfff {solver(messages, tools)}")
    code = eval_cli(openai_server, tmp_path / "run", max_retries=0)
    printed = capsys.readouterr().out
    assert code == 0, printed
    from rlvr.results import RunDir

    run = RunDir.open(tmp_path / "run")
    rollouts = run.read()
    assert len(rollouts) == 45 and run.metadata["status"] == "complete"
    assert all(r.turns[0].completion.text.startswith("\ud800 x\udfff ") for r in rollouts)
    for r in rollouts:
        assert r.error is None and r.reward == solver_reward(types.SimpleNamespace(question=r.prompt[-1]["content"]))


# ---- the API key ------------------------------------------------------------------------------

SECRET = "sk-rlvr-test-0123456789abcdef"


def test_a_refused_key_stops_the_run_and_is_written_nowhere(
    openai_server, http_arith_env, tmp_path, capsys, monkeypatch
) -> None:
    """A 401 to every chat request (while /models answers) cost one request per rollout, 45 error
    records; and the server's echo of the key went into stderr and results.jsonl. Now the run
    stops after 3 refusals in a row: only the requests already in flight were sent."""
    monkeypatch.setenv("RLVR_TEST_KEY", SECRET)
    openai_server.reset(solver, refuse_key=True, echo_key=SECRET)
    out = tmp_path / "run"
    assert eval_cli(openai_server, out, max_retries=5, key_var="RLVR_TEST_KEY") == 1
    captured = capsys.readouterr()
    assert captured.err.count("\n") == 1, captured.err
    assert "refused the API key 3 times in a row (HTTP 401: Incorrect API key provided: [API key redacted].)" in (
        captured.err
    )
    assert "check the key in $RLVR_TEST_KEY" in captured.err and SECRET not in captured.out + captured.err
    assert 3 <= openai_server.counts["401"] == openai_server.counts["requests"] <= 16 + 2  # in flight + 2 retries
    assert json.loads((out / "metadata.json").read_text())["status"] == "interrupted"
    assert not any(SECRET in f.read_text() for f in out.iterdir())


def test_a_key_echoed_in_one_error_is_redacted_in_results_and_report(
    openai_server, http_arith_env, tmp_path, capsys, monkeypatch
) -> None:
    monkeypatch.setenv("RLVR_TEST_KEY", SECRET)
    openai_server.reset(solver, echo_key=SECRET)
    openai_server.force(["401"])  # one refusal, then answers: the run goes on
    out = tmp_path / "run"
    # no hang is served here, so a long timeout: with no retries, one slow reply on a busy machine
    # would be a second failed rollout (a fresh-clone suite once had one at 0.5 s)
    assert eval_cli(openai_server, out, max_retries=0, key_var="RLVR_TEST_KEY", timeout=30) == 0
    records = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    [refused] = [r for r in records if r["error"]]
    assert "HTTP 401: Incorrect API key provided: [API key redacted]." in refused["error"] and len(records) == 45
    assert main(["report", str(out)]) == 0
    files = [f for f in out.iterdir() if f.is_file()]
    assert "report.html" in {f.name for f in files} and not any(SECRET in f.read_text() for f in files)
    assert SECRET not in "".join(capsys.readouterr())
