"""`rlvr init NAME [--kind single|multi|tool]`: scaffold a new environment package.

Writes DIR/NAME/ (DIR defaults to ./environments): a pyproject.toml that registers the entry
point `NAME = "MODULE:load_environment"`, the module MODULE/__init__.py with a working example
environment and a reference player, a README, and tests/test_MODULE.py (check_env, seeding,
the reference player solves every task). MODULE is NAME with dashes turned into underscores.

Kinds: single (add two numbers, one reply), multi (guess a number with higher/lower hints; a
reference player that reads the history), tool (a calculator tool, then the answer).
Then: `pip install -e DIR/NAME` and `rlvr eval NAME -m policy:PLAYER` (the command is printed).
"""

from __future__ import annotations

import argparse
import importlib.util
import keyword
import re
import string
import sys
import tomllib
from importlib.resources import files
from pathlib import Path
from typing import Any

import rlvr
from rlvr.errors import UsageError, cannot_write

_NAME = re.compile(r"[a-z][a-z0-9_-]*")
TEMPLATES = {
    "pyproject.toml.tmpl": "pyproject.toml",
    "README.md.tmpl": "README.md",
    "{kind}.py.tmpl": "{module}/__init__.py",
    "test_env.py.tmpl": "tests/test_{module}.py",
}
"""Template file -> where it goes in the new package."""
KINDS = {
    "single": ("oracle", "add two numbers, answer inside <answer> tags (single turn)"),
    "multi": ("binary_search", "guess a secret number with higher/lower hints (multi-turn)"),
    "tool": ("tool_then_answer", "work out an expression with a calculator tool, then answer (tool use)"),
}
"""Kind -> (its reference player, what its example does)."""


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "init",
        help="scaffold a new environment package (single-turn, multi-turn or tool)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("name", help="environment name: lowercase letters, digits, _ and - (the module uses _)")
    p.add_argument("--kind", choices=list(KINDS), default="single", help="the example to start from (default single)")
    p.add_argument(
        "-o",
        "--output",
        default="environments",
        metavar="DIR",
        help="folder to create NAME/ in (default ./environments)",
    )
    p.set_defaults(run=run)


def module_name(name: str) -> str:
    """The Python module of environment `name`.

    >>> module_name("guess-the-number")
    'guess_the_number'
    """
    return name.replace("-", "_")


def check_name(name: str) -> None:
    """Raise `UsageError` unless `name` can be a new environment's name (and its module's)."""
    module = module_name(name)
    if not _NAME.fullmatch(name) or keyword.iskeyword(module) or not module.isidentifier():
        raise UsageError(
            f"environment name {name!r} cannot name a module; use lowercase letters, digits, _ and -, "
            "starting with a letter (e.g. my-env or my_env)"
        )
    if module in sys.stdlib_module_names or module == "rlvr":
        raise UsageError(f"environment name {name!r} would shadow the module {module!r}; choose another name")
    spec = importlib.util.find_spec(module)
    if spec is not None:
        where = spec.origin or ", ".join(spec.submodule_search_locations or []) or "?"
        raise UsageError(
            f"a module named {module!r} is already importable (from {where}); choose another name, "
            f"or uninstall it first if it is an earlier version of this environment"
        )


def source_checkout() -> Path | None:
    """The rlvr source checkout this rlvr runs from (an editable install), if any."""
    root = Path(rlvr.__file__).resolve().parents[2]
    project = root / "pyproject.toml"
    if not (project.is_file() and (root / "src" / "rlvr").is_dir()):
        return None
    try:
        return root if tomllib.loads(project.read_text(encoding="utf-8"))["project"]["name"] == "rlvr" else None
    except (tomllib.TOMLDecodeError, KeyError, UnicodeDecodeError):
        return None


def install_command(dest: Path) -> str:
    """The pip command that installs the new package (with rlvr's checkout when run from one)."""
    checkout = source_checkout()
    return f"pip install -e {dest.as_posix()}" + (f" -e {checkout.as_posix()}" if checkout else "")


def scaffold(name: str, parent: str | Path = "environments", kind: str = "single") -> Path:
    """Create `parent/name/` from the templates of `kind`; returns its path. Refuses to overwrite."""
    if kind not in KINDS:
        raise UsageError(f"unknown kind {kind!r}; expected one of {', '.join(KINDS)}")
    check_name(name)
    dest = Path(parent) / name
    if dest.exists():
        raise UsageError(f"{dest} already exists; choose another name or another folder with -o")
    module = module_name(name)
    camel = "".join(part.capitalize() for part in module.split("_"))
    player, about = KINDS[kind]
    values = {
        "name": module,
        "env_name": name,
        "kind": kind,
        "about": about,
        "player": player,
        "install": install_command(dest),
        "rlvr_version": rlvr.__version__,
        "dist_name": ("" if module.startswith("rlvr_") else "rlvr-") + module.replace("_", "-"),
        "class_name": camel if camel.endswith("Env") else camel + "Env",
        "path": dest.as_posix(),
    }
    source = files("rlvr") / "templates" / "env"
    for template, target in TEMPLATES.items():
        text = string.Template((source / template.format(kind=kind)).read_text(encoding="utf-8")).substitute(values)
        path = dest / target.format(module=module)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
        except OSError as exc:
            raise UsageError(cannot_write(Path(parent), exc)) from None
    return dest


def run(args: argparse.Namespace) -> int:
    dest = scaffold(args.name, args.output, args.kind)
    module = module_name(args.name)
    print(f"created {dest}/ with " + ", ".join(t.format(module=module) for t in TEMPLATES.values()))
    player = KINDS[args.kind][0]
    print(f"next: {install_command(dest)} && rlvr eval {args.name} -m policy:{player} -n 5 -r 2")
    return 0
