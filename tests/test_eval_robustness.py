"""`rlvr eval` against hostile rewards, huge runs, signals and bad paths: the run finishes (or
stops with one line saying how to resume), and its summary and files stay right."""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import logging
import math
import os
import re
import signal
import subprocess
import sys
import time

import pytest
from child_process import default_sigint

import rlvr.cli
import rlvr.registry
import rlvr.results
import rlvr.summary
from rlvr import Policy, Rubric, SingleTurnEnv
from rlvr.cli import main
from rlvr.errors import UsageError
from rlvr.summary import Summary, summarize
from rlvr.types import Rollout, SamplingArgs


def exact(completion, answer) -> float:
    return float(completion[-1]["content"] == answer)


def huge(completion) -> float:
    """A logged metric (weight 0) of absurd size."""
    return 1e308 if completion[-1]["content"].startswith("1") else -1e308


def not_a_number() -> float:
    return math.nan


def answer(messages, rng) -> str:
    return messages[-1]["content"] if int(messages[-1]["content"]) % 3 else "wrong"


@pytest.fixture
def envs(monkeypatch):
    """`plain` (n tasks, exact answer), `hostile` (plus metrics of 1e308 and NaN) and `counted`
    (plus a summary of its own that counts what it was given), each with the reference player
    `policy:echo`."""

    def load(name, n: int = 20):
        rows = [{"id": str(i), "question": str(i), "answer": str(i)} for i in range(n)]
        if name == "plain":
            env = SingleTurnEnv(rows, rubric=Rubric([exact]))
        elif name == "hostile":
            env = SingleTurnEnv(rows, rubric=Rubric([exact, huge, not_a_number], weights=[1.0, 0.0, 0.0]))
        elif name == "counted":  # its own summary, set on the instance as `policies` is
            env = SingleTurnEnv(rows, rubric=Rubric([exact]))
            env.summarize = lambda rollouts: {"rollouts_seen": float(len(rollouts))}
        else:
            raise AssertionError(name)
        env.policies = lambda: {"echo": lambda: Policy(answer, name="echo")}
        env.name, env.env_args = name, {"n": n}
        return env

    monkeypatch.setattr(rlvr.registry, "load_environment", load)


def eval_argv(env: str, out, *extra: str) -> list[str]:
    return ["eval", env, "-m", "policy:echo", "-n", "-1", "-r", "2", "-q", "-o", str(out), *extra]


# ---- any float --------------------------------------------------------------------------------


def test_huge_and_nan_metrics_keep_rollouts_and_the_summary_survives(envs, tmp_path, capsys) -> None:
    """1e308 from a weight-0 metric crashed the summary (OverflowError in fsum); NaN from one
    turned every rollout into an error record and wrote bare NaN into results.jsonl."""
    assert main(eval_argv("hostile", tmp_path / "run")) == 0
    printed = capsys.readouterr().out
    assert "saved 40 rollouts" in printed and "errors: 0 (none)" in printed
    assert "reward (total)" in printed and "0.6" in printed  # 2 in 3 answers are right
    records = [json.loads(line) for line in (tmp_path / "run" / "results.jsonl").read_text().splitlines()]
    assert all(r["error"] is None and r["nonfinite"] == {"/rewards/not_a_number": "nan"} for r in records)
    s = summarize(rlvr.results.RunDir.open(tmp_path / "run").read(), 2, {"exact": 1.0, "huge": 0.0})
    ups = sum(answer([{"content": str(i)}], None).startswith("1") for i in range(20))  # 8 of 20
    assert s["rewards"]["huge"]["mean"] == pytest.approx((2 * ups - 20) / 20 * 1e308)
    assert math.isfinite(s["rewards"]["huge"]["std"]) and math.isnan(s["rewards"]["not_a_number"]["mean"])
    assert s["pass_at_k"]["exact"]["pass@1"] == pytest.approx(13 / 20)


@pytest.mark.parametrize(
    "values",
    [
        [1e308, 1e308, 1e308],
        [1.7976931348623157e308, -1.7976931348623157e308],
        [5e-324, 1e308, -5e-324],
        [math.inf, 1.0],
        [math.inf, -math.inf],
        [math.nan, 1e308],
        [0.1] * 10_000,
    ],
)
def test_summary_stats_survive_any_float(values) -> None:
    s = Summary()
    for i, v in enumerate(values):
        s.add(Rollout(task_id=str(i), rollout_index=0, seed=0, prompt=[], rewards={"r": v}, reward=v))
    result = s.result()
    finite = [v for v in values if math.isfinite(v)]
    mean, std = result["reward"]["mean"], result["reward"]["std"]
    if len(finite) == len(values):
        exact_mean = sum(v / 4 for v in values) / len(values) * 4
        assert mean == pytest.approx(exact_mean, rel=1e-12) and math.isfinite(std)
    else:
        assert math.isnan(std) and (math.isnan(mean) or math.isinf(mean))
    assert rlvr.summary.histogram(s.scored_rewards) or not finite
    rlvr.summary.print_summary(s, title="hostile")  # prints, never raises


# ---- memory -----------------------------------------------------------------------------------


def test_eval_keeps_no_rollout_in_memory(envs, tmp_path, monkeypatch, capsys) -> None:
    """Memory grew with the number of rollouts (348 MB for 50,000): every rollout was kept for
    the summary. Now at most the ones in flight are alive, at any point of the run."""
    live: list[int] = []
    real_append = rlvr.results.RunDir.append

    def append(self, rollout) -> None:
        real_append(self, rollout)
        if rollout.task_id.endswith(("499", "999")):  # a full collection is slow late in a suite: 12 of them
            gc.collect()
            live.append(sum(type(o) is Rollout for o in gc.get_objects()))

    monkeypatch.setattr(rlvr.results.RunDir, "append", append)
    assert main(eval_argv("plain", tmp_path / "run", "-a", '{"n": 3000}', "-c", "8")) == 0
    assert "saved 6000 rollouts" in capsys.readouterr().out
    assert len(live) == 12 and max(live) < 20, live


def test_an_env_summary_set_on_the_instance_still_sees_every_rollout(envs, tmp_path, capsys) -> None:
    """Keeping no rollouts must not starve an environment's own summary, wherever it is defined:
    one set on the instance (not the class) was handed None and its numbers went missing."""
    assert main(eval_argv("counted", tmp_path / "run")) == 0
    printed = capsys.readouterr().out
    assert re.search(r"rollouts_seen\s+│\s+40\.000", printed), printed


# ---- sampling values ----------------------------------------------------------------------------


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "-1"])
def test_non_finite_sampling_values_are_one_line_errors(envs, tmp_path, capsys, value) -> None:
    """`-T nan` was accepted (and sent to the model as such)."""
    for argv in (
        eval_argv("plain", tmp_path / "e", f"-T={value}"),
        ["gen", "plain", "-m", "policy:echo", f"-T={value}", "-o", str(tmp_path / "g.jsonl")],
        ["train", "plain", "--model", str(tmp_path), f"--temperature={value}", "--output-dir", str(tmp_path / "t")],
    ):
        assert main(argv) == 1
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "finite number" in err and value in err, err
    assert not (tmp_path / "e").exists() and not (tmp_path / "g.jsonl").exists() and not (tmp_path / "t").exists()


@pytest.mark.parametrize(
    ("field", "value"), [("temperature", math.nan), ("temperature", math.inf), ("top_p", math.nan), ("max_tokens", 0)]
)
def test_sampling_args_refuse_values_no_backend_samples_with(field, value) -> None:
    with pytest.raises(UsageError, match=f"sampling {field} must be"):
        SamplingArgs(**{field: value})
    sampling = SamplingArgs()
    setattr(sampling, field, value)  # set later, past the constructor: the backend checks again
    with pytest.raises(UsageError, match=f"sampling {field} must be"):
        sampling.check()


def test_local_model_refuses_a_nan_temperature_set_after_construction(tmp_path) -> None:
    pytest.importorskip("torch")
    from rlvr.clients.local import LocalModel
    from rlvr.models import build_tiny_model

    model = LocalModel(str(build_tiny_model(tmp_path / "tiny", preset="tiny")), device="cpu")
    sampling = SamplingArgs(max_tokens=4)
    sampling.temperature = math.nan
    with pytest.raises(UsageError, match="sampling temperature must be a finite number >= 0, got nan"):
        asyncio.run(model.chat([{"role": "user", "content": "hi"}], sampling))
    asyncio.run(model.aclose())


# ---- signals ------------------------------------------------------------------------------------


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_mid_run_is_recorded_and_the_run_resumes(tmp_path, sig) -> None:
    """SIGTERM left metadata.json at "running" and printed a traceback; Ctrl-C did not say how
    to go on. Both now end with one line naming --resume, and the resumed run loses nothing."""
    pytest.importorskip("reverse_text")
    tasks = 3000  # about 2 s of oracle rollouts
    out = tmp_path / "run"
    argv = [sys.executable, "-m", "rlvr.cli", "eval", "reverse_text", "-m", "policy:oracle", "-a"]
    argv += [json.dumps({"eval_tasks": tasks}), "-n", "-1", "-r", "1", "-c", "4", "-q", "-o", str(out)]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=default_sigint)
    results = out / "results.jsonl"
    deadline = time.monotonic() + 60
    while not (results.exists() and results.stat().st_size > 2_000) and time.monotonic() < deadline:
        time.sleep(0.05)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + sig, err
    assert err.strip().splitlines()[-1].endswith("; to continue, run the same command with --resume"), err
    assert "Traceback" not in err
    assert json.loads((out / "metadata.json").read_text())["status"] == "interrupted"
    kept = len(results.read_bytes().splitlines())
    assert 0 < kept < tasks
    done = subprocess.run(argv + ["--resume"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    keys = [(r["task_id"], r["rollout_index"]) for r in map(json.loads, results.read_text().splitlines())]
    assert len(keys) == len(set(keys)) == tasks
    assert json.loads((out / "metadata.json").read_text())["status"] == "complete"


def test_sigterm_with_sandboxed_calls_in_flight_is_one_line(monkeypatch, capsys, caplog) -> None:
    """With sandboxed calls in flight (python_math's tool), SIGTERM printed 34-66 lines of
    tracebacks around its one line: cancelled pipe reads ("exception was never retrieved"),
    subprocess transports freed after the event loop closed, child watchers finding it closed."""
    from rlvr.sandbox import SandboxLimits, SandboxUnavailableError, run_python

    try:
        asyncio.run(run_python("pass"))
    except SandboxUnavailableError as exc:
        pytest.skip(str(exc))
    limits = SandboxLimits(timeout_s=60)

    async def work() -> None:
        async def signal_soon() -> None:
            await asyncio.sleep(1.5)  # the calls are running
            os.kill(os.getpid(), signal.SIGTERM)

        await asyncio.gather(*(run_python("import time; time.sleep(30)", limits) for _ in range(4)), signal_soon())

    def parser() -> argparse.ArgumentParser:
        p = argparse.ArgumentParser()
        p.set_defaults(command="eval", run=lambda args: asyncio.run(work()), resume=False)
        return p

    monkeypatch.setattr(rlvr.cli, "build_parser", parser)
    monkeypatch.setattr(sys, "unraisablehook", sys.unraisablehook)  # (restored after the test)
    start = time.monotonic()
    assert main([]) == 128 + signal.SIGTERM
    gc.collect()
    assert time.monotonic() - start < 20
    assert (
        capsys.readouterr().err == "rlvr eval: terminated (SIGTERM); to continue, run the same command with --resume\n"
    )
    assert not caplog.records, [r.getMessage() for r in caplog.records]
    assert not logging.getLogger("asyncio").disabled  # (logging again for whatever runs next)


HUNG_SHUTDOWN = """
import argparse, asyncio, os, signal, sys
import rlvr.cli

async def stuck() -> None:  # as a sandboxed call cancelled while its process started: it never ends
    never = asyncio.get_running_loop().create_future()
    while True:
        try:
            await never
        except asyncio.CancelledError:
            pass

async def work() -> None:
    asyncio.get_running_loop().call_later(0.2, os.kill, os.getpid(), signal.SIGTERM)
    await stuck()

def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser()
    p.set_defaults(command="eval", run=lambda args: asyncio.run(work()), resume=False)
    return p

rlvr.cli.build_parser, rlvr.cli.TEARDOWN_S = parser, 1.0
sys.exit(rlvr.cli.main([]))
"""


def test_a_shutdown_that_hangs_after_sigterm_still_ends_with_one_line() -> None:
    """A sandboxed call cancelled while its process was being started hung `asyncio.run`'s
    shutdown for good (CPython 3.11 waits for pipes never connected): SIGTERM never ended
    `rlvr eval` (1 run in 5 at one moment of a python_math run). Now the shutdown has a deadline."""
    start = time.monotonic()
    done = subprocess.run([sys.executable, "-c", HUNG_SHUTDOWN], capture_output=True, text=True, timeout=60)
    assert done.returncode == 128 + signal.SIGTERM and time.monotonic() - start < 30, done.stderr
    assert done.stderr == (
        "rlvr eval: terminated (SIGTERM); to continue, run the same command with --resume "
        "(shutting down took over 1 s: stopped)\n"
    )


def test_sigterm_inside_a_task_cancels_every_task_and_leaves_nothing_behind(monkeypatch, capsys, caplog) -> None:
    """A SIGTERM that landed while a task ran was raised inside that task: the other tasks were
    not cancelled and "Task exception was never retrieved" with a traceback followed the one
    line (1 run in 10 of the SIGTERM test above). Now every task is cancelled, then
    SIGTERM's one line."""
    seen: list[str] = []

    async def task(name: str, signal_it: bool) -> None:
        try:
            if signal_it:
                os.kill(os.getpid(), signal.SIGTERM)  # the handler runs here, inside this task
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            await asyncio.sleep(0)  # cleanup that awaits, as closing a client does
            seen.append(f"{name} cancelled")
            raise

    async def work() -> None:
        await asyncio.gather(task("other", False), task("main", True))

    def parser() -> argparse.ArgumentParser:
        p = argparse.ArgumentParser()
        p.set_defaults(command="eval", run=lambda args: asyncio.run(work()), resume=False)
        return p

    monkeypatch.setattr(rlvr.cli, "build_parser", parser)
    start = time.monotonic()
    assert main([]) == 128 + signal.SIGTERM
    gc.collect()
    assert time.monotonic() - start < 10 and sorted(seen) == ["main cancelled", "other cancelled"]
    assert (
        capsys.readouterr().err == "rlvr eval: terminated (SIGTERM); to continue, run the same command with --resume\n"
    )
    assert not caplog.records, [r.getMessage() for r in caplog.records]


# ---- model paths ------------------------------------------------------------------------------


def test_a_mistyped_model_folder_is_not_sent_to_an_api(envs, tmp_path, monkeypatch, capsys) -> None:
    """`-m ./no/such/dir` went to the default API host as a model name."""
    (tmp_path / "models").mkdir()
    (tmp_path / "a_file").write_text("x")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-0123456789")  # an API client would be made, and called
    for model, what in [
        ("./no/such/dir", "does not exist"),
        (str(tmp_path / "gone"), "does not exist"),
        ("~/rlvr-no-such-model", "does not exist"),
        ("runs/sft/final", "does not exist"),
        ("models/tictactoe-tinyy", "does not exist"),
        ("./a_file", "is a file, not a model folder"),
    ]:
        assert main(["eval", "plain", "-m", model, "-o", str(tmp_path / "out")]) == 1
        err = capsys.readouterr().err
        assert err == f"rlvr eval: error: model folder {model} {what}; pass a folder written by " + (
            "save_pretrained, or -b URL to use an API model of that name\n"
        )
    assert not (tmp_path / "out").exists()
