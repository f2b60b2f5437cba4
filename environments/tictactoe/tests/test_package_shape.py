"""The package's shape: no import circle between its modules (imports read with ast, so those
inside functions and under `if TYPE_CHECKING:` count too), modules <= 400 lines, functions
<= 80 lines."""

from __future__ import annotations

import ast
from pathlib import Path

import rlvr_tictactoe

PACKAGE = Path(rlvr_tictactoe.__file__).parent


def imports(package: Path) -> dict[str, set[str]]:
    """Each module of `package` -> the modules of `package` it imports (the package aside)."""
    name = package.name
    mods = {f"{name}.{p.stem}": p for p in package.glob("*.py") if p.stem != "__init__"}
    graph = {}
    for mod, path in mods.items():
        found: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                found.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module:
                found.add(node.module)
                found.update(f"{node.module}.{alias.name}" for alias in node.names)
        graph[mod] = {m for m in found if m in mods and m != mod}
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every import circle: a path from a module back to itself, each found once."""
    found: list[list[str]] = []

    def walk(path: list[str]) -> None:
        for nxt in sorted(graph[path[-1]]):
            if nxt == path[0]:
                if min(path) == path[0]:  # (each circle once: from its smallest module)
                    found.append(path)
            elif nxt not in path:
                walk([*path, nxt])

    for mod in sorted(graph):
        walk([mod])
    return found


def test_no_import_circles() -> None:
    assert circles(imports(PACKAGE)) == []


def test_a_circle_is_found(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "a.py").write_text("from pkg import b\n")
    (pkg / "b.py").write_text("def f():\n    from pkg.c import x\n")
    (pkg / "c.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import pkg.a\n")
    assert circles(imports(pkg)) == [["pkg.a", "pkg.b", "pkg.c"]]


def test_modules_and_functions_stay_small() -> None:
    too_long = []
    for path in sorted(PACKAGE.glob("*.py")):
        text = path.read_text(encoding="utf-8")
        if len(text.splitlines()) > 400:
            too_long.append(f"{path.name}: {len(text.splitlines())} lines")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno is not None:
                if node.end_lineno - node.lineno + 1 > 80:
                    too_long.append(f"{path.name}: {node.name} {node.end_lineno - node.lineno + 1} lines")
    assert too_long == []
