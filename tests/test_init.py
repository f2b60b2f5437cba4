"""`rlvr init NAME`: the scaffold imports, passes check_env, declares its entry point; bad names fail."""

from __future__ import annotations

import asyncio
import doctest
import importlib
import importlib.util
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

from rlvr import check_env
from rlvr.cli import main
from rlvr.commands.init import scaffold
from rlvr.engine import run_rollouts
from rlvr.errors import UsageError
from rlvr.registry import GROUP

NAME = "rlvr_scaffold_probe"


@pytest.fixture
def scaffolded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Path, ModuleType]]:
    """Scaffold NAME into tmp_path and import its module from there (no pip install)."""
    dest = scaffold(NAME, tmp_path)
    monkeypatch.syspath_prepend(str(dest))
    try:
        yield dest, importlib.import_module(NAME)
    finally:
        for mod in [m for m in sys.modules if m == NAME or m.startswith(NAME + ".") or m == f"test_{NAME}"]:
            del sys.modules[mod]


def test_scaffold_files_and_pyproject(scaffolded: tuple[Path, ModuleType]) -> None:
    dest, _ = scaffolded
    files = sorted(
        p.relative_to(dest).as_posix() for p in dest.rglob("*") if p.is_file() and "__pycache__" not in p.parts
    )
    assert files == sorted(["README.md", f"{NAME}/__init__.py", "pyproject.toml", f"tests/test_{NAME}.py"])
    project = tomllib.loads((dest / "pyproject.toml").read_text())
    assert project["project"]["name"] == "rlvr-scaffold-probe"
    assert project["project"]["entry-points"][GROUP] == {NAME: f"{NAME}:load_environment"}
    assert "rlvr" in project["project"]["dependencies"]
    assert project["tool"]["setuptools"]["packages"] == [NAME]
    assert project["build-system"]["build-backend"] == "setuptools.build_meta"
    assert f"pip install -e {dest.as_posix()}" in (dest / "README.md").read_text()


def test_scaffold_env_passes_check_env_and_its_oracle_wins(
    scaffolded: tuple[Path, ModuleType],
) -> None:
    _, module = scaffolded
    env = module.load_environment(num_tasks=4, eval_tasks=4)
    check_env(env)
    assert env.sampling.max_tokens == 256  # the scaffold shows where a per-turn limit goes
    rollouts = asyncio.run(run_rollouts(env, env.policies()["oracle"](), env.tasks(), rollouts_per_task=2))
    assert [r.reward for r in rollouts] == [1.0] * 8
    assert doctest.testmod(module).failed == 0


def test_scaffold_tests_pass(scaffolded: tuple[Path, ModuleType]) -> None:
    dest, _ = scaffolded
    spec = importlib.util.spec_from_file_location(f"test_{NAME}", dest / "tests" / f"test_{NAME}.py")
    assert spec is not None and spec.loader is not None
    tests = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = tests
    spec.loader.exec_module(tests)
    names = [n for n in dir(tests) if n.startswith("test_")]
    assert len(names) == 3
    for name in names:
        getattr(tests, name)()


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
        ("My-Env", "not a valid module name"),
        ("1env", "not a valid module name"),
        ("class", "not a valid module name"),
        ("", "not a valid module name"),
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
