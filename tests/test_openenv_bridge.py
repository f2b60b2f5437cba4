"""The `openenv` environment: OpenEnv environments played through OpenEnv's own client.

The OpenEnv servers are real (`openenv-core`'s server classes, served by uvicorn): three small
environments written with them (tests/openenv_envs.py: OpenEnv's own envs are not on PyPI), one
started by the bridge itself as a local process, and rlvr environments served by `rlvr serve`.
"""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path

import pytest

pytest.importorskip("openenv.core")

import openenv_envs  # noqa: E402
from openenv_support import running  # noqa: E402

from rlvr.clients.policy import Policy  # noqa: E402
from rlvr.engine import run_rollouts  # noqa: E402
from rlvr.envs.openenv import load_environment  # noqa: E402
from rlvr.errors import EnvError, UsageError  # noqa: E402
from rlvr.registry import load_environment as load_by_name  # noqa: E402
from rlvr.serve import build_app  # noqa: E402

HERE = str(Path(__file__).resolve().parent)


def play(env, player, n: int = 1, r: int = 1):
    """Play `n` tasks x `r` rollouts with `player` (a client, or a policy function)."""
    client = player if hasattr(player, "chat") else Policy(player)

    async def main():
        try:
            return await run_rollouts(env, client, env.tasks()[:n], rollouts_per_task=r)
        finally:
            await env.aclose()

    return asyncio.run(main())


def test_echo_fills_the_one_text_field_and_sums_the_step_rewards() -> None:
    with running(openenv_envs.echo_app) as url:
        env = load_environment(url=url, num_tasks=2)
        rollouts = play(env, lambda messages, rng: "<think>short</think>hello", n=2)
    for rollout in rollouts:
        assert rollout.error is None and rollout.stop_reason == "episode_done", rollout.error
        assert rollout.reward == pytest.approx(1.5) and rollout.rewards["final_reward"] == pytest.approx(0.5)
        assert [t.env_messages[0]["content"] for t in rollout.turns] == ["echoed_message: hello\nmessage_length: 5"] * 3
        assert "Echo environment ready" in rollout.prompt[-1]["content"]
        assert "plain text" in rollout.prompt[0]["content"]


def bisect(messages, rng) -> str:
    """Guess the middle of what the feedback so far leaves open, as a JSON action."""
    low, high = 1, 100
    guesses = [json.loads(m["content"])["guess"] for m in messages if m["role"] == "assistant"]
    answers = [m["content"] for m in messages if m["role"] == "user"][1:]
    for guess, answer in zip(guesses, answers):
        if "feedback: higher" in answer:
            low = guess + 1
        elif "feedback: lower" in answer:
            high = guess - 1
    return json.dumps({"guess": (low + high) // 2})


def test_guess_writes_a_json_action_and_the_reset_seed_picks_the_number() -> None:
    with running(openenv_envs.guess_app) as url:
        env = load_environment(url=url, num_tasks=4, seed=3, reward="last")
        rollouts = play(env, bisect, n=4)
        again = play(load_environment(url=url, num_tasks=4, seed=3, reward="last"), bisect, n=4)
        bad = play(load_environment(url=url, num_tasks=1), lambda m, rng: "fifty" if len(m) < 3 else '{"guess": 500}')
    assert [r.reward for r in rollouts] == [1.0] * 4
    assert [r.metrics["turns"] for r in rollouts] == [r.metrics["turns"] for r in again]
    assert len({r.metrics["turns"] for r in rollouts}) > 1  # the seeds gave different numbers
    assert "JSON object with the fields guess (integer)" in rollouts[0].prompt[0]["content"]
    (refused,) = bad
    assert refused.error is None and refused.stop_reason == "max_turns_reached"
    assert refused.rewards["invalid_actions"] == 30 and refused.reward == 0.0
    first, second = (t.env_messages[0]["content"] for t in refused.turns[:2])
    assert first.startswith("Invalid action: the reply holds no JSON object")
    assert second.startswith("Invalid action: ") and "JSON object" in second  # the server refused it


def test_rollouts_wait_for_a_session_on_a_server_that_allows_one() -> None:
    with running(openenv_envs.guess_app_one_session) as url:
        env = load_environment(url=url, num_tasks=6, seed=3)

        async def main():
            try:
                return await run_rollouts(env, Policy(bisect), env.tasks(), concurrency=6)
            finally:
                await env.aclose()

        rollouts = asyncio.run(main())
        impatient = load_environment(url=url, num_tasks=2, session_wait_s=0.01)

        async def hold_one_session():
            from openenv.core import GenericEnvClient

            async with GenericEnvClient(base_url=url) as held:
                await held.reset(seed=1)
                try:
                    return await run_rollouts(impatient, Policy(bisect), impatient.tasks()[:1])
                finally:
                    await impatient.aclose()

        (refused,) = asyncio.run(hold_one_session())
    assert [r.error for r in rollouts] == [None] * 6 and [r.reward for r in rollouts] == [1.0] * 6
    assert refused.error is not None and "had no free session within 0.01 s" in refused.error


@pytest.mark.slow  # a server process: ~3 s of CPU importing OpenEnv (fastmcp, fastapi)
def test_a_local_app_is_started_played_and_stopped() -> None:
    def add(messages, rng) -> str:
        a, b = map(int, re.findall(r"\d+", messages[-1]["content"]))
        return str(a + b)

    env = load_environment(app="openenv_envs:arithmetic_app", app_dir=HERE, num_tasks=3)

    async def main():
        try:
            rollouts = await run_rollouts(env, Policy(add), env.tasks(), rollouts_per_task=1)
            wrong = await run_rollouts(env, Policy(lambda m, rng: "0"), env.tasks()[:1])
            return rollouts, wrong, env._server.process
        finally:
            await env.aclose()

    rollouts, wrong, process = asyncio.run(main())
    assert [r.reward for r in rollouts] == [1.0] * 3 and wrong[0].reward == 0.0
    assert all(r.metrics["turns"] == 1 for r in rollouts)
    assert process.poll() is not None and env._server is None  # stopped by aclose


def test_a_missing_app_fails_with_its_output() -> None:
    env = load_environment(app="no_such_module_here:app", num_tasks=1, start_timeout_s=30)
    (rollout,) = play(env, lambda m, rng: "x")
    assert rollout.error is not None and "no_such_module_here" in rollout.error and "exited" in rollout.error
    with pytest.raises(UsageError, match="exactly one of url"):
        load_environment()
    with pytest.raises(UsageError, match="the action has no field 'nope'; its fields: message"):
        with running(openenv_envs.echo_app) as url:
            asyncio.run(load_environment(url=url, action_field="nope").start())
    with pytest.raises(EnvError, match="did not give its schema"):
        asyncio.run(load_environment(url="http://127.0.0.1:9").start())


SERVED = [("reverse_text", {}, "echo"), ("wiki_search", {"size": "small", "num_tasks": 3, "eval_tasks": 3}, "oracle")]


@pytest.mark.parametrize(("name", "env_args", "player"), SERVED, ids=[c[0] for c in SERVED])
def test_an_rlvr_env_served_over_openenv_scores_as_it_does_in_process(name, env_args, player) -> None:
    """The bridge in front of `rlvr serve`: messages and tool calls pass through, and each
    episode's reward is the one the same player gets in process on the task the server chose."""
    pytest.importorskip(name)
    served = load_by_name(name, **env_args)
    policy = served.policies()[player]()
    with running(build_app(served)) as url:
        over = play(load_environment(url=url, num_tasks=3), policy, n=3)
    local = load_by_name(name, **env_args)
    by_prompt = {json.dumps(local.initial_prompt(t)): t for t in local.tasks()}
    tasks = [by_prompt[json.dumps(r.prompt)] for r in over]  # the served prompt is the task's own
    direct = asyncio.run(run_rollouts(local, policy, tasks))
    assert [r.reward for r in over] == [d.reward for d in direct]
    assert [r.metrics["turns"] for r in over] == [d.metrics["turns"] for d in direct]
    if name == "wiki_search":
        assert all(t.completion.tool_calls for r in over for t in r.turns[:-1])
