"""Results files and resume: nothing lost, nothing repeated, foreign files refused."""

from __future__ import annotations

import asyncio
import json
import math
import os

import pytest

from rlvr import Policy, Rubric, SingleTurnEnv
from rlvr.engine import run_rollouts
from rlvr.errors import ResultsError
from rlvr.results import RunDir


def exact(completion, answer) -> float:
    return float(completion[-1]["content"] == answer)


ENV = SingleTurnEnv([{"question": str(i), "answer": str(i)} for i in range(10)], rubric=Rubric([exact]))
META = {"env": "t", "env_args": {}, "model": "m", "num_tasks": 10, "rollouts_per_task": 2}


def _run(path, policy, resume=False, meta=META):
    run, existing = RunDir.create(path, meta, resume=resume)
    done = {r.key for r in existing}
    try:
        new = asyncio.run(run_rollouts(ENV, policy, ENV.tasks(), rollouts_per_task=2, skip=done, on_rollout=run.append))
    except BaseException:
        run.close(status="interrupted")
        raise
    run.close()
    return existing, new


def test_round_trip_and_metadata(tmp_path) -> None:
    _, new = _run(tmp_path / "run", Policy(lambda m, rng: m[-1]["content"]))
    run = RunDir.open(tmp_path / "run")
    back = run.read()
    by_key = {r.key: r.to_dict() for r in new}
    assert all(r.to_dict() == by_key[r.key] for r in back)
    assert {r.key for r in back} == {r.key for r in new} and len(back) == 20
    assert run.metadata["status"] == "complete" and run.metadata["format"] == "rlvr.results/1"


def test_interrupted_run_resumes_without_loss_or_duplicates(tmp_path) -> None:
    calls = {"n": 0}

    def dies(messages, rng):
        calls["n"] += 1
        if calls["n"] > 7:
            raise KeyboardInterrupt  # the process is stopped mid-run
        return messages[-1]["content"]

    with pytest.raises(KeyboardInterrupt):
        _run(tmp_path / "run", Policy(dies))
    # a torn last line, as if the process died mid-write
    with (tmp_path / "run" / "results.jsonl").open("a") as f:
        f.write('{"task_id": "9", "rollout_in')
    first = RunDir.open(tmp_path / "run").read()
    assert 0 < len(first) < 20
    existing, new = _run(tmp_path / "run", Policy(lambda m, rng: m[-1]["content"]), resume=True)
    assert len(existing) == len(first)
    keys = [r.key for r in RunDir.open(tmp_path / "run").read()]
    assert len(keys) == 20 and len(set(keys)) == 20
    assert len(new) == 20 - len(first)


def test_refuses_to_overwrite_or_resume_another_run(tmp_path) -> None:
    _run(tmp_path / "run", Policy(lambda m, rng: "x"))
    with pytest.raises(ResultsError, match="--resume"):
        _run(tmp_path / "run", Policy(lambda m, rng: "x"))
    with pytest.raises(ResultsError, match="model was 'm', now 'other'"):
        _run(tmp_path / "run", Policy(lambda m, rng: "x"), resume=True, meta={**META, "model": "other"})


def test_corrupt_and_foreign_files_are_refused_with_line_numbers(tmp_path) -> None:
    _run(tmp_path / "run", Policy(lambda m, rng: "x"))
    path = tmp_path / "run" / "results.jsonl"
    lines = path.read_text().splitlines()
    lines[3] = "{broken"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(ResultsError, match=r"results.jsonl:4 "):
        RunDir.open(tmp_path / "run").read()
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "results.jsonl").write_text(json.dumps({"prompt": "hi", "completion": "yo"}) + "\n")
    with pytest.raises(ResultsError, match="not an rlvr rollout"):
        RunDir.open(foreign).read()
    (foreign / "metadata.json").write_text('{"format": "something-else"}')
    with pytest.raises(ResultsError, match="not an rlvr results file"):
        RunDir.open(foreign)
    with pytest.raises(ResultsError, match="not a results directory"):
        RunDir.open(tmp_path / "missing")


# ---- hostile text and numbers -----------------------------------------------------------------

HOSTILE = ["\ud800", "a\udfffb", "\\\ud800\\", "\x00\u2028\u2029", "\U0001f600", "\ufeff", '"}\n{'] * 2
"""Text a model, a tool or an env may produce: lone surrogates (valid JSON, not UTF-8), NUL,
line separators, astral characters, a byte-order mark, and JSON-looking text."""


def test_any_text_a_model_or_env_produces_is_saved_and_read_back_exactly(tmp_path) -> None:
    rows = [
        {"id": f"t{i}", "question": f"q{i} {text}", "answer": text, "info": {f"k{text}": [text]}}
        for i, text in enumerate(HOSTILE)
    ]
    env = SingleTurnEnv(rows, rubric=Rubric([exact]))
    by_question = {r["question"]: r["answer"] for r in rows}
    policy = Policy(lambda m, rng: by_question[m[-1]["content"]])
    run, _ = RunDir.create(tmp_path / "run", META)
    new = asyncio.run(run_rollouts(env, policy, env.tasks(), rollouts_per_task=2, on_rollout=run.append))
    run.close()
    raw = (tmp_path / "run" / "results.jsonl").read_bytes()
    raw.decode("utf-8")  # valid UTF-8 for any other reader
    back = RunDir.open(tmp_path / "run").read()
    assert len(back) == len(new) == 2 * len(HOSTILE)
    assert sorted(json.dumps(r.to_dict()) for r in back) == sorted(json.dumps(r.to_dict()) for r in new)
    assert all(r.reward == 1.0 for r in back)


def _strict(line: bytes) -> dict:
    def refuse(name: str) -> None:
        raise ValueError(f"{name} is not JSON")

    return json.loads(line, parse_constant=refuse)


def nan_metric() -> float:
    return float("nan")


def inf_metric() -> float:
    return float("inf")


def huge_metric() -> float:
    return 1e308


def test_non_finite_metrics_of_weight_zero_keep_the_rollout_and_are_written_as_strict_json(tmp_path) -> None:
    rubric = Rubric([exact, nan_metric, inf_metric, huge_metric], weights=[1.0, 0.0, 0.0, 0.0])
    env = SingleTurnEnv([{"question": str(i), "answer": str(i)} for i in range(10)], rubric=rubric)
    run, _ = RunDir.create(tmp_path / "run", META)
    policy = Policy(lambda m, rng: m[-1]["content"])
    asyncio.run(run_rollouts(env, policy, env.tasks(), rollouts_per_task=2, on_rollout=run.append))
    run.close()
    lines = (tmp_path / "run" / "results.jsonl").read_bytes().splitlines()
    records = [_strict(line) for line in lines]
    assert all(r["error"] is None and r["reward"] == 1.0 for r in records)
    assert all(r["rewards"]["nan_metric"] is None and r["rewards"]["inf_metric"] is None for r in records)
    assert all(r["nonfinite"] == {"/rewards/nan_metric": "nan", "/rewards/inf_metric": "inf"} for r in records)
    back = RunDir.open(tmp_path / "run").read()
    assert all(math.isnan(r.rewards["nan_metric"]) and r.rewards["inf_metric"] == math.inf for r in back)
    assert all(r.rewards["huge_metric"] == 1e308 for r in back)


def test_a_rollout_json_cannot_hold_becomes_an_error_record_and_the_run_goes_on(tmp_path) -> None:
    rows = [{"question": str(i), "answer": str(i), "info": {"odd": {i} if i == 3 else [i]}} for i in range(6)]
    env = SingleTurnEnv(rows, rubric=Rubric([exact]))
    run, _ = RunDir.create(tmp_path / "run", META)
    asyncio.run(run_rollouts(env, Policy(lambda m, rng: m[-1]["content"]), env.tasks(), on_rollout=run.append))
    run.close()
    back = {r.task_id: r for r in RunDir.open(tmp_path / "run").read()}
    assert len(back) == 6 and [k for k, r in back.items() if r.error] == ["3"]
    assert back["3"].error.startswith("ResultsError: the rollout could not be saved as JSON (TypeError: ")


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
def test_a_full_disk_ends_the_run_with_one_clear_error(tmp_path) -> None:
    run, _ = RunDir.create(tmp_path / "run", META)
    run._file.close()
    run._file = open("/dev/full", "ab", buffering=0)  # every write fails with ENOSPC
    with pytest.raises(ResultsError, match=r"cannot write to .*results.jsonl \(No space left on device\)"):
        asyncio.run(run_rollouts(ENV, Policy(lambda m, rng: "x"), ENV.tasks(), on_rollout=run.append))
    run._file.close()
