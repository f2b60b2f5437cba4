"""Continuous and composite action spaces as text (`rlvr.envs.gym.spaces`), and Pendulum-v1
played end to end through `GymEnv`, the engine and the CLI."""

from __future__ import annotations

import asyncio
import json
import math
import re

import numpy as np
import pytest

gymnasium = pytest.importorskip("gymnasium")

from gymnasium import spaces as gs

from rlvr import Policy
from rlvr.cli import main
from rlvr.engine import run_rollouts
from rlvr.envs.gym import load_environment
from rlvr.envs.gym.spaces import describe, example, parse, to_text

BOX = gs.Box(np.array([-1.0, 0.0], dtype=np.float32), np.array([1.0, 5.0], dtype=np.float32))
SPACES = {
    "box": gs.Box(-2.0, 2.0, (2, 3)),
    "int box": gs.Box(0, 9, (3,), dtype=np.int64),
    "unbounded box": gs.Box(-np.inf, np.inf, (2,)),
    "multi-discrete": gs.MultiDiscrete([3, 5], start=[1, -2]),
    "multi-binary": gs.MultiBinary(4),
    "tuple": gs.Tuple([gs.Discrete(3, start=1), gs.Box(0.0, 1.0, (2,)), gs.MultiDiscrete([2, 2])]),
    "text": gs.Text(8, charset="abcxyz"),
    "dict": gs.Dict({"move": gs.Discrete(4), "say": gs.Text(6, min_length=0, charset='hi !"'), "force": BOX}),
}


def same(a, b) -> bool:
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, str):
        return a == b
    if isinstance(a, tuple):
        return isinstance(b, tuple) and len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    return bool(np.array_equal(np.asarray(a), np.asarray(b)))


@pytest.mark.parametrize("name", SPACES)
def test_every_sampled_action_survives_the_round_trip_through_text(name: str) -> None:
    space = SPACES[name]
    space.seed(0)
    for _ in range(50):
        action = space.sample()
        back = parse(to_text(action, space), space)
        assert same(back, action) and space.contains(back), (to_text(action, space), back)
    assert space.contains(parse(example(space), space))


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("[0.5, 6]", "item 2: 6 is out of range: it must be in [0, 5]"),
        ("[-1.5, 1]", "item 1: -1.5 is out of range: it must be in [-1, 1]"),
        ("[0.5]", "[0.5] has 1 numbers; the action has 2"),
        ("[NaN, 1]", "item 1: nan is not a finite number"),
        ("push left", "'push left' is not JSON; write e.g. [0.0, 2.5]"),
        ('["a", 1]', "is not a JSON list of 2 numbers"),
    ],
)
def test_a_box_action_out_of_bounds_or_unreadable_is_rejected_with_the_reason(text: str, reason: str) -> None:
    with pytest.raises(ValueError, match=re.escape(reason)):
        parse(text, BOX)


def test_composite_spaces_reject_the_part_that_is_wrong() -> None:
    with pytest.raises(ValueError, match=re.escape("item 2: item 1: 1.5 is out of range: it must be in [0, 1]")):
        parse("[1, [1.5, 0], [0, 1]]", SPACES["tuple"])
    with pytest.raises(ValueError, match=re.escape("item 2: 3 is out of range: it must be in [-2, 2]")):
        parse("[1, 3]", SPACES["multi-discrete"])
    with pytest.raises(ValueError, match=re.escape("item 1: 0.5 is not an integer")):
        parse("[0.5, 1, 0, 1]", SPACES["multi-binary"])
    with pytest.raises(ValueError, match="is not a JSON list of 3 items"):
        parse("[1, [0, 0]]", SPACES["tuple"])


def test_text_and_dict_actions_are_read_or_rejected_with_the_reason() -> None:
    assert parse("  xyz \n", SPACES["text"]) == "xyz" and to_text("abc", SPACES["text"]) == "abc"
    with pytest.raises(ValueError, match=re.escape("the character 'q' is not allowed; write text of 1 to 8")):
        parse("abq", SPACES["text"])
    with pytest.raises(ValueError, match=re.escape("9 characters; it must have 1 to 8")):
        parse("a" * 9, SPACES["text"])
    action = parse('{"move": 2, "say": "hi!", "force": [0, 1]}', SPACES["dict"])
    assert action["move"] == 2 and action["say"] == "hi!" and SPACES["dict"].contains(action)
    with pytest.raises(ValueError, match=re.escape("key \"say\": the character 'x' is not allowed")):
        parse('{"move": 2, "say": "x", "force": [0, 1]}', SPACES["dict"])
    with pytest.raises(
        ValueError, match=re.escape('is not a JSON object with exactly the keys ["force", "move", "say"]')
    ):
        parse('{"move": 2}', SPACES["dict"])
    assert describe(SPACES["dict"]).startswith('a JSON object with the keys "force": a JSON list of 2 numbers')


class Echo(gymnasium.Env):
    """Say the word shown (a Text action), or, with `dict_action`, say it and count its letters."""

    WORDS = ["cab", "abba", "xyz"]

    def __init__(self, dict_action: bool = False) -> None:
        self.observation_space = gs.Discrete(len(self.WORDS))
        say = gs.Text(8, charset="abcxyz")
        self.action_space = gs.Dict({"say": say, "letters": gs.Discrete(9)}) if dict_action else say

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.word = int(self.np_random.integers(len(self.WORDS)))
        return self.word, {}

    def step(self, action):
        said = action if isinstance(action, str) else action["say"]
        right = said == self.WORDS[self.word] and (isinstance(action, str) or action["letters"] == len(said))
        return self.word, float(right), True, False, {}


@pytest.mark.parametrize("dict_action", [False, True])
def test_an_env_with_a_text_or_dict_action_space_is_played_through_the_bridge(dict_action: bool) -> None:
    from rlvr.envs.gym import GymEnv

    env = GymEnv(lambda: Echo(dict_action), num_tasks=6, description="Say the word number shown: 0 cab, 1 abba, 2 xyz.")
    question = env.tasks()[0].question
    assert ('JSON object with the keys "letters"' if dict_action else "<action>TEXT</action>") in question

    def say(messages, rng) -> str:
        word = Echo.WORDS[int(messages[-1]["content"].rsplit("Observation: ", 1)[1])]
        return f"<action>{json.dumps({'say': word, 'letters': len(word)}) if dict_action else word}</action>"

    rollouts = asyncio.run(run_rollouts(env, Policy(say, name="say"), env.tasks()))
    assert [r.reward for r in rollouts] == [1.0] * 6
    rollouts = asyncio.run(run_rollouts(env, env.policies()["random"](), env.tasks()))
    assert all(r.error is None and r.rewards["invalid_action_rate"] == 0.0 for r in rollouts)


def test_descriptions_name_every_range() -> None:
    assert describe(BOX) == "a JSON list of 2 numbers: the 1st in [-1, 1], the 2nd in [0, 5]"
    assert describe(SPACES["unbounded box"]) == "a JSON list of 2 numbers, each of any value"
    assert describe(SPACES["tuple"]) == (
        "a JSON list of 3 items: the 1st an integer from 1 to 3; the 2nd a JSON list of 2 numbers, each in [0, 1]; "
        "the 3rd a JSON list of 2 integers: the 1st from 0 to 1, the 2nd from 0 to 1"
    )


# ---- Pendulum-v1, end to end ----------------------------------------------------------------

_OBS = re.compile(r"Observation: \[([^\]]*)\]")


def swing_up(messages, rng) -> str:
    """Energy shaping towards the upright rest energy, then a PD law near the top.

    Pendulum's dynamics: speed' = 15 sin(angle) + 3 torque (angle 0 upright), so the energy
    speed^2 / 2 + 15 cos(angle) is 15 at rest upright and torque changes it at 3 torque speed.
    """
    cos, sin, speed = (float(x) for x in _OBS.findall(messages[-1]["content"])[-1].split(","))
    angle, energy = math.atan2(sin, cos), speed**2 / 2 + 15 * cos
    torque = -(10 * angle + 2 * speed) if cos > 0.85 else 0.5 * (15 - energy) * speed
    return f"<action>[{float(np.clip(torque, -2, 2))}]</action>"


def test_pendulum_is_played_end_to_end_and_a_controller_beats_doing_nothing() -> None:
    env = load_environment("Pendulum-v1", num_tasks=4, max_turns=200)
    question = env.tasks()[0].question
    assert "a number in [-2, 2] (or a JSON list of 1 number)" in question and "at most 200 turns" in question

    def play(policy) -> list:
        return asyncio.run(run_rollouts(env, Policy(policy, name="p"), env.tasks()))

    controlled, idle = play(swing_up), play(lambda m, rng: "<action>0</action>")
    for r in controlled + idle:
        assert r.error is None and r.rewards["invalid_action_rate"] == 0.0
        assert r.stop_reason == "truncated" and len(r.turns) == 200  # Pendulum's own time limit
        rewards = [float(t.env_messages[0]["content"].split("Reward: ")[1].split(". ")[0]) for t in r.turns]
        assert r.reward == pytest.approx(sum(rewards), abs=1e-3)
    assert np.mean([r.reward for r in controlled]) > -300 > -800 > np.mean([r.reward for r in idle])


def test_pendulum_rejects_a_torque_out_of_bounds_and_the_turn_is_lost() -> None:
    env = load_environment("Pendulum-v1", num_tasks=1, max_turns=2)
    replies = iter(["<action>[3]</action>", "<action>-2</action>"])
    (r,) = asyncio.run(run_rollouts(env, Policy(lambda m, rng: next(replies), name="p"), env.tasks()))
    first, second = (t.env_messages[0]["content"] for t in r.turns)
    assert first.startswith("Invalid action: 3 is out of range: it must be in [-2, 2]. The turn is lost.")
    assert second.startswith("Reward: ") and r.rewards["invalid_action_rate"] == 0.5


def test_rlvr_eval_plays_pendulum_with_the_random_player(tmp_path, capsys) -> None:
    argv = ["eval", "gym", "-a", '{"env_id": "Pendulum-v1", "num_tasks": 2}', "-m", "policy:random", "-r", "2"]
    assert main([*argv, "-o", str(tmp_path)]) == 0
    rows = [json.loads(line) for line in (tmp_path / "results.jsonl").read_text().splitlines()]
    assert len(rows) == 4 and all(row["error"] is None for row in rows)
    assert all(row["rewards"]["invalid_action_rate"] == 0.0 and row["reward"] < 0 for row in rows)
