"""The trainer on a verifiers environment (rlvr.envs.verifiers) unchanged: GRPO on the bridged
verifiers twin of test_grpo's vowel environment takes the very steps it takes on rlvr's own."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
vf = pytest.importorskip("verifiers")
pytest.importorskip("verifiers.legacy.envs.singleturn_env")  # the classic API's imports resolve

from datasets import Dataset  # noqa: E402
from test_grpo import _same, config, vowel_env  # noqa: E402

from rlvr.envs.verifiers import VerifiersEnv, wrap  # noqa: E402
from rlvr.envs.verifiers.env import keeping_signal_handlers  # noqa: E402
from rlvr.train import grpo  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(autouse=True)
def signal_handlers_kept():
    """A verifiers Environment installs SIGINT and SIGTERM handlers: give the test process its own back."""
    with keeping_signal_handlers():
        yield


def verifiers_vowel_env(**_: object) -> VerifiersEnv:
    """test_grpo's vowel environment written with verifiers' classes: the same tasks, prompts and reward."""

    def vowel_share(completion) -> float:
        text = completion[-1].content if completion else ""
        return sum(ch in "aeiou" for ch in text) / max(len(text), 1)

    rows = [{"question": f"Write vowels, number {i}."} for i in range(8)]
    return wrap(vf.SingleTurnEnv(dataset=Dataset.from_list(rows), rubric=vf.Rubric(funcs=[vowel_share])))


def test_grpo_steps_on_a_verifiers_env_equal_those_on_its_rlvr_twin(tiny, tmp_path) -> None:
    ours = grpo.train(config(tiny, tmp_path / "rlvr", steps=2), make_env=vowel_env, quiet=True, plots=False)
    theirs = grpo.train(config(tiny, tmp_path / "vf", steps=2), make_env=verifiers_vowel_env, quiet=True, plots=False)
    assert [_same(a, b) for a, b in zip(ours, theirs)] == [[], []]
    assert [m["reward/vowel_share"] for m in theirs] == [m["reward/mean"] for m in ours]
    assert theirs[0]["loss/policy"] == ours[0]["loss/policy"] and theirs[1]["reward/num_turns"] == 1.0
