"""Results files and resume: nothing lost, nothing repeated, foreign files refused."""

from __future__ import annotations

import asyncio
import json

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
