"""`rlvr init NAME`: scaffold a new environment package.

Writes DIR/NAME/ (DIR defaults to ./environments): a pyproject.toml that registers the entry
point `NAME = "NAME:load_environment"`, the module NAME/__init__.py with a working example
environment and a reference player, a README, and tests/test_NAME.py that runs `check_env`.
Then: `pip install -e DIR/NAME` and `rlvr eval NAME -m policy:oracle`.
"""

from __future__ import annotations

import argparse
import importlib.util
import keyword
import re
import string
import sys
from importlib.resources import files
from pathlib import Path
from typing import Any

from rlvr.errors import UsageError

_NAME = re.compile(r"[a-z][a-z0-9_]*")
TEMPLATES = {
    "pyproject.toml.tmpl": "pyproject.toml",
    "README.md.tmpl": "README.md",
    "module.py.tmpl": "{name}/__init__.py",
    "test_env.py.tmpl": "tests/test_{name}.py",
}
"""Template file -> where it goes in the new package."""


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "init",
        help="scaffold a new environment package",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("name", help="environment and module name: lowercase letters, digits and _")
    p.add_argument(
        "-o",
        "--output",
        default="environments",
        metavar="DIR",
        help="folder to create NAME/ in (default ./environments)",
    )
    p.set_defaults(run=run)


def check_name(name: str) -> None:
    """Raise `UsageError` unless `name` can be a new environment's module name."""
    if not _NAME.fullmatch(name) or keyword.iskeyword(name):
        raise UsageError(
            f"environment name {name!r} is not a valid module name; use lowercase letters, digits and _, "
            "starting with a letter (e.g. my_env)"
        )
    if name in sys.stdlib_module_names or name == "rlvr":
        raise UsageError(f"environment name {name!r} would shadow the module {name!r}; choose another name")
    spec = importlib.util.find_spec(name)
    if spec is not None:
        where = spec.origin or ", ".join(spec.submodule_search_locations or []) or "?"
        raise UsageError(
            f"a module named {name!r} is already importable (from {where}); choose another name, "
            f"or uninstall it first if it is an earlier version of this environment"
        )


def scaffold(name: str, parent: str | Path = "environments") -> Path:
    """Create `parent/name/` from the templates; returns its path. Refuses to overwrite."""
    check_name(name)
    dest = Path(parent) / name
    if dest.exists():
        raise UsageError(f"{dest} already exists; choose another name or another folder with -o")
    camel = "".join(part.capitalize() for part in name.split("_"))
    values = {
        "name": name,
        "dist_name": ("" if name.startswith("rlvr_") else "rlvr-") + name.replace("_", "-"),
        "class_name": camel if camel.endswith("Env") else camel + "Env",
        "path": dest.as_posix(),
    }
    source = files("rlvr") / "templates" / "env"
    for template, target in TEMPLATES.items():
        text = string.Template((source / template).read_text(encoding="utf-8")).substitute(values)
        path = dest / target.format(name=name)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return dest


def run(args: argparse.Namespace) -> int:
    dest = scaffold(args.name, args.output)
    print(f"created {dest}/ with " + ", ".join(t.format(name=args.name) for t in TEMPLATES.values()))
    print(f"next: pip install -e {dest} && rlvr eval {args.name} -m policy:oracle -n 5 -r 2")
    return 0
