"""experiments/tictactoe/curves.py: a run's exact evaluations appended to the curves table once, a later
phase counted on from the step its first phase ended at, and the figure drawn from the table."""

from __future__ import annotations

import csv
import re
import shlex
from pathlib import Path

import pytest
from loading import load_module

ROOT = Path(__file__).resolve().parents[3]
curves = load_module(ROOT / "experiments" / "tictactoe" / "curves.py")

HEADER = "step,loss,exact/beaten_games,exact/rejected_move_games,exact/random/win_pct,exact/random/loss_pct,exact/optimal/draw_pct,exact/optimal/loss_pct\n"


def _run(folder: Path, rows: list[str]) -> Path:
    folder.mkdir(parents=True)
    (folder / "metrics.csv").write_text(HEADER + "".join(r + "\n" for r in rows))
    return folder


def test_add_counts_a_later_phase_on_and_skips_what_it_cannot_read(tmp_path: Path) -> None:
    table = tmp_path / "curves.csv"
    first = _run(
        tmp_path / "rl", ["0,0.1,200,150,74.5,13.0,76.2,23.8", "1,0.1,,,,,,", "25,0.1,43,68,82.55,2.9,97.49,2.51"]
    )
    second = _run(
        tmp_path / "rl2",
        ["0,0.1,43,68,82.55,2.9,97.49,2.51", "25,0.1,nan,1,1,1,1,1", "50,0.1,16,32,88.09,1.2,95.6,4.4"],
    )
    assert curves.add(table, first, "weak_w1", "walk back", "two phases") == 2  # step 1 has no evaluation
    assert curves.add(table, second, "weak_w1", "walk back", "two phases", 25) == 1  # its step 0 is step 25
    rows = curves.select(table)
    assert [(r["step"], r["lost_games"], r["optimal_draw_pct"]) for r in rows] == [
        ("0", "200", "76.2"),
        ("25", "43", "97.49"),
        ("75", "16", "95.6"),
    ]
    assert curves.add(table, second, "weak_w1", "walk back", "two phases", 25) == 0  # not twice
    with table.open("a") as f:
        f.write("weak_w1,walk back,two")  # an append killed mid-row
    assert len(curves.select(table)) == 3
    assert curves.add(table, first, "weak_w2", "walk back", "two phases") == 2  # after the torn row
    assert [(r["seed"], r["step"]) for r in curves.select(table)][3:] == [("weak_w2", "0"), ("weak_w2", "25")]
    assert "two\n" not in table.read_text()  # the torn row is gone
    curves.add(table, first, "weak_l2", "walk back", "two phases")
    picked = {r["seed"] for r in curves.select(table, "", "weak_w2,weak_l")}  # comma-separated prefixes
    assert picked == {"weak_w2", "weak_l2"}
    assert {r["seed"] for r in curves.select(table, "", "weak_l,")} == {"weak_l2"}  # a trailing comma


def test_plot_draws_the_matching_lines_and_refuses_an_empty_match(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    table = tmp_path / "curves.csv"
    run = _run(tmp_path / "rl", ["0,0.1,206,254,74.5,13.0,76.2,23.8", "25,0.1,16,32,88.09,1.2,95.6,4.4"])
    curves.add(table, run, "weak_w1", "walk back", "plan weakwins")
    out = tmp_path / "lost.png"
    curves.plot(table, out, "weakwins", "weak")  # 206 -> 16: the panel is drawn linear to 10, log above
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert not out.with_name("lost.png.part").exists()
    with pytest.raises(SystemExit, match="no line"):
        curves.plot(table, tmp_path / "none.png", "no such variant")


def test_plot_draws_another_column_and_passes_over_lines_without_it(tmp_path: Path) -> None:
    """COLUMN (e.g. exact wins vs random, %): a line whose points lack it is left out of that figure
    alone; a column the CSV does not have is refused by name."""
    pytest.importorskip("matplotlib")
    table = tmp_path / "curves.csv"
    head = ",".join(curves.FIELDS)
    table.write_text(
        f"{head}\nweak_w7,walk back,credit,0,20,40,88.49,0.7,97.62,2.38\nweak_w7,walk back,credit,25,17,35,88.65,0.6,98.96,1.04\n"
        "weak_w7,walk back,old,0,30,9,,,,\nweak_w7,walk back,old,25,25,8,,,,\n"  # lost games only (older rows)
    )
    out = tmp_path / "wins.png"
    curves.plot(table, out, "", "weak", "random_win_pct")
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    curves.plot(table, tmp_path / "old.png", "old")  # its lost games draw
    with pytest.raises(SystemExit, match="no line"):
        curves.plot(table, tmp_path / "none.png", "old", "", "random_win_pct")
    with pytest.raises(SystemExit, match="no column 'wins'"):
        curves.plot(table, tmp_path / "none.png", "", "", "wins")


def test_plot_draws_a_target_line_in_every_panel_and_refuses_a_target_that_is_no_number(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("matplotlib")
    from matplotlib.axes import Axes

    table = tmp_path / "curves.csv"
    head = ",".join(curves.FIELDS)
    table.write_text(
        f"{head}\nweak_w7,walk back,credit,0,20,40,88.49,0.7,97.62,2.38\nweak_w8,walk back,credit,0,9,4,85.8,1,93.5,6.5\n"
    )
    drawn: list[float] = []
    real = Axes.axhline

    def spy(self: Axes, y: float = 0, *args: object, **kwargs: object) -> object:
        drawn.append(y)
        return real(self, y, *args, **kwargs)

    monkeypatch.setattr(Axes, "axhline", spy)
    out = tmp_path / "wins.png"
    curves.plot(table, out, "", "weak", "random_win_pct", "90")
    assert drawn == [90.0, 90.0] and out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    drawn.clear()
    curves.plot(table, out, "", "weak", "random_win_pct")  # no target, no line
    assert drawn == []
    for bad in ("ninety", "nan", "inf"):
        with pytest.raises(SystemExit, match="TARGET must be a finite number"):
            curves.plot(table, tmp_path / "none.png", "", "weak", "random_win_pct", bad)


def _figures() -> list[tuple[str, str]]:
    """(MATCH, SEEDS) of every `curves.py plot` the docs name (`tictactoe_curves.py` before the
    script moved here), and the full figure."""
    text = "\n".join(p.read_text() for p in sorted((ROOT / "docs").rglob("*.md")))
    found = [("", "")]
    for command in re.findall(r"`(?:tictactoe_)?curves\.py plot CSV PNG ([^`]*)`", text):
        words = shlex.split(command)
        found.append((words[0], words[1] if len(words) > 1 else ""))
    return found


@pytest.mark.parametrize(("match", "seeds"), _figures())
def test_no_two_lines_of_a_panel_look_alike(match: str, seeds: str) -> None:
    """Each figure the results draw: within a panel, every line has its own colour and dash (a
    repeat of a run on the same seed, e.g. plan unbeatable's second set of seeds 3-5, included)."""
    rows = curves.select(ROOT / "docs" / "results" / "tictactoe-exact" / "exact_curves.csv", match, seeds)
    lines = sorted({(r["opponent"], r["variant"]) for r in rows})
    styles = curves.line_styles(lines, list(range(20)))
    for seed in {r["seed"] for r in rows}:
        panel = {(r["opponent"], r["variant"]) for r in rows if r["seed"] == seed}
        looks = [(styles[x]["color"], styles[x].get("ls", "-")) for x in panel]
        assert len(set(looks)) == len(looks), (seed, sorted(panel))


def test_a_repeat_is_dashed_beside_its_first_run() -> None:
    first = ("walk back", "restarts below 0.65, 300 steps")
    again = ("walk back", "restarts below 0.65, again")
    styles = curves.line_styles([first, again], ["grey"])
    assert styles[first] == {"color": "navy", "lw": 2.2}
    assert styles[again] == {"color": "navy", "lw": 2.2, "ls": "--"}


def test_every_panel_of_the_results_has_a_title_that_names_its_seed() -> None:
    """A seed named sN is "seed N"; any other seed in the curves table needs its line in TITLES
    (a weak start's panel once read "seed eak_w5")."""
    assert (curves.panel_title("s12"), curves.panel_title("shipped")) == ("seed 12", curves.TITLES["shipped"])
    assert curves.panel_title("odd_one") == "seed odd_one"
    seeds = {r["seed"] for r in curves.select(ROOT / "docs" / "results" / "tictactoe-exact" / "exact_curves.csv")}
    assert sorted(x for x in seeds if not (x[:1] == "s" and x[1:].isdigit()) and x not in curves.TITLES) == []


def test_the_curves_script_skips_torn_and_nan_lines_and_never_adds_a_point_twice(tmp_path) -> None:
    """experiments/tictactoe/curves.py `add`: rows without an exact evaluation, a torn last line (a
    run killed mid-write) and NaN are skipped; a second phase continues the line from its first
    step, and a point the CSV already has is not added again."""
    header = "step," + ",".join(curves.SOURCE.values())
    run = tmp_path / "run"
    run.mkdir()
    lines = [header, "0,2,0,91,0.1,99,1", "10,,,,,,", "20,nan,0,91,0,99,1", "40,1,0,92.5,0,100,0", "60,0,0"]
    (run / "metrics.csv").write_text("\n".join(lines))
    table = tmp_path / "curves.csv"
    assert curves.add(table, run, "0", "o", "v") == 2
    assert curves.add(table, run, "0", "o", "v") == 0
    assert curves.add(table, run, "0", "o", "v", 40) == 1  # its step 0 is step 40, already there
    with table.open() as f:
        rows = list(csv.DictReader(f))
    assert [(r["step"], r["lost_games"]) for r in rows] == [("0", "2"), ("40", "1"), ("80", "1")]
    # plot's choice of lines and panels: a label's part, and seeds by the start of their name
    curves.add(table, run, "weak", "o", "v, lr 4e-5")
    curves.add(table, run, "weak1", "o", "v, lr 4e-5")
    assert {r["seed"] for r in curves.select(table, "lr 4e-5")} == {"weak", "weak1"}
    assert {r["seed"] for r in curves.select(table, "", "weak")} == {"weak", "weak1"}
    assert {r["seed"] for r in curves.select(table, "", "0")} == {"0"}
    assert curves.select(table, "lr 4e-5", "0") == []
    with pytest.raises(SystemExit, match="no line"):
        curves.plot(table, tmp_path / "none.png", "lr 4e-5", "0")


@pytest.mark.parametrize("label", ["\udcff", "two\nlines", "", "  "])
def test_add_refuses_a_label_that_is_not_printable_text_and_leaves_the_table_alone(tmp_path: Path, label: str) -> None:
    table = tmp_path / "curves.csv"
    run = _run(tmp_path / "rl", ["0,0.1,206,254,74.5,13.0,76.2,23.8"])
    with pytest.raises(SystemExit, match="printable text"):
        curves.add(table, run, "weak_w1", "walk back", label)
    assert not table.exists()
