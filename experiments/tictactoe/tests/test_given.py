"""experiments/tictactoe/given.py: its two measurements run end to end on the shipped model (small)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
SCRIPT = ROOT / "experiments" / "tictactoe" / "given.py"


def _run(*args: str) -> str:
    proc = subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout


def _rows(out: str, first: str) -> list[list[str]]:
    return [[c.strip() for c in line.split("|")[1:-1]] for line in out.splitlines() if line.startswith(f"| {first}")]


@pytest.mark.heavy
def test_grads_measures_own_and_given_replies_at_restart_points():
    pytest.importorskip("torch")
    out = _run("grads", str(ROOT / "models" / "tictactoe-tiny"), "--games", "12", "--points", "8")
    own, given = _rows(out, "own"), _rows(out, "given")
    assert int(own[0][1]) == 8 and int(given[0][1]) >= 1  # every point its own reply; others where free
    assert float(own[0][2]) <= 0 and float(given[0][2]) < float(own[0][2])  # the model prefers its own
    assert float(given[0][3]) > 0 and float(own[0][3]) >= 0


@pytest.mark.heavy
def test_where_counts_restarts_by_move_with_given_and_own_games(tmp_path):
    pytest.importorskip("torch")
    model = str(ROOT / "models" / "tictactoe-tiny")
    # against the perfect opponent (p = 0) no game is won, so every game is below restart_below = 1
    # and step 2 restarts some (at p = 0.7 the shipped model can win all of a 16-game step)
    args = ("--points-mode", "all", "--steps", "2", "--batch-size", "16", "--p", "0", "-o", str(tmp_path))
    out = _run("where", model, *args)
    rows = [r for r in _rows(out, "") if r[0].isdigit()]
    assert rows and all(int(r[0]) >= 2 for r in rows)  # a restart begins at X's second move or later
    for move, n, given, own in rows:
        given_games, own_games = int(given.split(",")[0]), int(own.split(",")[0])
        assert given_games == 2 * int(n) and own_games == 6 * int(n)  # k = 2 of each group of 8
