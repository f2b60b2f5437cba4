"""benchmarks/bench_tictactoe_step.py: what it reads from a run's metrics (the steps after the
warm-up, torn rows left out), the ratios paired by round, and a failing variant reported while the
others go on (the training runs replaced by a stand-in)."""

from __future__ import annotations

import argparse
import json
import subprocess
from pathlib import Path

import pytest
from loading import load_module

bench = load_module(Path(__file__).resolve().parents[1] / "benchmarks" / "bench_tictactoe_step.py")


def _metrics(folder: Path, rows: list[str]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "metrics.csv"
    path.write_text("step,time/step,time/rollouts,time/train,gen/prefills,loss\n" + "".join(r + "\n" for r in rows))
    return path


def test_summarize_takes_the_steps_after_the_warm_up(tmp_path: Path) -> None:
    path = _metrics(
        tmp_path,
        [
            "1,9.0,8.0,1.0,40,0.1",
            "2,3.0,2.0,1.0,30,0.1",
            "3,2.0,1.5,0.5,20,0.1",
            "4,4.0,3.0,1.0,10,nan",
            "5,1.0,nan,0.2,",
            "x,1,1,1,1,1",
        ],
    )
    got = bench.summarize(path, skip=1)
    assert got["steps"] == 4  # steps 2-5; the row without a step is left out
    assert got["time/step"] == 2.5  # median of 3, 2, 4, 1
    assert got["time/rollouts"] == 2.0  # median of 2, 1.5, 3 (a NaN is no value)
    assert got["gen/prefills"] == 20.0  # mean of 30, 20, 10
    assert "loss" not in got
    with pytest.raises(ValueError, match="no step after step 5"):
        bench.summarize(path, skip=5)


def test_ratios_pair_rounds_and_skip_failed_ones() -> None:
    results = {
        "a": [{"time/step": 2.0}, {"time/step": 3.0}, {"time/step": 4.0}],
        "b": [{"time/step": 1.0}, {}, {"time/step": 2.0}],
        "c": [{}, {}, {}],
    }
    assert bench.ratios(results) == {"b": {"median": 2.0, "min": 2.0, "max": 2.0, "each": [2.0, 2.0]}}


def test_a_failing_variant_is_reported_and_the_others_go_on(tmp_path: Path, monkeypatch, capsys) -> None:
    calls: list[tuple[str, list[str]]] = []

    def fake(args, flags, out_dir):
        calls.append((out_dir.name, flags))
        if "--broken" in flags:
            raise RuntimeError("exit status 2")
        return {"steps": 5.0, "time/step": 2.0 if not flags else 1.0, "time/rollouts": 1.0, "time/train": 0.5}, 10.0

    monkeypatch.setattr(bench, "run_one", fake)
    monkeypatch.syspath_prepend(str(Path(bench.__file__).parent))  # (its machine() imports a sibling, as run)
    out = tmp_path / "r.json"
    report = bench.main(
        [
            "--rounds",
            "2",
            "--variant",
            "base=",
            "--variant",
            "fast=--x 1",
            "--variant",
            "bad=--broken",
            "--out",
            str(out),
        ]
    )
    assert [name for name, _ in calls] == [
        "base-round1",
        "fast-round1",
        "bad-round1",
        "base-round2",
        "fast-round2",
        "bad-round2",
    ]
    assert calls[1][1] == ["--x", "1"]
    assert report["step_time_ratio"] == {"fast": {"median": 2.0, "min": 2.0, "max": 2.0, "each": [2.0, 2.0]}}
    saved = json.loads(out.read_text())
    assert saved["variants"]["bad"]["each_round"] == [{}, {}] and saved["machine"]["cpus"] >= 1
    assert saved["machine"]["versions"]["torch"] and not list(tmp_path.glob("*.part"))
    printed = capsys.readouterr().out
    assert "round 1 bad: failed: exit status 2" in printed and "bad: no round completed (0 of 2 rounds)" in printed
    assert "base / fast step time: 2.000x [2.000-2.000] over 2 rounds" in printed


@pytest.mark.parametrize(
    ("argv", "reason"),
    [
        (["--variant", "a=", "--variant", "a=--x"], "variant names must differ"),
        (["--variant", "noequals"], "a variant is NAME=FLAGS"),
        (["--variant", "../up=--x"], "a variant is NAME=FLAGS"),
        (["--variant", "a=", "--skip", "16"], "leaves none of 16 steps"),
        (["--variant", "a=", "--rounds", "0"], "--rounds must be at least 1"),
    ],
)
def test_bad_arguments_are_refused(argv: list[str], reason: str, capsys) -> None:
    with pytest.raises(SystemExit):
        bench.main(argv)
    assert reason in capsys.readouterr().err


def test_a_folder_that_already_holds_its_runs_is_refused(tmp_path: Path, capsys) -> None:
    (tmp_path / "a-round2").mkdir()
    with pytest.raises(SystemExit):
        bench.main(["--variant", "a=", "--variant", "b=", "--keep", str(tmp_path)])
    assert "already holds runs of ['a']" in capsys.readouterr().err


def test_a_variants_leading_assignments_are_its_environment(tmp_path: Path, monkeypatch) -> None:
    """`heap="MALLOC_TRIM_THRESHOLD_=1073741824 --seed 3"`: the assignment reaches the run's
    environment, not its command line; the flags after it stay flags."""
    seen: dict = {}

    def fake_run(command, **kwargs):
        seen.update(command=command, env=kwargs["env"])
        out = Path(command[command.index("--output-dir") + 1])
        out.mkdir(parents=True)
        (out / "metrics.csv").write_text("step,time/step\n1,3.0\n2,2.0\n")
        return subprocess.CompletedProcess(command, 0)

    monkeypatch.setattr(bench.subprocess, "run", fake_run)
    args = argparse.Namespace(
        model="m", steps=2, batch_size=8, seed=1, extra="", skip=1, py_spy=None, py_spy_idle=False
    )
    _, flags = bench.parse_variant("heap=MALLOC_TRIM_THRESHOLD_=1073741824 --seed 3")
    found, _ = bench.run_one(args, flags, tmp_path / "heap-round1")
    assert found["time/step"] == 2.0
    assert seen["env"]["MALLOC_TRIM_THRESHOLD_"] == "1073741824" and seen["env"]["PYTHONUNBUFFERED"] == "1"
    assert seen["command"][-2:] == ["--seed", "3"] and not any("MALLOC" in c for c in seen["command"])
    assert seen["command"][0] != "py-spy"
    args.py_spy = tmp_path / "spy"  # the same run under py-spy, its stacks named after the run
    bench.run_one(args, flags, tmp_path / "spied-round1")
    at = seen["command"].index("--")
    assert seen["command"][:3] == ["py-spy", "record", "--gil"]
    assert seen["command"][seen["command"].index("-o") + 1] == str(tmp_path / "spy" / "spied-round1.txt")
    assert seen["command"][at + 2 : at + 4] == ["-m", "rlvr.cli"] and (tmp_path / "spy").is_dir()
