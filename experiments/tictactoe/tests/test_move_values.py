"""experiments/tictactoe/move_values.py: the value of each move at a position under the model's own play."""

from __future__ import annotations

import importlib.util
import random
import subprocess
import sys
from pathlib import Path

import pytest
from rlvr_tictactoe.env import read_move
from rlvr_tictactoe.game import teacher_move

ROOT = Path(__file__).resolve().parents[3]
SCRIPT = ROOT / "experiments" / "tictactoe" / "move_values.py"


def _script():
    spec = importlib.util.spec_from_file_location("tictactoe_move_values", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_line_names_the_opening_x_moves_and_o_replies():
    parse = _script().parse_line
    assert parse("O8.X4.O1") == (8, [4], [1])
    assert parse("X4.O0") == (None, [4], [0])
    assert parse("O8 X4 O1 X0 O6") == (8, [4, 0], [1, 6])
    for bad in ("", "O8.X4", "O8.O4", "Y4.O1", "O8.X44.O1", "O8.X9.O1", "O8.X4.O8"):
        with pytest.raises(SystemExit):
            parse(bad)


def test_a_forced_move_is_read_back_as_that_move_in_the_teachers_words():
    text = _script().move_text
    board = tuple(".O..X...O".replace(".", " "))
    for cell in (0, 2, 3, 5, 6, 7):
        assert read_move(text(board, cell), board) == (cell, None)
    empty = tuple(" " * 9)  # no threat: the teacher's own sentences for the centre and a corner
    assert text(empty, 4) == f"<think>{teacher_move(empty, 'X', random.Random(1))[1]}</think>\n<move>4</move>"
    assert text(board, 0) == "<think>There is no immediate threat, so I take the corner 0.</think>\n<move>0</move>"
    threat = tuple("OO  X    ")  # a block in the teacher's words; a move it never makes, plainly
    assert text(threat, 2) == "<think>O threatens to complete 0-1-2, so I block at 2.</think>\n<move>2</move>"
    assert text(threat, 8) == "<think>I play 8.</think>\n<move>8</move>"


@pytest.mark.heavy
def test_the_script_plays_every_arm_from_a_position_with_the_shipped_model():
    pytest.importorskip("torch")
    proc = subprocess.run(
        [
            sys.executable,
            str(SCRIPT),
            str(ROOT / "models" / "tictactoe-tiny"),
            "--line",
            "O8",
            "--moves",
            "0",
            "--temperature",
            "0",
            "--games",
            "6",
            "--concurrency",
            "12",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = proc.stdout
    assert "position after O8: ........O (X to move)" in out
    rows = [line for line in out.splitlines() if line.startswith(("| X", "| its own")) and "score" not in line]
    assert rows[0].startswith("| its own choice") and "| X0" in "".join(rows)
    greedy = [r for r in rows if "(greedy)" in r]
    assert len(greedy) == 1 and greedy[0].split("|")[5].strip() == "+0.000"  # the greedy arm against itself
    for row in rows:  # six games an arm, each won, drawn or lost
        wins, draws, losses = (int(x) for x in row.split("|")[4].split("/"))
        assert wins + draws + losses == 6
    assert "the model's own moves at the position:" in out
