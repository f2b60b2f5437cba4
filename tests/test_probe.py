"""The step-0 temperature probe (issue 19 §1): a model right greedily but broken when sampled at
the training temperature gets one warning line before step 1; a model that stays right does not."""

from __future__ import annotations

import asyncio
import csv
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from rlvr import Rubric, SingleTurnEnv
from rlvr.clients.local import LocalModel
from rlvr.engine import run_rollouts
from rlvr.models import build_tiny_model
from rlvr.parsers import assistant_texts
from rlvr.train import grpo
from rlvr.train.config import TrainConfig
from rlvr.train.probe import ProbeResult, collapse_warning
from rlvr.types import Messages, SamplingArgs

pytestmark = pytest.mark.usefixtures("one_thread")

MAX_TOKENS = 4


class SameAsGreedy:
    """A parser whose format is "the reply is the greedy reply": sampling off the argmax breaks it."""

    def __init__(self, greedy: str) -> None:
        self.greedy = greedy

    def parse_answer(self, completion: str | Messages) -> str | None:
        return assistant_texts(completion)[-1] if assistant_texts(completion) else None

    def format_reward(self, completion: str | Messages) -> float:
        return float(self.parse_answer(completion) == self.greedy)


def make_env(greedy: str) -> SingleTurnEnv:
    parser = SameAsGreedy(greedy)

    def as_greedy(completion: Messages) -> float:
        return parser.format_reward(completion)

    tasks = [{"id": str(i), "question": "Say hello."} for i in range(16)]
    return SingleTurnEnv(tasks, parser=parser, rubric=Rubric([as_greedy], parser=parser))


@pytest.fixture(scope="module")
def peaked(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """A tiny model with N(0, 1) weights (sharp logits: T = 0.05 stays on the argmax, T = 1 leaves it
    in most replies), and its greedy reply to the env's prompt."""
    path = build_tiny_model(tmp_path_factory.mktemp("peaked"), preset="tiny", seed=0)
    model = transformers.AutoModelForCausalLM.from_pretrained(path).eval()
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() > 1:
                p.normal_(0.0, 1.0, generator=gen)
    model.save_pretrained(path)
    tokenizer = transformers.AutoTokenizer.from_pretrained(path)
    client = LocalModel("peaked", model=model, tokenizer=tokenizer)
    env = make_env("")
    greedy = SamplingArgs(max_tokens=MAX_TOKENS, temperature=0.0)
    (rollout,) = asyncio.run(run_rollouts(env, client, env.tasks()[:1], sampling=greedy))
    return path, assistant_texts(rollout.completion)[-1]


def train_once(model: Path, greedy: str, out: Path, **changes: Any) -> dict[str, float]:
    """One training step; the first row of metrics.csv (step 0 when the probe ran)."""
    cfg = TrainConfig(
        env="same_as_greedy",
        model=str(model),
        output_dir=str(out),
        steps=1,
        batch_size=4,
        group_size=4,
        max_tokens=MAX_TOKENS,
        eval_every=None,
        save_every=None,
        **changes,
    )
    grpo.train(cfg, make_env=lambda **_: make_env(greedy), quiet=True, plots=False)
    with (out / "metrics.csv").open() as f:
        return {k: float(v) for k, v in next(csv.DictReader(f)).items() if v}


def test_sampling_at_t1_that_breaks_the_format_warns_once_with_both_numbers(
    peaked: tuple[Path, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    model, greedy = peaked
    probe = train_once(model, greedy, tmp_path / "hot", temperature=1.0)
    assert probe["step"] == 0 and probe["probe/reward_greedy"] == 1.0 and probe["probe/format_greedy"] == 1.0
    assert probe["probe/reward_sampled"] < 0.5 and probe["probe/format_sampled"] < 0.5
    warnings = [line for line in capsys.readouterr().err.splitlines() if "warning" in line]
    assert len(warnings) == 1
    line = warnings[0]
    assert "temperature 1 " in line and "1.000 greedy" in line and "vs 100%" in line
    assert "--temperature" in line and "more SFT" in line


def test_a_model_that_stays_on_its_argmax_gets_no_warning(
    peaked: tuple[Path, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    model, greedy = peaked
    probe = train_once(model, greedy, tmp_path / "cool", temperature=0.05)
    assert probe["probe/reward_greedy"] == 1.0 and probe["probe/reward_sampled"] >= 0.75
    assert "warning" not in capsys.readouterr().err


def test_probe_tasks_0_skips_the_probe(peaked: tuple[Path, str], tmp_path: Path) -> None:
    model, greedy = peaked
    first = train_once(model, greedy, tmp_path, temperature=1.0, probe_tasks=0)
    assert first["step"] == 1 and not [k for k in first if k.startswith("probe/")]


@pytest.mark.parametrize(
    ("result", "fires"),
    [
        (ProbeResult(1.0, 16, 0.32, 0.15, 0.96, 0.90), True),  # reward below half of greedy
        (ProbeResult(1.0, 16, 0.32, 0.17, 0.96, 0.90), False),  # above half
        (ProbeResult(1.0, 16, 0.32, 0.30, 0.96, 0.60), True),  # format 36 points lower
        (ProbeResult(1.0, 16, 0.32, 0.30, 0.96, 0.70), False),  # 26 points lower
        (ProbeResult(1.0, 16, 0.0, 0.0, None, None), False),  # nothing to lose
        (ProbeResult(1.0, 16, -1.0, -3.0, None, None), False),  # negative rewards: format only
    ],
)
def test_collapse_thresholds(result: ProbeResult, fires: bool) -> None:
    line = collapse_warning(result)
    assert (line is not None) == fires
    assert line is None or "\n" not in line
