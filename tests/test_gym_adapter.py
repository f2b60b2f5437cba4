"""`TextGymEnv`: rlvr environments as Gymnasium envs (text in, text out), checked by
Gymnasium's own `check_env` and held to the same returns as `rlvr eval`."""

from __future__ import annotations

import asyncio

import pytest

gymnasium = pytest.importorskip("gymnasium")
pytest.importorskip("rlvr_tictactoe")

from gymnasium.utils.env_checker import check_env

from rlvr.engine import rollout_seed, run_rollouts
from rlvr.envs.gym.adapter import ENV_ID, TextGymEnv
from rlvr.errors import UsageError
from rlvr.registry import load_environment
from rlvr.seeding import mix_seed


@pytest.mark.parametrize("name", ["tictactoe", "reverse_text", "ice_maze"])
def test_gymnasium_check_env_passes_on_bundled_envs(name: str) -> None:
    env = gymnasium.make(ENV_ID, env=load_environment(name, num_tasks=8), render_mode="ansi")
    check_env(env.unwrapped)  # random Text actions: invalid moves, wasted turns, all in the space
    observation, info = env.reset(seed=3)
    assert env.observation_space.contains(observation) and observation == env.reset(seed=3)[0]
    assert info["messages"][-1]["content"] in observation and "[user]" in env.render()
    env.close()


def test_a_policy_gets_the_same_reward_through_gymnasium_as_through_the_engine() -> None:
    """Replaying rollout 0 of each task (same rollout seed, same sampling seeds): the same game."""
    rlvr_env = load_environment("tictactoe", num_tasks=8, eval_tasks=6)
    tasks = rlvr_env.tasks()
    policy = rlvr_env.policies()["random"]()
    engine = asyncio.run(run_rollouts(rlvr_env, policy, tasks))
    env = TextGymEnv(rlvr_env)
    for i, (task, expected) in enumerate(zip(tasks, engine)):
        seed = rollout_seed(task, 0)
        _, info = env.reset(options={"task": i, "rollout_seed": seed})
        messages, done, turn, reward = info["messages"], False, 0, 0.0
        while not done:
            sampling = rlvr_env.sampling.replace(seed=mix_seed(seed, turn))
            reply = asyncio.run(policy.chat(messages, sampling)).text
            _, reward, terminated, truncated, info = env.step(reply)
            messages, done, turn = info["messages"], terminated or truncated, turn + 1
        assert reward == expected.reward and info["stop_reason"] == expected.stop_reason
        assert info["rewards"] == expected.rewards and truncated == expected.truncated
        assert [t.completion.text for t in expected.turns] == [
            m["content"] for m in messages if m["role"] == "assistant"
        ]
    env.close()


def test_a_single_turn_env_ends_after_one_step_with_its_reward() -> None:
    rlvr_env = load_environment("reverse_text", num_tasks=2, eval_tasks=2)
    env = TextGymEnv(rlvr_env)
    _, info = env.reset(seed=0, options={"task": 1})
    text = rlvr_env.tasks()[1].answer
    observation, reward, terminated, truncated, info = env.step(f"<reversed_text>{text}</reversed_text>")
    assert (observation, terminated, truncated, info["stop_reason"]) == ("", True, False, "answered")
    assert reward > 0.9 and reward == rlvr_env.rubric.total(info["rewards"])
    with pytest.raises(RuntimeError, match="call reset\\(\\) before step\\(\\)"):
        env.step("again")
    env.close()


def test_bad_calls_get_one_clear_error() -> None:
    env = TextGymEnv(load_environment("tictactoe", num_tasks=8, eval_tasks=2))
    with pytest.raises(RuntimeError, match="call reset\\(\\) before step\\(\\)"):
        env.step("<move>4</move>")
    with pytest.raises(UsageError, match="options\\['task'\\] must be in 0..1, got 5"):
        env.reset(options={"task": 5})
    env.reset(seed=0)
    with pytest.raises(TypeError, match="an action is the text of one turn \\(str\\), got int"):
        env.step(4)  # type: ignore[arg-type]
    env.reset(seed=1)  # an unfinished episode is abandoned, and a new one starts
    assert env.step("<move>nonsense</move>")[1:4] == (0.0, False, False)
    env.close()
    env.close()  # closing twice is harmless


def test_a_mixture_scores_each_episode_with_its_members_rubric() -> None:
    """Each task of `mix` gets the reward `rlvr eval` records (its member's rubric, not the
    mixture's union rubric, which scores nothing), and Gymnasium's `check_env` passes on it."""
    mix = load_environment("mix", envs={"tictactoe": {"num_tasks": 8}, "reverse_text": {"num_tasks": 4}})
    checked = TextGymEnv(mix)
    check_env(checked)  # random Text actions, on tasks of both members (warnings are errors here)
    checked.close()
    tasks = mix.tasks()[:4]
    expected = asyncio.run(run_rollouts(mix, mix.policies()["random+oracle"](), tasks))
    players = mix.policies()["random+oracle"]().players
    env = TextGymEnv(mix)
    for i, (task, want) in enumerate(zip(tasks, expected)):
        member, _ = mix.member(task)
        seed = rollout_seed(task, 0)
        _, info = env.reset(options={"task": i, "rollout_seed": seed})
        done, turn = False, 0
        while not done:
            sampling = member.sampling.replace(seed=mix_seed(seed, turn))
            reply = asyncio.run(players[member.name].chat(info["messages"], sampling)).text
            _, reward, terminated, truncated, info = env.step(reply)
            done, turn = terminated or truncated, turn + 1
        assert "error" not in info and info["rewards"] == want.rewards and reward == want.reward
    assert {mix.member(t)[0].name for t in tasks} == {"tictactoe", "reverse_text"}
    env.close()
