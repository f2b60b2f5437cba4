"""scripts/tictactoe_table.py's exact cell: a finished evaluation's rates, lost games and the
decisions they come from (one decision, not "1 decisions"), and an unfinished or unreadable one
said so."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from loading import load_module

from rlvr.results import FORMAT

ROOT = Path(__file__).resolve().parents[1]
pytest.importorskip("rlvr_tictactoe")
table = load_module(ROOT / "scripts" / "tictactoe_table.py")


def _exact(folder: Path, *, status: str = "complete", beaten: int, mistakes: int) -> Path:
    folder.mkdir()
    rates = {"random": {"win": 89.14, "draw": 10.81}, "optimal": {"win": 0.0, "draw": 100.0}}
    exact = {"rates_pct": rates, "unbeatable": beaten == 0, "beaten": [{}] * beaten, "games": 632,
             "rejected_move_games": 2, "mistakes": [{}] * mistakes}  # fmt: skip
    (folder / "metadata.json").write_text(json.dumps({"format": FORMAT, "status": status, "exact": exact}))
    return folder


@pytest.mark.parametrize(
    ("beaten", "mistakes", "lost"), [(1, 1, "1 of 632 (1 decision)"), (5, 3, "5 of 632 (3 decisions)")]
)
def test_lost_games_name_their_decisions(tmp_path: Path, beaten: int, mistakes: int, lost: str) -> None:
    cell = table.exact_cell(_exact(tmp_path / "rl-exact", beaten=beaten, mistakes=mistakes))
    assert cell == f"89.14/10.81/0.05 | 0.00/100.00/0.00 | {lost} | 2 | no"


def test_an_unbeatable_model_and_an_unfinished_evaluation(tmp_path: Path) -> None:
    assert table.exact_cell(_exact(tmp_path / "a", beaten=0, mistakes=0)).endswith("| 0 of 632 | 2 | **yes**")
    assert table.exact_cell(_exact(tmp_path / "b", status="running", beaten=0, mistakes=0)).startswith("unfinished")
    assert table.exact_cell(tmp_path / "never").startswith("not run")


def test_a_torn_or_foreign_metadata_file_is_said_so_in_its_cell(tmp_path: Path) -> None:
    torn = tmp_path / "torn"
    torn.mkdir()
    (torn / "metadata.json").write_text('{"format": "rlvr.results/1", "status": "compl')
    assert table.exact_cell(torn).startswith("unreadable: ") and "not valid JSON" in table.exact_cell(torn)
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "metadata.json").write_text('{"status": "complete"}')
    assert "not an rlvr results file" in table.exact_cell(foreign)


def test_the_teacher_row_names_the_player_its_evaluations_ran(tmp_path: Path) -> None:
    assert table.label(tmp_path, "teacher") == "teacher (policy:teacher)"  # none run: the default player
    assert table.label(tmp_path, "sft") == "after SFT"
    run = tmp_path / "teacher-random"
    run.mkdir()
    (run / "metadata.json").write_text('{"format": "rlvr.results/1", "status": "compl')  # torn: passed over
    assert table.label(tmp_path, "teacher") == "teacher (policy:teacher)"
    meta = {"format": FORMAT, "status": "complete", "model": "policy:teacher_centre"}
    (run / "metadata.json").write_text(json.dumps(meta))
    assert table.label(tmp_path, "teacher") == "teacher (policy:teacher_centre)"
    meta["model"] = "policy:\ud800|x\n" + "y" * 10_000  # hostile: a lone surrogate, a pipe, a newline, huge
    (run / "metadata.json").write_text(json.dumps(meta))
    name = table.label(tmp_path, "teacher")
    assert name.startswith("teacher (policy:?/x y") and len(name) < 100 and "\n" not in name
    name.encode("utf-8")  # printable
