"""Load a Python file that is not part of a package (a script, a scaffolded test) as a module."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType


def load_module(path: Path, name: str | None = None) -> ModuleType:
    """The module at `path`, registered in sys.modules as `name` (default: the file's stem), so
    that dataclasses and pickling can look it up."""
    spec = importlib.util.spec_from_file_location(name or path.stem, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module
