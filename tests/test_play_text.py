"""`rlvr play ENV` as a text conversation: a person (a script here) types the model's turns."""

from __future__ import annotations

import asyncio
import builtins

from rlvr import Rubric, SamplingArgs, ToolEnv
from rlvr.cli import main
from rlvr.commands.play_text import Person, play_episode
from rlvr.commands.terminal import Terminal
from rlvr.registry import load_environment


def feed(monkeypatch, lines):
    """Answer input() from `lines`; an exception in the list is raised instead; then EOF."""
    it = iter(lines)

    def fake_input(prompt: str = "") -> str:
        item = next(it, EOFError())
        if isinstance(item, BaseException):
            raise item
        return item

    monkeypatch.setattr(builtins, "input", fake_input)


def eval_task(env_name: str, index: int = 0):
    return load_environment(env_name).tasks("eval")[index]


def test_single_turn_env_multi_line_reply_is_scored(monkeypatch, capsys):
    task = eval_task("reverse_text")
    reversed_text = task.answer
    feed(
        monkeypatch,
        ["<think>", "read it backwards", "</think>", f"<reversed_text>{reversed_text}</reversed_text>", "."],
    )
    code = main(["play", "reverse_text", "--task", task.id, "--games", "1"])
    out = capsys.readouterr().out
    assert code == 0
    assert "Reverse the text the user sends" in out  # the system prompt is shown
    assert "reward 1.000 (answered, terminated)" in out
    assert "format_reward  1.000  x 0 (a metric, not in the total)" in out
    assert "episodes 1, mean reward 1.000" in out


def test_multi_turn_env_with_show_and_ctrl_d_ending_a_reply(monkeypatch, capsys):
    task = eval_task("double_check", 3)
    answer = f"<answer>{task.answer}</answer>"
    wrong = f"<answer>{int(task.answer) + 1}</answer>"
    # First reply ends with ".", then /show, then the second reply ends at end of input.
    feed(monkeypatch, [answer, ".", "/show", wrong, EOFError()])
    code = main(["play", "double_check", "--task", task.id, "--games", "1"])
    out = capsys.readouterr().out
    assert code == 0
    assert "Are you sure?" in out and "the conversation so far" in out
    assert answer in out.split("the conversation so far", 1)[1]  # /show includes the person's reply
    assert "reward 0.000 (second_answer, terminated)" in out  # talked out of the right answer
    assert "first_answer_correct  1.000" in out and "changed_answer        1.000" in out


def test_watching_a_model_play(monkeypatch, capsys):
    task = eval_task("double_check")
    feed(monkeypatch, ["", "/show", ""])
    code = main(["play", "double_check", "-m", "policy:oracle", "--task", task.id, "--games", "1"])
    out = capsys.readouterr().out
    assert code == 0 and "policy:oracle plays" in out
    assert out.count("─ assistant ─") >= 3  # two turns, and the first again in /show
    assert "reward 1.000 (second_answer, terminated)" in out


def test_quit_and_end_of_input_exit_cleanly(monkeypatch, capsys):
    for lines in (["/quit"], [], [KeyboardInterrupt()]):
        feed(monkeypatch, lines)
        assert main(["play", "reverse_text", "--seed", "0"]) == 0
        out = capsys.readouterr().out
        assert "bye" in out and "reward" not in out


def test_unknown_task_is_one_line(capsys):
    assert main(["play", "reverse_text", "--task", "nope"]) == 1
    assert "no eval task with id 'nope'" in capsys.readouterr().err


def add(a: int, b: int) -> int:
    """Add two numbers.

    Args:
        a: first
        b: second
    """
    return a + b


def said_five(completion) -> float:
    return float(completion[-1]["content"].strip() == "5")


def test_tool_env_shows_schemas_and_takes_typed_calls(monkeypatch, capsys):
    from rich.console import Console

    env = ToolEnv([{"question": "What is 2 + 3? Use the tool."}], tools=[add], rubric=Rubric([said_five]))
    feed(
        monkeypatch,
        [
            '{"name": "add", "arguments": {"a": 2, "b": "x"}}',  # a bad argument: the env says so
            ".",
            '<tool_call>{"name": "add", "arguments": {"a": 2, "b": 3}}</tool_call>',
            ".",
            "5",
            ".",
        ],
    )
    terminal = Terminal(Console(width=200, highlight=False))
    task = env.tasks()[0]
    rollout = asyncio.run(play_episode(env, Person(terminal), task, 0, SamplingArgs()))
    out = capsys.readouterr().out
    assert "add(a: integer, b: integer)  Add two numbers." in out
    assert '<tool_call>{"name": "add", "arguments": {"a": "...", "b": "..."}}</tool_call>' in out
    assert "─ tool (call_1_0) ─" in out and "Error:" in out  # the first call's error, then 5
    assert rollout.reward == 1.0 and [len(t.completion.tool_calls) for t in rollout.turns] == [1, 1, 0]
    assert "reward 1.000 (no_tool_call, terminated)" in out


def test_a_person_has_no_deadline(monkeypatch, capsys):
    import time

    import rlvr.registry

    # The tool runs in a thread: the first await after a slow reply, where a deadline would fire.
    env = ToolEnv([{"question": "2 + 3?"}], tools=[add], rubric=Rubric([said_five]), timeout_s=0.001)
    monkeypatch.setattr(rlvr.registry, "load_environment", lambda name, **kw: env)
    replies = iter(['{"name": "add", "arguments": {"a": 2, "b": 3}}', ".", "5", "."])

    def slow_input(prompt: str = "") -> str:
        time.sleep(0.01)  # ten times the env's timeout_s
        return next(replies)

    monkeypatch.setattr(builtins, "input", slow_input)
    assert main(["play", "sum", "--games", "1"]) == 0
    assert "reward 1.000 (no_tool_call, terminated)" in capsys.readouterr().out


def test_real_stdin_in_a_subprocess():
    import subprocess
    import sys

    task = eval_task("reverse_text", 2)
    reply = f"<reversed_text>{task.answer}</reversed_text>\n.\n"
    proc = subprocess.run(
        [sys.executable, "-m", "rlvr.cli", "play", "reverse_text", "--task", task.id],
        check=False,
        input=reply,  # then end of input at "Play again?": quits
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert "reward 1.000 (answered, terminated)" in proc.stdout and "bye" in proc.stdout
    assert "Traceback" not in proc.stderr


def test_message_text_and_titles_are_shown_literally():
    import io

    from rich.console import Console

    out = io.StringIO()
    Terminal(Console(file=out, width=80)).say("task [b]1[/b]", "a list [1, 2] and [red]x[/red]")
    assert "task [b]1[/b]" in out.getvalue() and "a list [1, 2] and [red]x[/red]" in out.getvalue()
