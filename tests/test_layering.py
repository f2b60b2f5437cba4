"""The library's layers: a module imports only from its own layer or the ones below, and no
import cycle exists, between modules or between packages.

Imports are read from the source (ast), so imports inside functions and under
`if TYPE_CHECKING:` count as much as the ones at the top of a module.
"""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"

LAYERS: list[tuple[str, tuple[str, ...]]] = [
    # the words every layer speaks, and helpers with no rlvr dependency
    ("base", ("rlvr.types", "rlvr.errors", "rlvr.seeding", "rlvr.deprecation", "rlvr._sandbox_runner")),
    # parsing and scoring text; classic tabular RL, which needs nothing from the LLM side
    ("parts", ("rlvr.parsers", "rlvr.rubric", "rlvr.classic")),
    # talking to a model, and building a tiny one
    ("clients", ("rlvr.clients", "rlvr.models")),
    # environments and what they are built from (a judge model, a Python sandbox)
    ("envs", ("rlvr.envs", "rlvr.judge", "rlvr.sandbox")),
    # running environments and reading what they produced; the `rlvr` package itself, whose
    # `__init__` re-exports from every layer up to this one
    (
        "run",
        (
            "rlvr",
            "rlvr.engine",
            "rlvr.exact",
            "rlvr.exact_bounds",
            "rlvr.exact_sampled",
            "rlvr.exact_tail",
            "rlvr.check",
            "rlvr.sampler",
            "rlvr.registry",
            "rlvr.mixture",
            "rlvr.mixture_scale",
            "rlvr.results",
            "rlvr.summary",
            "rlvr.report",
            "rlvr.filters",
            "rlvr.hf",
            "rlvr.progress",
            "rlvr.serve",
        ),
    ),
    ("train", ("rlvr.train",)),
    ("commands", ("rlvr.commands", "rlvr.cli")),
]
"""Lowest first. A name places the module of that name and (except `rlvr`) every module below it."""

EXCEPTIONS: dict[tuple[str, str], str] = {
    ("rlvr.envs.check", "rlvr.check"): (
        "deprecated alias of rlvr.check: tests of environments made by an older `rlvr init` import it"
    ),
}
"""Imports allowed against the rules, each with its reason; every one must still exist."""


def module_name(path: Path) -> str:
    parts = path.relative_to(SRC).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted((SRC / "rlvr").rglob("*.py"))}


def imports(name: str, path: Path, known: set[str]) -> set[str]:
    """The rlvr modules `name` imports, anywhere in its source."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{anchor}.{base}" if base else anchor
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
    return {m for m in found if m in known and m != name}


def layer_of(name: str) -> int:
    best, depth = -1, -1
    for index, (_, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            exact = name == prefix
            below = prefix != "rlvr" and name.startswith(prefix + ".")
            if (exact or below) and prefix.count(".") > depth:
                best, depth = index, prefix.count(".")
    return best


def unit(name: str) -> str:
    """The package a module belongs to (`rlvr.envs.tools` -> `rlvr.envs`); top-level modules are their own."""
    parts = name.split(".")
    return ".".join(parts[:2])


def graph() -> dict[str, set[str]]:
    found = modules()
    known = set(found)
    edges = {name: imports(name, path, known) for name, path in found.items()}
    return {name: {m for m in deps if (name, m) not in EXCEPTIONS} for name, deps in edges.items()}


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one node (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def test_every_module_has_a_layer() -> None:
    unplaced = sorted(name for name in modules() if layer_of(name) < 0)
    assert not unplaced, f"add these modules to a layer in LAYERS: {unplaced}"


def test_no_module_imports_from_a_higher_layer() -> None:
    bad = [
        f"{name} ({LAYERS[layer_of(name)][0]}) imports {dep} ({LAYERS[layer_of(dep)][0]})"
        for name, deps in sorted(graph().items())
        for dep in sorted(deps)
        if layer_of(dep) > layer_of(name)
    ]
    assert not bad, "imports from a higher layer:\n" + "\n".join(bad)


def test_no_import_cycle_between_modules_or_packages() -> None:
    edges = graph()
    assert cycles(edges) == []
    packages: dict[str, set[str]] = {}
    for name, deps in edges.items():
        packages.setdefault(unit(name), set()).update(unit(d) for d in deps if unit(d) != unit(name))
    assert cycles(packages) == []


def test_every_exception_is_still_needed() -> None:
    found = modules()
    known = set(found)
    stale = [pair for pair in EXCEPTIONS if pair[1] not in imports(pair[0], found[pair[0]], known)]
    assert not stale, f"remove these from EXCEPTIONS, the import is gone: {stale}"


def test_the_checker_sees_lazy_and_relative_imports_and_cycles(tmp_path: Path) -> None:
    source = tmp_path / "mod.py"
    source.write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from rlvr.types import Task\n"
        "def f():\n    from rlvr.engine import run_rollouts\n    from . import schema\n"
    )
    known = {"rlvr.types", "rlvr.engine", "rlvr.envs", "rlvr.envs.schema", "rlvr.envs.mod"}
    assert imports("rlvr.envs.mod", source, known) == {"rlvr.types", "rlvr.engine", "rlvr.envs", "rlvr.envs.schema"}
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert layer_of("rlvr") == layer_of("rlvr.engine") and layer_of("rlvr.envs.tools") == layer_of("rlvr.envs")
    assert unit("rlvr.envs.tools") == "rlvr.envs" and unit("rlvr.engine") == "rlvr.engine"
