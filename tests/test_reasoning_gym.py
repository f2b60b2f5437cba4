"""The reasoning-gym bridge, against the real reasoning-gym: its datasets by name, its own
scores as rewards, the seed passed through, and its errors in one line."""

from __future__ import annotations

import asyncio
import json
import pathlib
import random
import re
import statistics
import sys

import pytest

pytest.importorskip("reasoning_gym")

from rlvr import check_env
from rlvr.cli import main
from rlvr.engine import run_rollouts
from rlvr.envs.reasoning_gym import load_environment
from rlvr.errors import UsageError
from rlvr.mixture import EnvGroup
from rlvr.registry import load_environment as load_by_name
from rlvr.types import Rollout

DATASETS = ["leg_counting", "word_sorting", "mini_sudoku"]
"""An arithmetic word problem, a list answer, a multi-line grid with a checker of its own."""


def _play(dataset: str, policy: str, n: int = 6) -> list[Rollout]:
    env = load_environment(dataset=dataset, size=n, eval_size=n, seed=1)
    rollouts = asyncio.run(run_rollouts(env, env.policies()[policy](), env.tasks()))
    assert len(rollouts) == n and all(r.error is None for r in rollouts)
    return rollouts


def _score(dataset: str, reply: str, task_index: int = 0) -> float:
    env = load_environment(dataset=dataset, size=3, eval_size=3, seed=1)
    task = env.tasks("train")[task_index]
    fn = env.rubric.funcs[0]
    return fn([{"role": "assistant", "content": reply}], task.info, env.parser)  # type: ignore[no-any-return]


@pytest.mark.parametrize("dataset", DATASETS)
def test_oracle_scores_one_and_guess_scores_lower(dataset: str) -> None:
    oracle = _play(dataset, "oracle")
    assert [r.reward for r in oracle] == [1.0] * len(oracle)
    assert {r.rewards["format_reward"] for r in oracle} == {1.0}
    assert statistics.fmean(r.reward for r in _play(dataset, "guess")) < 0.5


@pytest.mark.parametrize("dataset", DATASETS)
def test_the_reward_is_the_datasets_score_of_the_tagged_answer(dataset: str) -> None:
    env = load_environment(dataset=dataset, size=3, eval_size=3, seed=1)
    first, second = env.tasks("train")[:2]
    assert first.answer is not None and second.answer is not None and first.answer != second.answer
    assert _score(dataset, f"<think>easy</think>\n<answer>\n{first.answer}\n</answer>") == 1.0
    assert _score(dataset, f"<answer>{second.answer}</answer>") < 1.0  # another task's answer
    assert _score(dataset, first.answer) == 0.0  # right, but not inside the tag


def test_check_env_entry_point_and_config_pass_through() -> None:
    check_env(load_environment(dataset="leg_counting", size=4, eval_size=3))
    env = load_by_name("reasoning_gym", dataset="leg_counting", size=10, min_animals=1, max_animals=2)
    assert env.name == "reasoning_gym" and env.env_args == {
        "dataset": "leg_counting",
        "size": 10,
        "min_animals": 1,
        "max_animals": 2,
    }
    assert len(env.tasks("train")) == 10 and len(env.tasks("eval")) == 100
    assert all(len(t.info["metadata"]["animals"]) <= 2 for t in env.tasks("train"))
    assert {t.info["dataset"] for t in env.tasks("eval")} == {"leg_counting"}


@pytest.mark.parametrize("dataset", [*DATASETS, "list_functions"])
def test_same_arguments_same_tasks(dataset: str) -> None:
    random.seed(123)
    before = random.random()
    a = load_environment(dataset=dataset, size=8, eval_size=8, seed=5)
    b = load_environment(dataset=dataset, size=8, eval_size=8, seed=5)
    for split in ("train", "eval"):
        assert [t.to_dict() for t in a.tasks(split)] == [t.to_dict() for t in b.tasks(split)]
    other = load_environment(dataset=dataset, size=8, eval_size=8, seed=6)
    assert [t.question for t in other.tasks("train")] != [t.question for t in a.tasks("train")]
    assert not {t.question for t in a.tasks("train")} & {t.question for t in a.tasks("eval")}
    random.seed(123)
    assert random.random() == before  # the module-level random was put back as it was


def test_a_dataset_without_answers_offers_no_oracle_and_still_checks() -> None:
    env = load_environment(dataset="propositional_logic", size=3, eval_size=3)
    assert all(t.answer is None for t in env.tasks()) and list(env.policies()) == ["guess"]
    check_env(env)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"dataset": "leg_countin"}, "reasoning-gym has no dataset 'leg_countin'; did you mean 'leg_counting'?"),
        ({"dataset": "leg_counting", "max_animal": 3}, "takes no argument 'max_animal'; did you mean 'max_animals'?"),
        ({"dataset": "leg_counting", "min_animals": 0}, "rejected its config {'min_animals': 0}: min_animals must"),
        ({"dataset": "composite"}, "'composite' dataset is not bridged: mix reasoning_gym environments"),
        ({"dataset": "leg_counting", "size": 0}, "size and eval_size must be >= 1, got 0, 100"),
    ],
)
def test_bad_arguments_are_one_line(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(UsageError) as caught:
        load_by_name("reasoning_gym", **kwargs)
    assert message in str(caught.value) and "\n" not in str(caught.value)


def test_two_datasets_mix_as_an_env_group() -> None:
    env = EnvGroup({d: load_environment(dataset=d, size=3, eval_size=3) for d in DATASETS[:2]})
    rollouts = asyncio.run(run_rollouts(env, env.policies()["oracle+oracle"](), env.tasks()))
    assert sorted(r.task_id.split("/")[0] for r in rollouts) == sorted(DATASETS[:2] * 3)
    assert [r.reward for r in rollouts] == [1.0] * 6 and all(r.error is None for r in rollouts)


@pytest.mark.parametrize("dataset", ["futoshiki", "knight_swap"])
def test_eval_of_five_tasks_generates_five_items(
    dataset: str, monkeypatch: pytest.MonkeyPatch, tmp_path: pathlib.Path
) -> None:
    """`-n 5` generates the 5 items it plays (futoshiki's 600 took 511 s to load), and each
    task is the one a full generation gives at its index."""
    import reasoning_gym

    cls = reasoning_gym.factory.DATASETS[dataset][0]
    made: list[int] = []
    generate = cls.__getitem__
    monkeypatch.setattr(cls, "__getitem__", lambda self, i: made.append(i) or generate(self, i))
    args = ["eval", "reasoning_gym", "-a", json.dumps({"dataset": dataset}), "-m", "policy:oracle", "-n", "5"]
    assert main([*args, "-r", "1", "-q", "-o", str(tmp_path / "run")]) == 0
    assert sorted(made) == [0, 1, 2, 3, 4]  # the eval split's first five, each once
    rewards = [json.loads(line)["reward"] for line in (tmp_path / "run" / "results.jsonl").read_text().splitlines()]
    assert rewards == [1.0] * 5
    alone = load_environment(dataset=dataset, size=3, eval_size=4, seed=2).tasks("eval")[2]
    in_order = list(load_environment(dataset=dataset, size=3, eval_size=4, seed=2).tasks("eval"))
    assert len(made) == 10 and in_order[2].to_dict() == alone.to_dict()


def test_the_extra_it_names_installs_with_old_and_new_pip(monkeypatch: pytest.MonkeyPatch) -> None:
    """pip before 23.3 (Python 3.11's bundled 23.2) matches the extra as written against the
    published name, which newer setuptools normalises (`reasoning_gym` -> `reasoning-gym`): so
    the extra the hint names must be its own normal form, with the alias's requirements."""
    import tomllib

    from rlvr.envs.reasoning_gym import reasoning_gym_module

    monkeypatch.setitem(sys.modules, "reasoning_gym", None)
    with pytest.raises(UsageError) as caught:
        reasoning_gym_module()
    extra = re.search(r"pip install 'rlvr\[(.+)\]'", str(caught.value)).group(1)  # type: ignore[union-attr]
    assert extra == re.sub(r"[-_.]+", "-", extra).lower()  # what pip >= 23.3 and setuptools write
    extras = tomllib.loads((pathlib.Path(__file__).parents[1] / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    assert extras[extra] == extras["reasoning_gym"] == ["reasoning-gym>=0.1.25"]
