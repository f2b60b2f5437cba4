"""`rlvr report`: one self-contained, well-formed HTML file with plots and every rollout."""

from __future__ import annotations

import asyncio
import json
import re
import xml.etree.ElementTree as ET
from html.parser import HTMLParser
from pathlib import Path

import pytest

from rlvr import MultiTurnEnv, Policy, Rubric, State, stop
from rlvr.cli import main
from rlvr.engine import run_rollouts
from rlvr.errors import ResultsError
from rlvr.report import bar_chart, histogram_bins, write_report
from rlvr.results import RunDir
from rlvr.types import Messages

NASTY = '<script>alert("x")</script> & <b>bold</b>'


class TwoTurnEnv(MultiTurnEnv[State]):
    """Task 'short' ends after one turn, the others after two; task 'boom' makes the model fail."""

    async def env_response(self, messages: Messages, state: State) -> Messages:
        return [{"role": "user", "content": f"again {NASTY}"}]

    @stop
    def done(self, state: State) -> bool:
        return state.turn >= (1 if state.task.id == "short" else 2)


def says_answer(completion: Messages, answer: str | None) -> float:
    return float(answer is not None and answer in str(completion[-1]["content"]))


def nasty_metric(completion: Messages) -> float:
    return -0.5


def _policy(messages: Messages, rng: object) -> str:
    if "boom" in str(messages[-1]["content"]):
        raise RuntimeError(f"model exploded {NASTY}")
    return f"the answer is 4 {NASTY}"


def make_run(path: Path, tasks: int = 3) -> Path:
    rows = [
        {"id": "short", "question": f"2+2? {NASTY}", "answer": "4"},
        {"id": "boom", "question": "boom", "answer": "4"},
    ]
    rows += [{"id": f"t{i}", "question": f"{i}+{4 - i}?", "answer": "5"} for i in range(tasks)]
    env = TwoTurnEnv(rows, system_prompt="be brief", rubric=Rubric([says_answer, nasty_metric], [1.0, 0.0]))
    meta = {
        "env": "two_turn",
        "model": f"policy:{NASTY}",
        "num_tasks": len(rows),
        "rollouts_per_task": 2,
    }
    run, _ = RunDir.create(path, meta)
    asyncio.run(run_rollouts(env, Policy(_policy, "p"), env.tasks(), rollouts_per_task=2, on_rollout=run.append))
    run.close(rollouts=2 * len(rows))
    return path


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
    # plots: total reward, per-function means, turns, stop reasons, and one per function
    svgs = re.findall(r"<svg.*?</svg>", page, re.DOTALL)
    assert len(svgs) == 6
    for svg in svgs:
        ET.fromstring(svg)  # each plot is well-formed XML
    assert "stop reasons" in page and "turns per rollout" in page and "mean of each reward function" in page


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
