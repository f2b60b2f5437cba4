"""The verifiers bridge (rlvr.envs.verifiers) against verifiers from PyPI: environments written
with verifiers' own classes (tests/verifiers_envs.py: single-turn, multi-turn, tools) played by
one scripted model behind a real OpenAI-compatible server, once by verifiers' own `evaluate`
and once by rlvr's engine; every task's reward and every reward function's value must agree."""

from __future__ import annotations

import json
import signal
import sys
from importlib.metadata import EntryPoint

import pytest

vf = pytest.importorskip("verifiers")
pytest.importorskip("verifiers.legacy.envs.multiturn_env")  # the classic API's imports resolve

import openai  # noqa: E402
import verifiers_envs  # noqa: E402
from verifiers_envs import scripted_model  # noqa: E402

import rlvr.registry  # noqa: E402
from rlvr.check import check_env  # noqa: E402
from rlvr.cli import main  # noqa: E402
from rlvr.clients.openai import OpenAIClient  # noqa: E402
from rlvr.engine import run_rollouts  # noqa: E402
from rlvr.envs.verifiers import VerifiersEnv, load_environment, wrap  # noqa: E402
from rlvr.envs.verifiers.convert import rlvr_name  # noqa: E402
from rlvr.envs.verifiers.env import keeping_signal_handlers  # noqa: E402
from rlvr.errors import UsageError  # noqa: E402

SAMPLING = {"max_tokens": 128, "temperature": 1.0}


@pytest.fixture(autouse=True)
def signal_handlers_kept():
    """Each verifiers Environment built here installs SIGINT and SIGTERM handlers of its own:
    give the test process its own back."""
    with keeping_signal_handlers():
        yield


async def verifiers_scores(vf_env, base_url: str, rollouts: int) -> dict[int, list[tuple[float, dict[str, float]]]]:
    """verifiers' own evaluation of `vf_env` against the scripted server: by example id, each
    rollout's reward and metrics."""
    async with openai.AsyncOpenAI(base_url=base_url, api_key="-") as oai:
        results = await vf_env.evaluate(
            client=vf.OpenAIChatCompletionsClient(oai),
            model="scripted",
            sampling_args=SAMPLING,
            rollouts_per_example=rollouts,
            max_concurrent=4,
            on_progress=lambda *a, **k: None,
        )
    scores: dict[int, list[tuple[float, dict[str, float]]]] = {}
    names = {n: rlvr_name(n, i) for i, n in enumerate(vf_env.rubric._get_reward_func_names())}
    for o in results["outputs"]:
        scores.setdefault(o["example_id"], []).append((o["reward"], {names[k]: v for k, v in o["metrics"].items()}))
    return scores


async def rlvr_rollouts(env: VerifiersEnv, base_url: str, rollouts: int = 1):
    async with OpenAIClient("scripted", base_url=base_url) as client:
        return await run_rollouts(env, client, env.tasks("eval"), rollouts_per_task=rollouts, concurrency=4)


@pytest.mark.parametrize(
    ("kind", "rollouts"), [("single", 1), ("guess", 1), ("tools", 1), ("stateful", 1), ("group", 2)]
)
async def test_rewards_equal_verifiers_own_evaluation(openai_server, kind, rollouts):
    openai_server.reset(scripted_model)
    theirs = await verifiers_scores(verifiers_envs.load_environment(kind), openai_server.base_url, rollouts)
    env = wrap(verifiers_envs.load_environment(kind))
    ours = await rlvr_rollouts(env, openai_server.base_url, rollouts)
    assert len(ours) == sum(map(len, theirs.values())) >= 4
    for r in ours:
        assert r.error is None, r.error
        reward, metrics = theirs[int(r.task_id.split("-")[1])][r.rollout_index]
        assert r.reward == pytest.approx(reward), r.task_id
        assert r.rewards == pytest.approx(metrics), r.task_id
    assert len({r.reward for r in ours}) > 1  # the script is right on some tasks only


async def test_verifiers_own_reasoning_gym_env_scores_as_in_verifiers(openai_server):
    """verifiers' own `ReasoningGymEnv` (shipped in its wheel), answered right on every other task."""
    pytest.importorskip("reasoning_gym")

    def make():
        return vf.ReasoningGymEnv("leg_counting", num_train_examples=4, num_eval_examples=8, seed=3)

    answers = {x["question"]: x["answer"] for x in make().rg_dataset}

    def oracle_on_odd_lengths(messages, tools):
        question = str(messages[-1]["content"])
        return f"<answer>{answers[question] if len(question) % 2 else 0}</answer>"

    openai_server.reset(oracle_on_odd_lengths)
    theirs = await verifiers_scores(make(), openai_server.base_url, 1)
    env = wrap(make())
    ours = await rlvr_rollouts(env, openai_server.base_url)
    assert [r.task_id for r in ours] == [f"eval-{i}" for i in range(8)]
    assert [(r.reward, r.rewards) for r in ours] == [theirs[i][0] for i in range(8)]
    assert 0 < sum(r.reward for r in ours) < 8


def test_group_reward_functions_stay_group_functions():
    env = wrap(verifiers_envs.load_environment("group"))
    assert env.rubric.has_group_functions
    assert dict(zip(env.rubric.names, env.rubric.weights)) == {
        "exact_answer": 1.0,
        "brevity": 0.3,
        "format_reward_func": 0.2,
        "answer_digits": 0.0,
        "output_tokens": 0.0,
        "share_right": 0.5,
        "num_turns": 0.0,
    }


@pytest.mark.parametrize("kind", ["single", "guess", "tools", "stateful"])
def test_check_env_passes(kind):
    check_env(wrap(verifiers_envs.load_environment(kind)))


async def test_multi_turn_stops_and_replies_as_verifiers_does(openai_server):
    openai_server.reset(scripted_model)
    env = wrap(verifiers_envs.load_environment("guess", n=6))
    by_task = {r.task_id: r for r in await rlvr_rollouts(env, openai_server.base_url)}
    # secret 8: bisection's first guess; 4 and 12: its second; 1: out of guesses after three
    assert [len(by_task[f"train-{i}"].turns) for i in range(4)] == [1, 2, 2, 3]
    assert by_task["train-0"].info["verifiers_stop"] == "guessed"
    assert (by_task["train-0"].stop_reason, by_task["train-0"].truncated) == ("verifiers_done", False)
    out_of_guesses = by_task["train-3"]
    assert out_of_guesses.info["verifiers_stop"] == "has_final_env_response"
    assert out_of_guesses.turns[-1].env_messages == [{"role": "user", "content": "Out of guesses: it was 1."}]
    assert out_of_guesses.rewards == {"solved": 0.0, "quick": 1 / 3, "reward_2": 1.0, "num_turns": 3.0}


async def test_verifiers_token_budget_cuts_the_episode(openai_server):
    openai_server.reset(scripted_model)
    vf_env = verifiers_envs.load_environment("guess")
    vf_env.set_max_total_completion_tokens(1)  # every reply is longer: cut after the first turn
    rollouts = await rlvr_rollouts(wrap(vf_env), openai_server.base_url)
    ends = [(len(r.turns), r.stop_reason, r.truncated, r.info["verifiers_stop"]) for r in rollouts]
    cut = (1, "verifiers_cut", True, "max_total_completion_tokens_reached")
    assert ends == [(1, "verifiers_done", False, "guessed"), cut, cut, cut]  # secret 8: the first guess


async def test_tools_are_offered_and_run_by_verifiers(openai_server):
    openai_server.reset(scripted_model)
    env = wrap(verifiers_envs.load_environment("tools", n=2))
    rollouts = await rlvr_rollouts(env, openai_server.base_url)
    offered = {t["function"]["name"] for t in openai_server.bodies[0]["tools"]}
    assert offered == {"add", "reverse"}
    first = rollouts[0]
    assert [m["content"] for t in first.turns for m in t.env_messages] == ["5", "5"]
    assert first.rewards == {
        "final_answer": 1.0,
        "num_turns": 3.0,
        "total_tool_calls": 2.0,
        "add_calls": 1.0,
        "reverse_calls": 1.0,
    }
    assert (first.stop_reason, first.info["verifiers_stop"]) == ("verifiers_done", "no_tools_called")


@pytest.fixture
def verifiers_entry_point(monkeypatch):
    """The `verifiers` entry point (pyproject.toml) as an installed rlvr would have it, and the
    test envs importable by module name."""
    found = rlvr.registry._entry_points()
    found["verifiers"] = EntryPoint("verifiers", "rlvr.envs.verifiers:load_environment", rlvr.registry.GROUP)
    monkeypatch.setattr(rlvr.registry, "_entry_points", lambda: found)
    monkeypatch.setitem(sys.modules, "verifiers_envs", verifiers_envs)


def test_eval_cli_runs_a_verifiers_module(verifiers_entry_point, openai_server, tmp_path):
    openai_server.reset(scripted_model)
    handlers = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    out = tmp_path / "run"
    args = ["eval", "verifiers", "-a", '{"env": "verifiers_envs", "kind": "single", "n": 6}', "-n", "-1", "-r", "1"]
    code = main([*args, "-m", "scripted", "-b", openai_server.base_url, "-k", "RLVR_NO_KEY", "-o", str(out), "-q"])
    assert code == 0
    assert (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)) == handlers  # not verifiers' own
    lines = (out / "results.jsonl").read_text().splitlines()  # in the order rollouts finished
    rows = sorted(map(json.loads, lines), key=lambda r: int(r["task_id"].split("-")[1]))
    # tasks 0..5: wrong on 2 and 5 (a = 2, 5); odd a has no think block
    assert [r["rewards"]["exact_answer"] for r in rows] == [1.0, 1.0, 0.0, 1.0, 1.0, 0.0]
    # verifiers' SingleTurnEnv ends at its one turn (max_turns_reached): terminated, as rlvr's own
    assert {(r["stop_reason"], r["truncated"], r["info"]["verifiers_stop"]) for r in rows} == {
        ("verifiers_done", False, "max_turns_reached")
    }


def test_gen_cli_keeps_a_verifiers_tool_env_s_rollouts_with_its_tools(verifiers_entry_point, openai_server, tmp_path):
    openai_server.reset(scripted_model)
    data = tmp_path / "data.jsonl"
    args = ["gen", "verifiers", "-a", '{"env": "verifiers_envs", "kind": "tools"}', "-n", "-1", "-r", "1"]
    code = main(
        [*args, "-f", "final_answer == 1", "-m", "scripted", "-b", openai_server.base_url, "-k", "NO_KEY"]
        + ["-d", str(data), "-q"]
    )
    assert code == 0
    rows = {r["task_id"]: r for r in map(json.loads, data.read_text().splitlines())}  # in the order they finished
    assert sorted(rows) == ["train-0", "train-2"]  # the script answers odd tasks wrong
    assert [t["function"]["name"] for t in rows["train-0"]["tools"]] == ["add", "reverse"]
    assert [m["role"] for m in rows["train-0"]["messages"]] == [
        "system",
        "user",
        "assistant",
        "tool",
        "assistant",
        "tool",
        "assistant",
    ]


def test_refuses_what_is_not_a_verifiers_multi_turn_env():
    with pytest.raises(UsageError, match="expected a verifiers Environment"):
        wrap(object())
    with pytest.raises(UsageError, match="name it, e.g."):
        load_environment()
    with pytest.raises(UsageError, match="could not be imported"):
        load_environment("no_such_verifiers_env_module")
