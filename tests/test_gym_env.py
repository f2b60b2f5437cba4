"""GymEnv: Gymnasium's built-in toy environments played through rlvr's engine."""

from __future__ import annotations

import asyncio
import json
import sys

import pytest

from rlvr import Policy, Rollout
from rlvr.engine import run_rollouts
from rlvr.envs.gym import GymEnv, load_environment
from rlvr.errors import UsageError

gymnasium = pytest.importorskip("gymnasium")

FROZEN_PATH = ["down", "down", "right", "right", "down", "right"]
"""A safe path across the default 4x4 FrozenLake map (SFFF / FHFH / FFFH / HFFG)."""


def run(env: GymEnv, client, tasks=None, rollouts: int = 1) -> list[Rollout]:
    return asyncio.run(run_rollouts(env, client, tasks or env.tasks(), rollouts_per_task=rollouts))


def scripted(moves: list[str]) -> Policy:
    def reply(messages, rng) -> str:
        turn = sum(m["role"] == "assistant" for m in messages)
        return f"<think>step {turn}</think><action>{moves[turn % len(moves)]}</action>"

    return Policy(reply, name="script")


def test_frozen_lake_solved_by_a_scripted_walk_is_terminated_with_return_1() -> None:
    env = load_environment("FrozenLake-v1", num_tasks=2, env_kwargs={"is_slippery": False})
    rollouts = run(env, scripted(FROZEN_PATH))
    for r in rollouts:
        assert r.error is None and r.stop_reason == "terminated" and not r.truncated
        assert r.reward == r.rewards["episode_return"] == 1.0 and len(r.turns) == 6
        assert r.rewards["format_reward"] == 1.0 and r.rewards["invalid_action_rate"] == 0.0
    question = env.tasks()[0].question
    assert "left, down, right, up" in question and "@FFF\nFHFH" in question and "on S." in question


def test_a_gymnasium_time_limit_becomes_a_truncated_stop() -> None:
    env = GymEnv(
        lambda: gymnasium.make("FrozenLake-v1", is_slippery=False, max_episode_steps=3),
        action_names=["left", "down", "right", "up"],
        num_tasks=1,
    )
    (r,) = run(env, scripted(["left"]))  # bumps into the wall until the time limit
    assert r.stop_reason == "truncated" and r.truncated and len(r.turns) == 3 and r.reward == 0.0
    assert "cut short" in r.turns[-1].env_messages[0]["content"]


def test_cliff_walking_random_player_return_is_the_sum_of_rewards() -> None:
    env = load_environment("CliffWalking-v1", num_tasks=3, max_turns=15)
    rollouts = run(env, env.policies()["random"](), rollouts=3)
    assert len(rollouts) == 9 and all(r.error is None for r in rollouts)
    for r in rollouts:
        replies = [m["content"] for t in r.turns for m in t.env_messages]
        rewards = [float(text.split("Reward: ")[1].split(".")[0]) for text in replies]
        assert r.reward == pytest.approx(sum(rewards)) and r.reward <= -len(r.turns)
        assert r.stop_reason == "max_turns_reached" and r.truncated and len(r.turns) == 15
        assert Rollout.from_dict(json.loads(json.dumps(r.to_dict()))).to_dict() == r.to_dict()


def test_dynamics_are_seeded_per_rollout() -> None:
    env = load_environment("FrozenLake-v1", num_tasks=2, env_kwargs={"is_slippery": True}, max_turns=20)
    walk = scripted(FROZEN_PATH)
    first, again = run(env, walk, rollouts=4), run(env, walk, rollouts=4)
    assert [r.to_dict()["turns"] for r in first] == [r.to_dict()["turns"] for r in again]
    assert len({json.dumps(r.to_dict()["turns"]) for r in first}) > 2


def test_unreadable_actions_waste_the_turn() -> None:
    env = load_environment("FrozenLake-v1", num_tasks=1, max_turns=4)
    replies = iter(["<action>jump</action>", "no tags", "<action>7</action>", "<action>1</action>"])
    (r,) = run(env, Policy(lambda m, rng: next(replies), name="bad"))
    assert r.rewards["invalid_action_rate"] == 0.75
    assert r.rewards["format_reward"] == 0.75  # only "no tags" is unformatted
    messages = [t.env_messages[0]["content"] for t in r.turns]
    assert "'jump' is not an action" in messages[0] and "no <action>" in messages[1]
    assert "Invalid" not in messages[3]


def test_numbered_actions_without_names() -> None:
    env = GymEnv(lambda: gymnasium.make("FrozenLake-v1", is_slippery=False), num_tasks=1)
    assert "a number from 0 to 3" in env.tasks()[0].question
    (r,) = run(env, scripted(["1", "1", "2", "2", "1", "2"]))
    assert r.reward == 1.0 and r.stop_reason == "terminated"


def test_check_env_passes_on_a_gymnasium_env() -> None:
    from rlvr import check_env

    check_env(load_environment("CliffWalking-v1", num_tasks=2, max_turns=5))


def test_unknown_env_id_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match="no Gymnasium env 'NoSuchEnv-v0'"):
        load_environment("NoSuchEnv-v0")


def test_missing_gymnasium_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "gymnasium", None)
    with pytest.raises(UsageError, match=r"pip install 'rlvr\[gym\]'"):
        GymEnv(lambda: None)


# ---- defaults that fit the env, and classic control in words --------------------------------


def push(messages, rng) -> str:
    """MountainCar: accelerate the way the car moves (its labelled velocity)."""
    velocity = float(messages[-1]["content"].split("Velocity: ")[1].split(" ")[0].rstrip("."))
    return "<action>right</action>" if velocity >= 0 else "<action>left</action>"


def test_mountain_car_is_solved_through_the_bridge_with_defaults() -> None:
    """The default turn limit is the env's own (200), not 100: pushing the way the car moves
    (its labelled velocity) reaches the goal in 113-125 steps, every episode."""
    env = load_environment("MountainCar-v0", num_tasks=10)
    assert "at most 200 turns" in env.tasks()[0].question
    rollouts = run(env, Policy(push, name="push"))
    assert all(r.stop_reason == "terminated" and -130 < r.reward < -100 for r in rollouts)
    assert load_environment("CliffWalking-v1", num_tasks=1).max_turns == 100  # no limit of its own


@pytest.mark.parametrize(
    ("env_id", "words"),
    [
        ("CartPole-v1", ["Cart position: ", "Pole angle: ", "more than 12 degrees", "+1 for every step"]),
        ("MountainCar-v0", ["Position: ", "Velocity: ", "position 0.5", "-1 every step", "left, none, right"]),
        ("MountainCarContinuous-v0", ["Position: ", "+100 on reaching the goal", "position 0.45"]),
        ("Acrobot-v1", ["cos(angle 1): ", "Height of the free end: ", "negative, none, positive"]),
        ("Pendulum-v1", ["cos(angle): ", "Angle: ", "-(angle² + 0.1 x angular velocity²"]),
        ("CliffWalking-v1", ["C the cliff", "costs -100 and sends you back to S", "@ C C", "row 4, column 1"]),
    ],
)
def test_classic_control_and_cliff_walking_prompts_name_fields_goal_and_reward(env_id: str, words: list[str]) -> None:
    env = load_environment(env_id, num_tasks=1)
    question = env.tasks()[0].question
    missing = [w for w in words if w not in question]
    assert not missing, f"{missing} not in {question}"
    (r,) = run(env, env.policies()["random"]())
    assert r.error is None and r.rewards["invalid_action_rate"] == 0.0


def test_the_summary_says_how_many_episodes_max_turns_cut() -> None:
    """A max_turns below the env's own limit cuts MountainCar's solved episodes: the summary says
    so (cut by max_turns %); with the env's own limit there is nothing to say."""
    short = load_environment("MountainCar-v0", num_tasks=2, max_turns=100)
    assert short.summarize(run(short, Policy(push, name="push"))) == {"cut by max_turns %": 100.0}
    own = load_environment("MountainCar-v0", num_tasks=2)
    assert own.summarize(run(own, Policy(push, name="push"))) is None
