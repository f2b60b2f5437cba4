"""Progress where nobody sees a bar: plain lines when stdout is not a terminal, none under -q,
and no third-party loading bars under -q or off a terminal."""

from __future__ import annotations

import io
import os

import pytest

from rlvr.cli import main
from rlvr.progress import Progress


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_plain_lines_every_tenth_after_a_quiet_spell_and_at_the_end() -> None:
    out, clock = io.StringIO(), Clock()
    with Progress("rollouts", 25, stream=out, clock=clock, heartbeat=False) as progress:  # every = 25 // 10 = 2
        for i in range(25):
            clock.now += 1.0 if i != 4 else 40.0  # the fifth item comes after a 40 s wait
            progress.advance(status=f"reward {i / 10:.1f}")
    lines = out.getvalue().splitlines()
    counts = [int(line.split()[1].split("/")[0]) for line in lines]
    assert counts == [2, 4, 5, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 25]
    assert lines[2] == "rollouts 5/25 (20%)  reward 0.4  44 s"
    assert lines[-1] == "rollouts 25/25 (100%)  reward 2.4  64 s"


def test_no_total_gives_a_count_every_interval() -> None:
    """A walk whose size is found as it goes (the exact evaluation's game tree): no percentage,
    no count-based lines, a line at the first item `interval_s` after the last one."""
    out, clock = io.StringIO(), Clock()
    with Progress("games played", None, stream=out, clock=clock, heartbeat=False) as progress:
        for _ in range(100):
            clock.now += 1.0  # one game a second
            progress.advance()
    assert out.getvalue().splitlines() == [f"games played {n}  {n} s" for n in (30, 60, 90)]


def test_resumed_counts_and_quiet() -> None:
    out = io.StringIO()
    with Progress("sft step", 4, completed=2, stream=out, every=10) as progress:
        progress.advance()
        progress.advance()
    assert out.getvalue().splitlines() == ["sft step 4/4 (100%)  0 s"]
    quiet = io.StringIO()
    with Progress("rollouts", 3, quiet=True, stream=quiet) as progress:
        for _ in range(3):
            progress.advance()
    assert quiet.getvalue() == ""


def test_eval_prints_plain_progress_when_not_on_a_terminal(capsys, tmp_path) -> None:
    pytest.importorskip("reverse_text")
    assert main(["eval", "reverse_text", "-m", "policy:oracle", "-n", "5", "-r", "2", "-o", str(tmp_path / "a")]) == 0
    lines = capsys.readouterr().out.splitlines()
    progress = [line for line in lines if line.startswith("rollouts ")]
    assert progress[0].startswith("rollouts 1/10 (10%)  reward 1.000")
    assert progress[-1].startswith("rollouts 10/10 (100%)  reward 1.000") and len(progress) == 10
    assert main(["eval", "reverse_text", "-m", "policy:oracle", "-n", "5", "-q", "-o", str(tmp_path / "b")]) == 0
    assert not [line for line in capsys.readouterr().out.splitlines() if line.startswith("rollouts ")]


@pytest.fixture
def bars_on():
    """Hugging Face's bars on (an earlier in-process command may have turned them off), as they
    were afterwards."""
    pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from huggingface_hub.utils import are_progress_bars_disabled, disable_progress_bars, enable_progress_bars

    if os.environ.get("HF_HUB_DISABLE_PROGRESS_BARS"):
        pytest.skip("HF_HUB_DISABLE_PROGRESS_BARS is set: no bar to silence")
    were_off = are_progress_bars_disabled()

    def turn_on() -> None:
        enable_progress_bars()
        transformers.utils.logging.enable_progress_bar()

    turn_on()
    yield turn_on
    if were_off:
        disable_progress_bars()
    transformers.utils.logging.enable_progress_bar()


def test_loading_bars_show_on_a_terminal_only_and_never_under_quiet(bars_on, capfd, monkeypatch, tmp_path) -> None:
    pytest.importorskip("reverse_text")
    from rlvr.models import build_tiny_model

    model_dir = build_tiny_model(tmp_path / "tiny")
    argv = ["eval", "reverse_text", "-m", str(model_dir), "-n", "1", "-r", "1", "-t", "2"]
    capfd.readouterr()
    assert main([*argv, "-o", str(tmp_path / "log")]) == 0  # stderr captured: not a terminal
    assert "Loading weights" not in capfd.readouterr().err
    bars_on()
    monkeypatch.setattr("rlvr.cli._stderr_is_terminal", lambda: True)
    assert main([*argv, "-o", str(tmp_path / "terminal")]) == 0
    assert "Loading weights" in capfd.readouterr().err
    bars_on()
    assert main([*argv, "-q", "-o", str(tmp_path / "quiet")]) == 0
    assert "Loading weights" not in capfd.readouterr().err


def test_model_new_prints_one_line_and_nothing_with_quiet(bars_on, capfd, tmp_path) -> None:
    assert main(["model", "new", "-o", str(tmp_path / "loud")]) == 0
    out, err = capfd.readouterr()
    assert out.startswith("saved tiny model to ") and len(out.splitlines()) == 1, out
    assert err == ""  # not a terminal: no "Writing model shards" or "Loading weights" bar
    bars_on()
    assert main(["model", "new", "-q", "-o", str(tmp_path / "quiet")]) == 0
    assert capfd.readouterr() == ("", "")
    assert (tmp_path / "quiet" / "config.json").is_file()


def test_a_heartbeat_line_comes_while_no_item_finishes() -> None:
    """Items slower than the interval (rollouts finishing together, a CPU training step): the
    heartbeat prints the line anyway, with what `activity` says moved meanwhile."""
    import time

    out, calls = io.StringIO(), []

    def activity() -> str:
        calls.append(1)
        return f"turns {len(calls)} done"

    with Progress("rollouts", 2, stream=out, interval_s=0.05, activity=activity) as progress:
        time.sleep(0.6)  # nothing finishes for 12 intervals
        progress.advance(status="reward 1.000")
    lines = out.getvalue().splitlines()
    waiting = [line for line in lines if line.startswith("rollouts 0/2 (0%)  turns ")]
    assert len(waiting) >= 3, lines
    assert lines[-1].startswith("rollouts 1/2 (50%)  reward 1.000  turns "), lines
    quiet = io.StringIO()
    with Progress("rollouts", 2, stream=quiet, interval_s=0.05, quiet=True, activity=activity):
        time.sleep(0.2)
    assert quiet.getvalue() == ""


def test_eval_with_a_slow_client_prints_turns_before_any_rollout_ends(capsys, monkeypatch, tmp_path) -> None:
    """A model slower than the interval: lines come while no rollout has finished, and they count
    the model's turns (the engine does not know about progress: the command counts them)."""
    import asyncio

    import rlvr.progress
    import rlvr.registry
    from rlvr import Policy, Rubric, SingleTurnEnv

    def done(completion) -> float:
        return 1.0

    def load(name, **env_args):
        env = SingleTurnEnv([{"id": "0", "question": "q", "answer": "a"}], rubric=Rubric([done]))

        async def slow(messages, rng):
            await asyncio.sleep(0.6)
            return "a"

        env.policies = lambda: {"slow": lambda: Policy(slow, name="slow")}
        env.name, env.env_args = name, dict(env_args)
        return env

    monkeypatch.setattr(rlvr.registry, "load_environment", load)
    monkeypatch.setattr(rlvr.progress, "INTERVAL_S", 0.1)
    for command, extra in (("eval", ["-n", "1", "-r", "2"]), ("gen", ["-n", "1", "-r", "2"])):
        out = tmp_path / command
        argv = [
            command,
            "slow",
            "-m",
            "policy:slow",
            *extra,
            "-o",
            str(out / "data.jsonl" if command == "gen" else out),
        ]
        assert main(argv) == 0
        lines = capsys.readouterr().out.splitlines()
        waiting = [line for line in lines if line.startswith("rollouts 0/2 (0%)  turns 0 done, 2 in flight")]
        assert len(waiting) >= 2, (command, lines)
