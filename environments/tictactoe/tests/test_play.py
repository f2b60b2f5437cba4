"""`rlvr play tictactoe`: a person (a script here) against a reference player in the terminal."""

from __future__ import annotations

import asyncio
import builtins
import itertools
import os
import random
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from rlvr_tictactoe import load_environment
from rlvr_tictactoe.game import optimal_player, parse_board

from rlvr import Policy
from rlvr.cli import main
from rlvr.commands.terminal import Terminal


def feed(monkeypatch, lines):
    """Answer input() from `lines`; an exception in it is raised instead."""
    it = iter(lines)

    def fake_input(prompt: str = "") -> str:
        item = next(it)
        if isinstance(item, BaseException):
            raise item
        return item

    monkeypatch.setattr(builtins, "input", fake_input)


def cycle_cells():
    """A player who tries 0, 1, ... 8 over and over: taken cells get re-prompted."""
    return itertools.cycle([str(i) for i in range(9)])


def test_a_full_game_with_bad_input_reprompted(monkeypatch, capsys):
    feed(monkeypatch, itertools.chain(["hello", "42"], cycle_cells()))
    code = main(["play", "tictactoe", "-m", "policy:optimal", "--first", "me", "--games", "1", "--seed", "3"])
    out = capsys.readouterr().out
    assert code == 0
    assert "'hello' is not a free cell" in out and "'42' is not a free cell" in out
    assert "You move first." in out and "Model: Minimax" in out  # the model's reasoning is shown
    assert "you won 0" in out  # the optimal player never loses
    assert ("The model wins." in out) or ("Draw." in out)


def test_the_person_can_be_x_and_the_model_starts(monkeypatch, capsys):
    feed(monkeypatch, cycle_cells())
    code = main(
        ["play", "tictactoe", "-m", "policy:random", "--as", "X", "--first", "model", "--games", "2", "--seed", "1"]
    )
    out = capsys.readouterr().out
    assert code == 0 and "you are X, the model is O" in out
    before = out.split("The model took", 1)[0].replace("│", "")
    board = parse_board(before)
    assert board.count("O") == 1 and board.count("X") == 0  # the model's first move, drawn as O
    assert out.count("you won") == 2  # one tally line per game


def test_occupied_cell_is_refused(monkeypatch, capsys):
    # The person starts on 4, then tries 4 again: it is taken now.
    feed(monkeypatch, itertools.chain(["4", "4"], cycle_cells()))
    main(["play", "tictactoe", "-m", "policy:teacher", "--first", "me", "--games", "1"])
    assert "'4' is not a free cell" in capsys.readouterr().out


@pytest.mark.parametrize("stop", [KeyboardInterrupt(), EOFError(), "q"])
def test_ctrl_c_ctrl_d_and_q_exit_cleanly(monkeypatch, capsys, stop):
    feed(monkeypatch, ["0", stop])
    code = main(["play", "tictactoe", "-m", "policy:optimal", "--first", "me"])
    assert code == 0 and "bye" in capsys.readouterr().out


def test_play_again_prompt(monkeypatch, capsys):
    from rich.console import Console

    cells, again = cycle_cells(), iter(["maybe", "y", "no"])

    def fake_input(self, prompt: str = "") -> str:
        self.print(prompt, end="")
        return next(again) if prompt.startswith("Play again") else next(cells)

    monkeypatch.setattr(Console, "input", fake_input)
    code = main(["play", "tictactoe", "-m", "policy:optimal", "--first", "random"])
    out = capsys.readouterr().out
    assert code == 0 and "answer y or n" in out and out.count("you won") == 2


def test_text_play_of_tictactoe_watches_the_model(monkeypatch, capsys):
    # --text: the generic conversation even though tic-tac-toe has a game screen.
    feed(monkeypatch, itertools.repeat(""))
    code = main(["play", "tictactoe", "-m", "policy:optimal", "--text", "--games", "1", "--seed", "0"])
    out = capsys.readouterr().out
    assert code == 0 and "policy:optimal plays" in out and "─ assistant ─" in out
    assert "reward " in out and "episodes 1, mean reward" in out


def test_terminal_reprompts_until_parse_accepts(monkeypatch):
    from rich.console import Console

    feed(monkeypatch, ["a", "b", "7"])
    term = Terminal(Console(file=open(os.devnull, "w")))  # noqa: SIM115

    def parse(text: str) -> int:
        if not text.isdigit():
            raise ValueError("digits only")
        return int(text)

    assert term.ask("n", parse) == 7
    term.console.file.close()


def test_scripted_stdin_in_a_subprocess():
    root = Path(__file__).resolve().parents[3]
    moves = "\n".join(str(i) for i in range(9)) * 3 + "\n"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "rlvr.cli",
            "play",
            "tictactoe",
            "-m",
            "policy:optimal",
            "--first",
            "me",
            "--games",
            "1",
        ],
        check=False,
        input=moves,
        capture_output=True,
        text=True,
        timeout=60,
        cwd=root,
    )
    assert proc.returncode == 0, proc.stderr
    assert "you won 0" in proc.stdout and "Traceback" not in proc.stderr


def test_one_ctrl_c_while_waiting_for_a_move_exits():
    """A real SIGINT with stdin still open (as in a terminal): asyncio.run's own SIGINT
    handler would swallow the first Ctrl-C while input() blocks; play must exit at once."""
    root = Path(__file__).resolve().parents[3]
    proc = subprocess.Popen(
        [sys.executable, "-m", "rlvr.cli", "play", "tictactoe", "-m", "policy:optimal", "--first", "me"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=root,
        # a suite started in the background runs with SIGINT ignored; give the child the default
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        seen = b""
        deadline = time.monotonic() + 30
        while b"Your move" not in seen and time.monotonic() < deadline:
            if select.select([proc.stdout], [], [], 0.1)[0]:
                seen += os.read(proc.stdout.fileno(), 4096)
        assert b"Your move" in seen
        time.sleep(0.2)  # let it block in input()
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=10) == 0
        assert b"bye" in proc.stdout.read() and b"Traceback" not in proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate()


class FakeTerminal:
    """Answers every move prompt with `choose(board)`, reading the last board shown."""

    def __init__(self, choose):
        self.choose, self.screens = choose, []

    def show(self, title: str, body: str) -> None:
        self.screens.append(body)

    def ask(self, prompt, parse):
        return parse(str(self.choose(parse_board(self.screens[-1]))))


def test_play_human_results_from_the_persons_side():
    env = load_environment()
    rng = random.Random(0)
    # On screen the person is O; play it optimally against the random reference player.
    person = FakeTerminal(lambda board: optimal_player(board, "O", rng))
    results = [
        asyncio.run(env.play_human(env.policies()["random"](), person, human_mark="O", human_first=i % 2 == 0, seed=i))
        for i in range(12)
    ]
    assert set(results) <= {"win", "draw"} and "win" in results and env.human is None

    garbage = Policy(lambda messages, rng: "no idea", name="garbage")
    env = load_environment(max_turns=2)
    result = asyncio.run(env.play_human(garbage, person, human_mark="O", human_first=True, seed=1))
    assert result == "unfinished"
    assert "stopped after 2 model turns (max_turns_reached)" in person.screens[-1]
    assert "invalid moves: 2" in person.screens[-1]
