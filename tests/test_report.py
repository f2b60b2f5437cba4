"""`rlvr report`: one self-contained, well-formed HTML file with plots and every rollout."""

from __future__ import annotations

import csv
import json
import math
import re
import xml.etree.ElementTree as ET
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import quote, unquote

import pytest
from report_runs import eval_run, exact_run, make_run, training_run

from rlvr.cli import main
from rlvr.errors import ResultsError
from rlvr.report import bar_chart, histogram_bins, line_chart, write_report
from rlvr.results import RunDir


class _Checker(HTMLParser):
    """Fails on misnested or unclosed elements; collects tags."""

    VOID = frozenset({"meta", "br", "img", "hr", "input", "link", "line", "rect"})

    def __init__(self) -> None:
        super().__init__()
        self.stack: list[str] = []
        self.tags: list[tuple[str, dict[str, str | None]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))
        if tag not in self.VOID:
            self.stack.append(tag)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))

    def handle_endtag(self, tag: str) -> None:
        if tag in self.VOID:
            return
        assert self.stack and self.stack[-1] == tag, f"</{tag}> closes <{self.stack[-1] if self.stack else None}>"
        self.stack.pop()


def _check_html(page: str) -> _Checker:
    checker = _Checker()
    checker.feed(page)
    checker.close()
    assert checker.stack == [], f"unclosed: {checker.stack}"
    return checker


def test_report_is_well_formed_self_contained_and_escaped(tmp_path: Path) -> None:
    out = write_report(make_run(tmp_path / "run"))
    assert out == tmp_path / "run" / "report.html"
    page = out.read_text(encoding="utf-8")
    assert page.startswith("<!DOCTYPE html>")
    tags = _check_html(page).tags
    # self-contained: no scripts, no external resources
    assert not [t for t, _ in tags if t in ("script", "link", "iframe")]
    assert not [a for _, a in tags if a.get("src") or a.get("href")]
    # every piece of run text is escaped: the payload never appears as markup
    assert "<script>alert" not in page and "<b>bold</b>" not in page
    assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;" in page
    # plots: total reward, per-function means, turns, stop reasons, and a histogram of each
    # function that is not a 0/1 flag (nasty_metric; says_answer is one)
    svgs = re.findall(r"<svg.*?</svg>", page, re.DOTALL)
    assert len(svgs) == 5
    for svg in svgs:
        ET.fromstring(svg)  # each plot is well-formed XML
    assert "stop reasons" in page and "turns per rollout" in page and "mean of each reward function" in page


def test_a_lone_surrogate_in_the_run_is_shown_as_its_escape_not_a_crash(tmp_path: Path) -> None:
    run = make_run(tmp_path / "run")
    results = run / "results.jsonl"
    first, *rest = results.read_text(encoding="utf-8").splitlines()
    row = json.loads(first)
    row["turns"][0]["completion"]["text"] = "half \ud800 pair <b>"  # what a model may send; JSON keeps it
    results.write_text("\n".join([json.dumps(row), *rest]) + "\n", encoding="utf-8")
    out = write_report(run)
    page = out.read_text(encoding="utf-8")  # strict UTF-8: the page is valid
    assert "half \\ud800 pair &lt;b&gt;" in page
    assert not list(out.parent.glob("*.tmp"))


def test_report_lists_every_rollout_with_roles_rewards_and_errors(tmp_path: Path) -> None:
    page = write_report(make_run(tmp_path / "run", tasks=3)).read_text(encoding="utf-8")
    details = re.findall(r'<details class="([^"]+)"><summary>(.*?)</summary>', page)
    assert len(details) == 2 * 5
    assert sum(cls == "rollout error" for cls, _ in details) == 2  # the two 'boom' rollouts
    assert "model exploded" in page and "RuntimeError" in page
    for role in ("system", "user", "assistant"):
        assert f'class="msg role-{role}"' in page
    assert page.count('class="msg role-assistant"') == 2 * 1 + 2 * 3 * 2  # 'short' has 1 turn, t* have 2
    assert "says_answer" in page and "nasty_metric" in page
    assert "policy:&lt;script&gt;" in page  # metadata header, escaped


def test_summary_numbers_in_report(tmp_path: Path) -> None:
    page = write_report(make_run(tmp_path / "run")).read_text(encoding="utf-8")
    # 8 scored rollouts: 'short' answers 4 (right), t* answer 4 but expect 5 (wrong): mean 2/8
    assert re.search(r"reward \(total\)</td><td class=num>0\.2500</td>", page)
    assert "errors: 2 (RuntimeError 2)" in page
    assert "10 rollouts of 5 tasks, 2 errors" in page


def test_unwritable_output_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = make_run(tmp_path / "run")
    assert main(["report", str(run), "-o", str(tmp_path)]) == 1  # a directory, not a file
    err = capsys.readouterr().err
    assert "cannot write the report" in err and err.count("\n") == 1


def test_max_rollouts_and_output_path(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = make_run(tmp_path / "run")
    out = tmp_path / "sub" / "r.html"
    assert main(["report", str(run / "results.jsonl"), "-o", str(out), "--max-rollouts", "3"]) == 0
    assert capsys.readouterr().out.strip() == f"wrote {out}"
    page = out.read_text(encoding="utf-8")
    assert page.count("<details") == 3 and "showing the first 3 of 10 rollouts" in page
    assert not (run / "report.html").exists()


def test_empty_run_still_reports(tmp_path: Path) -> None:
    run, _ = RunDir.create(tmp_path / "run", {"env": "e", "model": "m"})
    run.close()
    page = write_report(tmp_path / "run").read_text(encoding="utf-8")
    _check_html(page)
    assert "no rollouts yet" in page and "Rollouts (0)" in page


def test_corrupt_or_foreign_results_raise(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = make_run(tmp_path / "run")
    lines = (run / "results.jsonl").read_text().splitlines()
    (run / "results.jsonl").write_text(lines[0] + "\n{not json\n" + "\n".join(lines[1:]) + "\n")
    with pytest.raises(ResultsError, match=r"results.jsonl:2 is not an rlvr rollout"):
        write_report(run)
    assert main(["report", str(run)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("rlvr report: error:") and err.count("\n") == 1 and "Traceback" not in err
    assert not (run / "report.html").exists()

    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "metadata.json").write_text(json.dumps({"format": "someone-else/3"}))
    with pytest.raises(ResultsError, match="not an rlvr results file"):
        write_report(foreign)
    with pytest.raises(ResultsError, match="not a results directory"):
        write_report(tmp_path / "missing")


def test_bar_chart_handles_negative_and_missing_values() -> None:
    svg = bar_chart(["a", "b", "c"], [1.0, -0.5, float("nan")], title="t <x>", digits=2)
    root = ET.fromstring(svg)
    rects = root.findall("{http://www.w3.org/2000/svg}rect")
    assert [r.get("class") for r in rects] == ["bar", "bar neg", "bar"]
    assert "t &lt;x&gt;" in svg and ">-<" in svg
    heights = [float(r.get("height") or 0) for r in rects]
    assert heights[0] == pytest.approx(2 * heights[1], rel=0.01)  # 1.0 is twice as tall as -0.5


def test_histogram_bins_cover_outliers() -> None:
    labels, counts, _ = histogram_bins([-1.0, 0.0, 0.99, 2.0], bins=3)
    assert labels == ["-1.00", "0.00", "1.00"] and counts == [1.0, 2.0, 1.0]


# ---- what the page shows ------------------------------------------------------------------


def _headings(page: str) -> list[str]:
    return re.findall(r"<h2>(.*?)</h2>", page)


def test_the_environments_own_summary_comes_first(tmp_path: Path) -> None:
    from rlvr.registry import load_environment

    run = eval_run(tmp_path / "ttt", "tictactoe", "random")
    page = write_report(run).read_text(encoding="utf-8")
    assert _headings(page)[0] == "tictactoe: its own summary"
    ours = load_environment("tictactoe").summarize(RunDir.open(run).read())
    assert ours is not None
    table = re.search(r'<table class="headline wide">(.*?)</table>', page, re.DOTALL)
    assert table is not None
    assert re.findall(r"<th>(.*?)</th>", table.group(1)) == list(ours)  # win %, draw %, loss %, ...
    assert f"<td class=num>{ours['win %']:.1f}</td>" in table.group(1)
    # the wall time of a rollout is not a cost: said so, with the run's own rate
    assert "seconds / rollout" not in page and "wall seconds per rollout (overlapping)" in page
    assert "rollouts/s" in page


def test_the_exact_page_leads_with_weighted_rates_then_plots_then_lost_boards(tmp_path: Path) -> None:
    from rlvr.exact import lost_games

    run = exact_run(tmp_path / "exact")
    page = write_report(run).read_text(encoding="utf-8")
    exact = RunDir.open(run).metadata["exact"]
    lost = lost_games(RunDir.open(run).read(), exact["failures"])
    assert lost, "the teacher falls for fork traps: the page must have boards to show"
    assert _headings(page)[:3] == [
        "Exact evaluation",
        f"Games that beat the policy ({len(lost)})",
        "Rewards and rollouts",
    ]
    win = exact["rates_pct"]["random"]["win"]
    table = page.index(f"<td class=num>{win:.2f}</td>")
    svgs = {ET.fromstring(s).get("aria-label"): s for s in re.findall(r"<svg.*?</svg>", page, re.DOTALL)}
    weighted, counted = svgs["vs random: outcome % (weighted)"], svgs["games by outcome (counted)"]
    assert "probability under random" in weighted and "each line of play once" in counted
    assert f"<title>loss: {len(lost)}</title>" in counted
    assert table < page.index(weighted) < page.index(counted) < page.index('class="lost"')
    summary = page.index("<h2>Rewards and rollouts</h2>")
    assert page.index("each line of play once, whatever its probability: over the", summary) < page.index(
        "<table", summary
    )
    for game, board in zip(lost, re.findall(r'<div class="lost">(.*?)</div>', page, re.DOTALL)):
        moves = game.info["exact"]["moves"]
        assert board.count(moves) == 1, board  # the moves once (not again as the task id)
        assert game.info["exact"]["mistake"] in board and "probability: random" in board


def test_a_missing_environment_costs_its_summary_only(tmp_path: Path) -> None:
    page = write_report(make_run(tmp_path / "run")).read_text(encoding="utf-8")  # env 'two_turn' is not installed
    assert "no environment summary: no environment named &#x27;two_turn&#x27;" in page
    assert _headings(page)[0] == "Rewards and rollouts"


def test_count_metrics_get_their_own_axis_and_integer_bins(tmp_path: Path) -> None:
    page = write_report(eval_run(tmp_path / "ttt", "tictactoe", "random")).read_text(encoding="utf-8")
    svgs = {ET.fromstring(s).get("aria-label"): s for s in re.findall(r"<svg.*?</svg>", page, re.DOTALL)}
    scores, counts = svgs["mean of each reward function"], svgs["mean of each count metric"]
    assert "<title>turns:" in counts and "<title>turns:" not in scores  # a count, apart from 0-1 rewards
    assert "<title>win:" in scores and "<title>win_reward:" in scores
    turns = ET.fromstring(svgs["turns: rollouts per bin"])
    labels = [t.text for t in turns.iter("{http://www.w3.org/2000/svg}text")]
    assert "one bar per value" in labels and "3" in labels and "3.00" not in labels  # whole numbers


def test_a_long_curve_is_drawn_faint_under_its_moving_mean() -> None:
    ys = [0.5 + (-1) ** i * 0.3 + i / 1000 for i in range(200)]  # noise of +-0.3 on a slow rise
    svg = line_chart({"reward": (list(range(200)), ys)}, title="reward", smooth=True)
    lines = ET.fromstring(svg).findall("{http://www.w3.org/2000/svg}polyline")
    assert [line.get("style") for line in lines] == ["stroke-width:1;opacity:.3", "stroke-width:2.4"]
    mean = [float(p.split(",")[1]) for p in (lines[1].get("points") or "").split()]
    raw = [float(p.split(",")[1]) for p in (lines[0].get("points") or "").split()]
    jumps = [abs(b - a) for a, b in zip(mean[20:], mean[21:])]
    assert max(jumps) < min(abs(b - a) for a, b in zip(raw, raw[1:])) / 10  # the noise averaged out
    assert mean[-1] < mean[20] - 10  # and the rise shows (y grows downwards)
    assert "mean of the last 20" in svg and "<circle" not in svg
    short = line_chart({"reward": (list(range(10)), ys[:10])}, title="reward", smooth=True)
    assert short.count("<polyline") == 1 and "mean of the last" not in short and "<circle" in short


def test_histogram_bins_of_integers() -> None:
    assert histogram_bins([2.0, 2.0, 5.0]) == (["0", "1", "2", "3", "4", "5"], [0, 0, 2, 0, 0, 1], "one bar per value")
    labels, counts, caption = histogram_bins([0.0, 95.0, 100.0], bins=10)
    assert labels[:2] == ["0", "11"] and sum(counts) == 3 and caption == "bins of 11 values (labels: bin start)"


# ---- any float ----------------------------------------------------------------------------

EXTREMES = [math.nan, math.inf, -math.inf, 1e308, -1e308, 1.7976931348623157e308, 5e-324, 0.0]


def _coordinates(svg: str) -> list[float]:
    """Every number of every coordinate attribute of an SVG."""
    root = ET.fromstring(svg)
    out = []
    for node in root.iter():
        for name in ("x", "y", "x1", "x2", "y1", "y2", "width", "height", "cx", "cy", "r", "points"):
            if node.get(name) is not None:
                out += [float(v) for v in re.split(r"[ ,]", node.get(name) or "") if v]
    return out


def test_charts_survive_any_float() -> None:
    svgs = [
        bar_chart([str(v) for v in EXTREMES], EXTREMES, title="bars", digits=3),
        bar_chart(*histogram_bins(EXTREMES)[:2], title="bins"),
        line_chart({"a": (list(range(len(EXTREMES))), EXTREMES), "b": ([0.0, math.inf], [1.0, 2.0])}, title="lines"),
        line_chart({"one point": ([3.0], [1e308])}, title="lone"),
        line_chart({"nothing": ([], [])}, title="empty"),
    ]
    for svg in svgs:
        width, height = float(ET.fromstring(svg).get("width") or 0), float(ET.fromstring(svg).get("height") or 0)
        coords = _coordinates(svg)
        assert coords and all(math.isfinite(c) and -1 <= c <= max(width, height) + 1 for c in coords), svg
        assert len(max(re.findall(r">([^<]*)<", svg), key=len)) < 60  # 1e308 prints short
    assert ">1e+308<" in svgs[0] and ">inf<" in svgs[0] and ">-inf<" in svgs[0] and ">-<" in svgs[0]
    labels, counts, caption = histogram_bins(EXTREMES)
    assert sum(counts) == 5 and caption.endswith("; 3 not finite")


def test_report_survives_extreme_metric_values(tmp_path: Path) -> None:
    page = write_report(make_run(tmp_path / "run", rollouts=1, extreme=True)).read_text(encoding="utf-8")
    _check_html(page)
    assert "extreme_metric" in page and "1e+308" in page and "-1e+308" in page
    for svg in re.findall(r"<svg.*?</svg>", page, re.DOTALL):
        assert all(math.isfinite(c) for c in _coordinates(svg))


def test_report_survives_nan_and_inf_rewards(tmp_path: Path) -> None:
    run = make_run(tmp_path / "run", rollouts=2, extreme=True)  # 1e308 twice: the sum overflows
    lines = [json.loads(line) for line in (run / "results.jsonl").read_text().splitlines()]
    for i, line in enumerate(lines):
        line["rewards"]["nasty_metric"] = [math.nan, math.inf, -math.inf][i % 3]
    (run / "results.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    page = write_report(run).read_text(encoding="utf-8")
    _check_html(page)
    for svg in re.findall(r"<svg.*?</svg>", page, re.DOTALL):
        assert all(math.isfinite(c) for c in _coordinates(svg))


# ---- training runs ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return training_run(tmp_path_factory.mktemp("train") / "run", steps=4, eval_every=4)


def test_training_run_report_draws_curves_and_links_evaluations(
    trained: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["report", str(trained)]) == 0
    assert capsys.readouterr().out.strip() == f"wrote {trained / 'report.html'}"
    page = (trained / "report.html").read_text(encoding="utf-8")
    tags = _check_html(page).tags
    assert not [t for t, _ in tags if t in ("script", "link", "iframe", "img")]
    hrefs = [a["href"] for t, a in tags if t == "a"]
    assert sorted(hrefs) == sorted(
        f"eval/step_00000{s}/{quote(label)}/report.html"
        for s in (0, 4)
        for label in ("exact", "opponent=optimal", "opponent=random")
    )
    for href in hrefs:
        assert (trained / unquote(href)).is_file()  # each evaluation's own page, written beside it
    # three parts, the reward first, each with its sections
    assert _headings(page) == ["Reward", "Loss and training statistics", "Throughput and time", "Config"]
    sections = re.findall(r"<h3>(.*?)</h3>", page)
    assert sections[:5] == ["Outcomes", "Evaluations", "Evaluation sets", "Exact evaluations", "Exact evaluation"]
    assert sections.index("Loss") > sections.index("Exact evaluation") and "KL and entropy" in sections
    assert page.index("Throughput and time") > page.index("KL and entropy")
    titles = [ET.fromstring(s).get("aria-label") for s in re.findall(r"<svg.*?</svg>", page, re.DOTALL)]
    for title in ("reward (total)", "reward (0-1 scale)", "reward/turns", "outcome (%)", "exact/random (%)"):
        assert title in titles
    assert "exact/beaten_games" in titles and "optim/lr" in titles and "clip/frac (share)" in titles
    assert "kl/ref" in titles and "1 point not finite (gaps)" in page  # the NaN KL of step 2
    # the per-step evaluation table: the trainer's numbers
    rows = {int(r["step"]): r for r in _read_csv(trained / "metrics.csv")}
    win = rows[4]["eval/opponent=random/outcome/win_pct"]
    assert re.search(rf"<td>opponent=random</td><td class=num>[^<]*</td><td class=num>{win:.1f}</td>", page)


def _read_csv(path: Path) -> list[dict[str, float]]:
    with path.open(newline="") as f:
        return [{k: float(v) for k, v in row.items() if v} for row in csv.DictReader(f)]


def test_a_folder_of_evaluations_points_at_them(trained: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["report", str(trained / "eval" / "step_000004")]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "holds no run of its own" in err and "opponent=random" in err
    assert main(["report", str(trained / "eval" / "step_000004" / "opponent=random")]) == 0


def test_training_report_reads_what_a_live_or_sft_run_leaves(tmp_path: Path) -> None:
    run = tmp_path / "sft"
    run.mkdir()
    (run / "sft_config.json").write_text(json.dumps({"model": "tiny", "data": "teacher.jsonl"}))
    lines = ["step,loss/train,loss/eval,optim/lr", "1,2.5,,1e-05", "2,nan,2.1,2e-05", "3,inf,1.9,3e-05", "4,1e"]
    (run / "metrics.csv").write_text("\n".join(lines))  # the last row is being written
    page = write_report(run / "metrics.csv").read_text(encoding="utf-8")
    _check_html(page)
    assert "training run sft (teacher.jsonl / tiny)" in page and "steps 1 to 4" in page
    svg = next(s for s in re.findall(r"<svg.*?</svg>", page, re.DOTALL) if 'aria-label="loss"' in s)
    assert "train" in svg and "eval" in svg and "2 points not finite (gaps)" in svg
    assert all(math.isfinite(c) for c in _coordinates(svg))
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "metrics.csv").write_text("step\n")
    assert "no steps logged yet" in write_report(empty).read_text(encoding="utf-8")
