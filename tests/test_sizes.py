"""The size budget and the import circles of the code a user installs: `src/` and `environments/`.

A module is at most 400 lines and a function or method at most 80, so each concept fits on a
screen or two; past that, split by concept. Tests (any `tests/` folder) are out of the budget.

No package has an import circle among its modules' top-level imports (those under
`if TYPE_CHECKING:` never run and do not count), nor one closed by an import inside a function:
such an import hides a circle, it does not remove it.

`ALLOWED` names the files let off the budget and `ALLOWED_CIRCLES` the circles let off the
second rule, each with its reason. Both stay empty or near it: an entry that no longer breaks
its rule fails the test, so it goes once its file is back under budget or its circle is broken.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from test_layering import cycles

ROOT = Path(__file__).resolve().parents[1]

MAX_MODULE_LINES = 400
MAX_FUNCTION_LINES = 80


ALLOWED: dict[str, str] = {}
"""Files (relative to the repository root) let off the size budget, module and functions alike."""

ALLOWED_CIRCLES: dict[tuple[str, ...], str] = {}
"""Circles closed inside a function let off the rule: the sorted module names of each."""


def package_roots(root: Path) -> list[Path]:
    """The folders whose modules are checked: `src/` and each `environments/<name>/`."""
    found = [root / "src"] if (root / "src").is_dir() else []
    environments = root / "environments"
    if environments.is_dir():
        found += sorted(p for p in environments.iterdir() if p.is_dir())
    return found


def sources(root: Path) -> list[Path]:
    """Every Python module under the package roots, outside `tests/` folders."""
    return [
        path
        for base in package_roots(root)
        for path in sorted(base.rglob("*.py"))
        if "tests" not in path.relative_to(base).parts
    ]


def over_budget(root: Path) -> dict[str, list[str]]:
    """`{relative path: [what is over budget]}` for every module of `root` that breaks the budget."""
    found: dict[str, list[str]] = {}
    for path in sources(root):
        text = path.read_text(encoding="utf-8")
        problems = []
        lines = len(text.splitlines())
        if lines > MAX_MODULE_LINES:
            problems.append(f"{lines} lines (budget {MAX_MODULE_LINES})")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = (node.end_lineno or node.lineno) - node.lineno + 1
                if length > MAX_FUNCTION_LINES:
                    problems.append(f"{node.name} (line {node.lineno}) is {length} lines (budget {MAX_FUNCTION_LINES})")
        if problems:
            found[path.relative_to(root).as_posix()] = problems
    return found


def module_names(base: Path) -> dict[str, Path]:
    """`{dotted name: path}` for the modules of one package root (a `src/` or an environment's folder)."""
    names = {}
    for path in sorted(base.rglob("*.py")):
        parts = path.relative_to(base).with_suffix("").parts
        if "tests" in parts or not all(part.isidentifier() for part in parts):
            continue
        names[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return names


def _imports(node: ast.AST, lazy: bool) -> list[ast.Import | ast.ImportFrom]:
    """The import statements under `node`, less those under `if TYPE_CHECKING:` (never run) and,
    unless `lazy`, those inside functions (run when called, not when the module is imported)."""
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        return [node]
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)) and not lazy:
        return []
    children: list[ast.AST] = list(ast.iter_child_nodes(node))
    if isinstance(node, ast.If):
        test = node.test
        name = test.id if isinstance(test, ast.Name) else test.attr if isinstance(test, ast.Attribute) else ""
        if name == "TYPE_CHECKING":
            children = list(node.orelse)
    return [found for child in children for found in _imports(child, lazy)]


def imports_of(name: str, path: Path, known: set[str], *, lazy: bool = False) -> set[str]:
    """The modules of `known` that `name` imports: when it is imported, or also (`lazy`) in its functions."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in _imports(ast.parse(path.read_text(encoding="utf-8")), lazy):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
            continue
        base = node.module or ""
        if node.level:
            anchor = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
            base = f"{anchor}.{base}" if base else anchor
        for alias in node.names:
            # `from pkg import module` imports the module; `from pkg import name` the package
            found.add(f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base)
    return {m for m in found if m in known and m != name}


def import_circles(root: Path, *, lazy: bool = False) -> list[tuple[str, ...]]:
    """Every import circle in `src/` and in each environment's package under `root`; with `lazy`,
    imports inside functions count too (one there often breaks a circle that is still a circle)."""
    found: list[tuple[str, ...]] = []
    for base in package_roots(root):
        names = module_names(base)
        known = set(names)
        edges = {name: imports_of(name, path, known, lazy=lazy) for name, path in names.items()}
        found += [tuple(circle) for circle in cycles(edges)]
    return found


def test_every_module_and_function_is_within_budget() -> None:
    found = over_budget(ROOT)
    bad = {path: problems for path, problems in found.items() if path not in ALLOWED}
    assert not bad, "over the size budget; split by concept (or, with a reason, add to ALLOWED):\n" + "\n".join(
        f"{path}: {'; '.join(problems)}" for path, problems in sorted(bad.items())
    )
    stale = sorted(set(ALLOWED) - set(found))
    assert not stale, f"remove these from ALLOWED, they are within the budget now: {stale}"


def test_no_import_circle() -> None:
    found = import_circles(ROOT)
    assert not found, f"import circles among top-level imports; break them: {found}"


def test_no_import_circle_closed_by_an_import_inside_a_function() -> None:
    found = import_circles(ROOT, lazy=True)
    bad = [c for c in found if c not in ALLOWED_CIRCLES]
    assert not bad, f"import circles (break them, or with a reason add to ALLOWED_CIRCLES): {bad}"
    stale = sorted(set(ALLOWED_CIRCLES) - set(found))
    assert not stale, f"remove these from ALLOWED_CIRCLES, the circle is gone: {stale}"


@pytest.mark.parametrize("lines", [400, 401])
def test_the_checker_finds_a_long_module(tmp_path: Path, lines: int) -> None:
    package = tmp_path / "src" / "pkg"
    package.mkdir(parents=True)
    (package / "big.py").write_text("x = 1\n" * lines)
    expected = {"src/pkg/big.py": [f"{lines} lines (budget 400)"]} if lines > 400 else {}
    assert over_budget(tmp_path) == expected


def test_the_checker_finds_a_long_function_and_skips_tests(tmp_path: Path) -> None:
    package = tmp_path / "environments" / "game" / "game"
    package.mkdir(parents=True)
    (package / "env.py").write_text("class Env:\n    def step(self):\n" + "        x = 1\n" * 80)  # 81 lines
    (package / "short.py").write_text("def ok():\n" + "    x = 1\n" * 79)  # 80 lines
    (tmp_path / "environments" / "game" / "tests").mkdir()
    (tmp_path / "environments" / "game" / "tests" / "test_long.py").write_text("x = 1\n" * 500)
    assert over_budget(tmp_path) == {"environments/game/game/env.py": ["step (line 2) is 81 lines (budget 80)"]}


def test_the_checker_finds_circles_of_top_level_imports_only(tmp_path: Path) -> None:
    package = tmp_path / "environments" / "game" / "game"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("from game.env import Env\n")
    (package / "env.py").write_text("from .board import Board\nclass Env: ...\n")
    (package / "board.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from game.env import Env\n"
        "def f():\n    from game import env\nclass Board: ...\n"
    )
    assert import_circles(tmp_path) == []
    assert import_circles(tmp_path, lazy=True) == [("game.board", "game.env")]
    (package / "board.py").write_text("try:\n    from game import env\nexcept ImportError:\n    pass\n")
    assert import_circles(tmp_path) == [("game.board", "game.env")]
