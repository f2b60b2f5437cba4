"""`rlvr init NAME`: the scaffold imports, passes check_env, declares its entry point; bad names fail."""

from __future__ import annotations

import asyncio
import doctest
import importlib
import os
import random
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from importlib.metadata import EntryPoint
from pathlib import Path
from types import ModuleType

import pytest
from loading import load_module

import rlvr
from rlvr import Policy, check_env, registry
from rlvr.cli import main
from rlvr.commands.init import scaffold
from rlvr.engine import run_rollouts
from rlvr.errors import UsageError
from rlvr.registry import GROUP
from rlvr.sampler import Stratified
from rlvr.train.protocols import Explorable, Probed, Restartable, TurnScored

NAME = "rlvr-scaffold-probe"
MODULE = "rlvr_scaffold_probe"
KINDS = ["single", "multi", "tool"]


@pytest.fixture(params=KINDS)
def scaffolded(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[Path, ModuleType]]:
    """Scaffold NAME of each kind into tmp_path and import its module from there (no pip install)."""
    dest = scaffold(NAME, tmp_path, kind=request.param)
    monkeypatch.syspath_prepend(str(dest))
    try:
        yield dest, importlib.import_module(MODULE)
    finally:
        for mod in [m for m in sys.modules if m == MODULE or m.startswith(MODULE + ".") or m == f"test_{MODULE}"]:
            del sys.modules[mod]


def test_scaffold_files_and_pyproject(scaffolded: tuple[Path, ModuleType]) -> None:
    dest, _ = scaffolded
    files = sorted(
        p.relative_to(dest).as_posix() for p in dest.rglob("*") if p.is_file() and "__pycache__" not in p.parts
    )
    assert files == sorted(["README.md", f"{MODULE}/__init__.py", "pyproject.toml", f"tests/test_{MODULE}.py"])
    project = tomllib.loads((dest / "pyproject.toml").read_text())
    assert project["project"]["name"] == "rlvr-scaffold-probe"
    assert project["project"]["entry-points"][GROUP] == {NAME: f"{MODULE}:load_environment"}
    assert project["project"]["dependencies"] == [f"rlvr>={rlvr.__version__}"]  # met by this rlvr
    assert project["tool"]["setuptools"]["packages"] == [MODULE]
    assert project["build-system"]["build-backend"] == "setuptools.build_meta"
    readme = (dest / "README.md").read_text()
    checkout = Path(__file__).resolve().parents[1]  # this test runs from a source checkout
    assert f"pip install -e {dest.as_posix()} -e {checkout.as_posix()}" in readme
    assert f"rlvr eval {NAME} -m policy:" in readme


def test_scaffold_env_passes_check_env_and_its_reference_player_wins(
    scaffolded: tuple[Path, ModuleType],
) -> None:
    _, module = scaffolded
    env = module.load_environment(num_tasks=4, eval_tasks=4)
    check_env(env)
    assert env.sampling.max_tokens is not None  # the scaffold shows where a per-turn limit goes
    player = next(iter(env.policies().values()))  # the first one listed: check_env's and the tests'
    rollouts = asyncio.run(run_rollouts(env, player(), env.tasks(), rollouts_per_task=2))
    assert [r.reward for r in rollouts] == [1.0] * 8
    assert doctest.testmod(module).failed == 0


def scaffold_tests(dest: Path) -> ModuleType:
    return load_module(dest / "tests" / f"test_{MODULE}.py")


def test_scaffold_tests_pass(scaffolded: tuple[Path, ModuleType]) -> None:
    tests = scaffold_tests(scaffolded[0])
    names = [n for n in dir(tests) if n.startswith("test_")]
    assert len(names) == 3
    for name in names:
        getattr(tests, name)()


def test_scaffold_test_names_the_player_that_fails(
    scaffolded: tuple[Path, ModuleType], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The scaffold's player test takes the env's first player, whatever its name, and fails when it loses."""
    dest, module = scaffolded
    tests = scaffold_tests(dest)
    env_class = type(module.load_environment())
    monkeypatch.setattr(env_class, "policies", lambda self: {"renamed": lambda: Policy(lambda m, rng: "no idea")})
    with pytest.raises(
        AssertionError,
        match=r"policy:renamed should solve every task; 10 of 10 rollouts did not\. The first: task .*no idea",
    ):
        tests.test_reference_player_solves_every_task()


def test_names_with_dashes_load_under_either_spelling(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["init", "guess-it", "--kind", "multi", "-o", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "guess_it/__init__.py" in out and "rlvr eval guess-it -m policy:binary_search" in out
    monkeypatch.syspath_prepend(str(tmp_path / "guess-it"))
    module = importlib.import_module("guess_it")
    try:
        points = {"guess-it": EntryPoint("guess-it", "guess_it:load_environment", GROUP)}
        monkeypatch.setattr(registry, "_entry_points", lambda: points)
        for spelling in ("guess-it", "guess_it"):
            env = registry.load_environment(spelling, eval_tasks=6)
            assert env.name == "guess-it"
        player = env.policies()["binary_search"]()
        rollouts = asyncio.run(run_rollouts(env, player, env.tasks()))
        guesses = [r.rewards["num_guesses"] for r in rollouts]  # binary search: at most 7, mostly several
        assert [r.reward for r in rollouts] == [1.0] * 6 and max(guesses) <= 7 and sum(guesses) > 12
        question = [{"role": "user", "content": "I am thinking of a whole number between 1 and 100. Guess it."}]
        history = [{"role": "assistant", "content": "<guess>50</guess>"}, {"role": "user", "content": "Higher."}]
        history += [{"role": "assistant", "content": "<think>hm</think><guess>75</guess>"}]
        history += [{"role": "user", "content": "Lower."}]
        assert module.binary_search_policy(question, random.Random(0)) == "<guess>50</guess>"
        assert module.binary_search_policy(question + history, random.Random(0)) == "<guess>62</guess>"
        # the weaker player: a random number from the middle half of what the hints leave
        picks = {module.middle_half_policy(question + history, random.Random(i)) for i in range(200)}
        assert picks == {f"<guess>{n}</guess>" for n in range(56, 70)}  # 51..74 left: its middle half
        weaker = env.policies()["middle_half"]()
        rollouts = asyncio.run(run_rollouts(env, weaker, env.tasks()))
        assert all(r.rewards["consistent_guesses"] == 1.0 for r in rollouts)  # never outside the range
    finally:
        del sys.modules["guess_it"]


def test_the_multi_turn_scaffold_opts_in_to_turn_scores_by_uncommenting_its_example(
    tmp_path: Path, monkeypatch
) -> None:
    """The multi scaffold is `Stratified` and offers no other training protocol; its commented
    `turn_rewards`, uncommented, makes it `TurnScored`: binary search scores 1 every turn, a
    guess outside the range the hints left 0."""
    dest = scaffold(NAME, tmp_path, kind="multi")
    source = dest / MODULE / "__init__.py"
    monkeypatch.syspath_prepend(str(dest))
    try:
        env = importlib.import_module(MODULE).load_environment(num_tasks=20)
        assert isinstance(env, Stratified)
        assert not isinstance(env, (Restartable, Explorable, Probed, TurnScored))
    finally:
        for mod in [m for m in sys.modules if m == MODULE or m.startswith(MODULE + ".")]:
            del sys.modules[mod]
    text = source.read_text()
    example = text[
        text.index("    # def turn_rewards") : text.index("    #     return scores\n")
        + len("    #     return scores\n")
    ]
    source.write_text(
        text.replace(
            example, "\n".join(line.replace("# ", "", 1).rstrip() for line in example.splitlines()) + "\n"
        ).replace("from rlvr import Messages,", "from rlvr import Messages, Rollout,")
    )
    try:
        module = importlib.import_module(MODULE)
        env = module.load_environment(num_tasks=20)
        assert isinstance(env, TurnScored)
        search = env.policies()["binary_search"]()
        task = next(t for t in env.tasks() if t.info["high"] > 60 and int(t.answer) > 3)
        game = asyncio.run(run_rollouts(env, search, [task]))[0]
        assert len(game.turns) >= 3 and env.turn_rewards(task, game) == [1.0] * len(game.turns)
        replies = iter(["<guess>1</guess>", "no guess", "<guess>1</guess>", f"<guess>{task.answer}</guess>"])
        clumsy = asyncio.run(run_rollouts(env, Policy(lambda m, rng: next(replies)), [task]))[0]
        assert env.turn_rewards(task, clumsy) == [1.0, 0.0, 0.0, 1.0]  # the second 1 is below the range
    finally:
        for mod in [m for m in sys.modules if m == MODULE or m.startswith(MODULE + ".")]:
            del sys.modules[mod]


def test_the_multi_turn_scaffold_takes_one_high_or_a_range(tmp_path: Path, monkeypatch) -> None:
    """`high`: one number for every game (the eval split then lists every secret once, in order),
    or [lowest, highest]; the default range keeps the tasks it had; `max_turns` bounds a game and
    its restarts; bad values fail in one line."""
    dest = scaffold(NAME, tmp_path, kind="multi")
    monkeypatch.syspath_prepend(str(dest))
    try:
        module = importlib.import_module(MODULE)
        default = module.load_environment(num_tasks=30, eval_tasks=30)
        assert module.load_environment(num_tasks=30, eval_tasks=30, high=[10, 100]).tasks() == default.tasks()
        assert len({t.info["high"] for t in default.tasks()}) > 10 and default.difficulty_range == (10.0, 100.0)
        fixed = module.load_environment(num_tasks=50, eval_tasks=40, high=30)
        evals = fixed.tasks("eval")
        assert [int(t.answer) for t in evals] == [*range(1, 31), *range(1, 11)]
        assert {t.info["high"] for t in fixed.tasks() + evals} == {30}
        assert all("between 1 and 30." in t.question for t in evals)
        assert len({t.answer for t in fixed.tasks()}) > 15  # training secrets are drawn
        assert fixed.difficulty_range == (30.0, 30.0)
        search = fixed.policies()["binary_search"]()
        games = asyncio.run(run_rollouts(fixed, search, evals[:30]))
        assert [g.reward for g in games] == [1.0] * 30 and max(g.rewards["num_guesses"] for g in games) <= 5
        narrow = module.load_environment(eval_tasks=5, high=[20, 25])
        assert {t.info["high"] for t in narrow.tasks()} <= set(range(20, 26))
        for bad in (1, 0, [30, 10], [5], [1.5, 9], "30", True, 10**10, 30.5, None, {"a": 1, "b": 2}):
            with pytest.raises(ValueError, match="high must"):
                module.load_environment(high=bad)
        # max_turns: binary search fits 1..15 in 4 guesses; a player stuck on 1 stops at 4
        short = module.load_environment(eval_tasks=15, high=15, max_turns=4)
        games = asyncio.run(run_rollouts(short, search, short.tasks("eval")))
        assert [g.reward for g in games] == [1.0] * 15 and max(len(g.turns) for g in games) == 4
        stuck = Policy(lambda m, rng: "<guess>1</guess>")
        lost = asyncio.run(run_rollouts(short, stuck, short.tasks("eval")[14:]))[0]
        assert len(lost.turns) == 4 and lost.truncated and lost.reward == 0.0
        for bad_turns in (0, -1, 2.5, True, "4"):
            with pytest.raises(ValueError, match="max_turns must"):
                module.load_environment(max_turns=bad_turns)
    finally:
        for mod in [m for m in sys.modules if m == MODULE or m.startswith(MODULE + ".")]:
            del sys.modules[mod]


def test_every_scaffold_passes_mypy_strict(tmp_path: Path) -> None:
    """A user who type-checks the generated package sees no error: every kind under
    `mypy --strict` (the stop decorator keeps methods typed; the parser and the rubric's
    functions are typed as rlvr declares them)."""
    pytest.importorskip("mypy")
    packages = [scaffold(f"typed_{kind}", tmp_path, kind=kind) / f"typed_{kind}" for kind in KINDS]
    cmd = [sys.executable, "-m", "mypy", "--strict", "--no-incremental", "--cache-dir", os.devnull]
    proc = subprocess.run([*cmd, *map(str, packages)], capture_output=True, text=True, timeout=240, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_cli_creates_and_refuses_to_overwrite(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["init", "fresh_env", "-o", str(tmp_path)]) == 0
    assert f"pip install -e {tmp_path / 'fresh_env'}" in capsys.readouterr().out
    module = tmp_path / "fresh_env" / "fresh_env" / "__init__.py"
    module.write_text("# edited by hand\n")
    assert main(["init", "fresh_env", "-o", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert "already exists" in err and err.count("\n") == 1
    assert module.read_text() == "# edited by hand\n"  # nothing overwritten


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("My-Env", "cannot name a module"),
        ("1env", "cannot name a module"),
        ("class", "cannot name a module"),
        ("", "cannot name a module"),
        ("my env", "cannot name a module"),
        ("json", "would shadow the module 'json'"),
        ("rlvr", "would shadow"),
        ("pytest", "already importable"),
    ],
)
def test_bad_names_give_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str, expected: str) -> None:
    assert main(["init", name, "-o", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert expected in err and err.count("\n") == 1 and "Traceback" not in err
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(UsageError):
        scaffold(name, tmp_path)
