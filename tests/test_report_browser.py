"""`rlvr report` pages where users meet them: in a browser (headless Chromium, driven by
Playwright).

Pages of every kind: each bundled environment's eval, tic-tac-toe's exact evaluation, a tool
environment with tool errors and error records, a run with error records and metric values at
the ends of the float range, and a training run with the pages of its evaluations. Each page
must load with no console error and no network request; every plot is drawn with a non-zero
size, its marks inside it; every rollout's `<details>` opens to a visible body; lost games
show as boards; every link leads to a page that passes the same checks.

Skipped, with the reason, where Playwright or Chromium is missing: `make browser` installs
Debian's Chromium (CI runs it). `RLVR_REPORT_SCREENSHOTS=docs/images` saves the screenshots
of docs/evaluation.md (the top of each bundled environment's page, the training run's and the
exact evaluation's);
otherwise they go to a temporary folder, still taken, so that taking them is tested too.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

import pytest
from report_runs import eval_run, exact_run, make_run, tool_run, training_run

from rlvr.registry import list_environments, load_environment
from rlvr.report import write_report
from rlvr.results import RunDir

sync_api = pytest.importorskip(
    "playwright.sync_api", reason="the browser test needs Playwright (pip install -e '.[test]')"
)
CHROMIUM = os.environ.get("RLVR_CHROMIUM") or next(
    (found for name in ("chromium", "chromium-browser", "google-chrome") if (found := shutil.which(name))), None
)
if CHROMIUM is None:
    pytest.skip("the browser test needs Chromium: `make browser` installs it (apt)", allow_module_level=True)

CHROMIUM_ARGS = [
    "--no-sandbox",  # as root (CI), Chromium refuses to start with its sandbox
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
"""Without the last five, Chromium's own background connections (refused offline) pile up."""

PLAYERS = {
    "double_check": "random",
    "ice_maze": "optimal",
    "mix": "random+echo",
    "python_math": "oracle",
    "reasoning_gym": "guess",
    "reverse_text": "echo",
    "textarena": "optimal",
    "rlm": "oracle",
    "tictactoe": "random",
    "wiki_search": "oracle",
}
"""A reference player for each bundled environment, chosen for varied rewards and turns."""

BOARD = re.compile(r"^[XO1-9] \| [XO1-9] \| [XO1-9]$", re.MULTILINE)
SHOT = {"x": 0, "y": 0, "width": 1100, "height": 1150}
"""The top of a page (docs/evaluation.md shows it), and the most bytes its PNG may take."""
SHOT_BYTES = 200_000


@pytest.fixture(scope="module")
def pages(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Every page, written before the browser starts: making a run takes `asyncio.run`, which
    cannot run while Playwright's sync API holds its event loop."""
    root = tmp_path_factory.mktemp("runs")
    runs = {env: eval_run(root / env, env, player) for env, player in PLAYERS.items()}
    runs["exact"] = exact_run(root / "exact")
    runs["tools"] = tool_run(root / "tools")
    runs["extreme"] = make_run(root / "extreme", rollouts=1, extreme=True)
    runs["training"] = training_run(root / "training", steps=16, eval_every=8)
    return {name: write_report(run) for name, run in runs.items()}


@pytest.fixture(scope="module")
def browser(pages: dict[str, Path]) -> Iterator[Any]:
    with sync_api.sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()


@pytest.fixture(scope="module")
def shots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    wanted = os.environ.get("RLVR_REPORT_SCREENSHOTS")
    folder = Path(wanted) if wanted else tmp_path_factory.mktemp("shots")
    folder.mkdir(parents=True, exist_ok=True)
    return folder


class Opened:
    """A page loaded in a fresh offline browser context, with what it logged and requested."""

    def __init__(self, browser: Any, path: Path) -> None:
        self.context = browser.new_context(offline=True, viewport={"width": 1100, "height": 760})
        self.page = self.context.new_page()
        self.errors: list[str] = []
        self.requests: list[str] = []
        self.page.on("console", lambda m: self.errors.append(m.text) if m.type == "error" else None)
        self.page.on("pageerror", lambda exc: self.errors.append(str(exc)))
        self.page.on("request", lambda r: self.requests.append(r.url))
        self.url = path.resolve().as_uri()
        self.page.goto(self.url, wait_until="load")

    def close(self) -> None:
        self.context.close()


def check_page(browser: Any, path: Path, *, shot: Path | None = None) -> dict[str, Any]:
    """Open the page at `path` and check it (see the module docstring); returns what was seen."""
    opened = Opened(browser, path)
    try:
        page = opened.page
        seen: dict[str, Any] = page.evaluate(
            """() => ({
                plots: [...document.querySelectorAll('svg')].map(svg => {
                    const box = svg.getBoundingClientRect();
                    const view = svg.viewBox.baseVal;
                    const marks = [...svg.querySelectorAll('rect, polyline, circle')].map(m => m.getBBox());
                    return {title: svg.getAttribute('aria-label'), width: box.width, height: box.height,
                            marks: marks.length,
                            outside: marks.filter(b => !(b.width > 0 || b.height > 0) || b.x < -1 || b.y < -1
                                || b.x + b.width > view.width + 1 || b.y + b.height > view.height + 1).length};
                }),
                headings: [...document.querySelectorAll('h2, h3')].map(h => h.textContent),
                boards: [...document.querySelectorAll('div.lost pre')].map(p =>
                    ({text: p.textContent, height: p.getBoundingClientRect().height})),
                links: [...document.querySelectorAll('a[href]')].map(a => a.href),
                rollouts: document.querySelectorAll('details.rollout').length,
            })"""
        )
        summaries = page.locator("details.rollout > summary")
        for i in range(min(summaries.count(), 3)):  # a few real clicks, then every one by script
            summaries.nth(i).click()
        seen["opened"] = page.evaluate(  # click them all, then measure (one layout, not one a click)
            """() => {
                const all = [...document.querySelectorAll('details.rollout')];
                all.forEach(d => { if (!d.open) d.querySelector('summary').click(); });
                return all.map(d => d.open && d.querySelector('.body').getBoundingClientRect().height > 0);
            }"""
        )
        if shot is not None:
            page.evaluate(
                "() => { document.querySelectorAll('details').forEach(d => d.open = false); scrollTo(0, 0); }"
            )
            page.screenshot(path=str(shot), full_page=True, clip=SHOT)
        assert opened.errors == [], f"{path}: console errors {opened.errors}"
        assert opened.requests == [opened.url], f"{path}: requests besides the page itself: {opened.requests}"
    finally:
        opened.close()
    for plot in seen["plots"]:
        assert plot["width"] > 0 and plot["height"] > 0 and plot["marks"] > 0, f"{path}: plot not drawn: {plot}"
        assert plot["outside"] == 0, f"{path}: {plot['outside']} marks of a plot empty or outside it: {plot}"
    assert all(seen["opened"]) and len(seen["opened"]) == seen["rollouts"], f"{path}: a rollout did not open"
    if shot is not None:
        assert 0 < shot.stat().st_size < SHOT_BYTES
    return seen


def linked_files(seen: dict[str, Any]) -> list[Path]:
    """The files a page links to; each must exist (a link is never to the network)."""
    paths = []
    for link in seen["links"]:
        url = urlparse(link)
        assert url.scheme == "file", f"a link out of the run's folder: {link}"
        paths.append(Path(unquote(url.path)))
        assert paths[-1].is_file(), f"a link to nothing: {link}"
    return paths


# ---- the pages ----------------------------------------------------------------------------


def test_every_bundled_environment_has_a_player_here() -> None:
    # openenv plays a server it is given (url= or app=), verifiers a module it is given (env=):
    # neither has players or a default
    assert set(PLAYERS) == set(list_environments()) - {"gym", "openenv", "verifiers"}


@pytest.mark.parametrize("env", sorted(PLAYERS))
def test_bundled_environment_eval_page(browser: Any, pages: dict[str, Path], shots: Path, env: str) -> None:
    seen = check_page(browser, pages[env], shot=shots / f"report-{env}.png")
    assert seen["rollouts"] == 16 and len(seen["plots"]) >= 4
    if load_environment(env).summarize(RunDir.open(pages[env].parent).read()):  # its own table comes first
        assert seen["headings"][0] == f"{env}: its own summary", seen["headings"]


def test_exact_evaluation_page_draws_every_lost_game_as_a_board(
    browser: Any, pages: dict[str, Path], shots: Path
) -> None:
    seen = check_page(browser, pages["exact"], shot=shots / "report-exact.png")
    assert seen["headings"][:2] == ["Exact evaluation", f"Games that beat the policy ({len(seen['boards'])})"]
    titles = [p["title"] for p in seen["plots"]]
    assert titles[:3] == [
        "vs random: outcome % (weighted)",
        "vs optimal: outcome % (weighted)",
        "games by outcome (counted)",
    ]
    assert len(seen["boards"]) > 0
    for board in seen["boards"]:
        assert board["height"] > 0 and len(BOARD.findall(board["text"])) == 3, board


def test_tool_environment_page_with_tool_errors_and_error_records(browser: Any, pages: dict[str, Path]) -> None:
    path = pages["tools"]
    seen = check_page(browser, path)
    text = path.read_text(encoding="utf-8")
    assert "tool-error" in text and "unknown tool" in text and "not valid JSON" in text  # tool errors
    assert 'class="rollout error"' in text and "the researcher crashed" in text  # error records
    assert "&#8594; search_pages(" in text  # the calls themselves
    assert seen["rollouts"] == 12


def test_error_records_and_extreme_values_page(browser: Any, pages: dict[str, Path]) -> None:
    path = pages["extreme"]
    seen = check_page(browser, path)
    assert seen["rollouts"] == 5
    assert "1e+308" in path.read_text(encoding="utf-8")


def test_training_run_page_and_its_evaluations(browser: Any, pages: dict[str, Path], shots: Path) -> None:
    seen = check_page(browser, pages["training"], shot=shots / "report-training.png")
    assert seen["headings"][:3] == ["Reward", "Outcomes", "Evaluations"]  # the reward first
    for heading in ("Exact evaluations", "Exact evaluation", "Loss and training statistics", "Loss"):
        assert heading in seen["headings"]
    titles = {p["title"] for p in seen["plots"]}
    assert {"exact/random (%)", "kl/ref", "optim/lr", "reward (0-1 scale)", "reward/turns"} <= titles
    pages = linked_files(seen)
    assert len(pages) == 3 * 3  # steps 0, 8, 16: two evaluation sets and the exact evaluation
    exact = [p for p in pages if p.parent.name == "exact"]
    for linked in [p for p in pages if p not in exact] + exact[-1:]:  # exact pages are long: one
        check_page(browser, linked)
