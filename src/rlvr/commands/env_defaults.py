"""An environment's own defaults for `rlvr eval`, from its pyproject.toml:

    [tool.rlvr.eval]
    num_tasks = 50      # -n
    rollouts = 2        # -r
    max_tokens = 256    # sampling keys, as in -S: max_tokens, temperature, top_p, stop

Flags given on the command line win over them. The file is found beside the environment's
package (a source checkout or an editable install: `pip install -e environments/NAME`), and only
when it declares that environment's entry point; an install without its pyproject.toml has none.
"""

from __future__ import annotations

import argparse
import importlib.util
import tomllib
from pathlib import Path
from typing import Any

from rlvr.commands.sampling import SAMPLING_KEYS, check_sampling_values
from rlvr.errors import UsageError

RUN_KEYS: dict[str, type] = {"num_tasks": int, "rollouts": int, "concurrency": int, "split": str}
"""The run settings `[tool.rlvr.eval]` may set, beside `SAMPLING_KEYS`."""


def eval_defaults(env: str) -> tuple[dict[str, Any], Path | None]:
    """`[tool.rlvr.eval]` of `env`'s pyproject.toml (checked), and that file; ({}, None) when
    there is none."""
    path = pyproject_of(env)
    if path is None:
        return {}, None
    try:
        project = tomllib.loads(path.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise UsageError(f"{path} is not valid TOML: {exc}") from None
    table = project.get("tool", {}).get("rlvr", {}).get("eval", {})
    source = f"{path} [tool.rlvr.eval]"
    if not isinstance(table, dict):
        raise UsageError(f"{source} must be a table of settings")
    valid = [*RUN_KEYS, *SAMPLING_KEYS]
    for key, value in table.items():
        if key not in valid:
            raise UsageError(f"{source}: unknown key {key!r}; valid keys: {', '.join(valid)}")
        if key in RUN_KEYS and (type(value) is not RUN_KEYS[key]):
            raise UsageError(
                f"{source}: {key} must be {'an integer' if RUN_KEYS[key] is int else 'a string'}, got {value!r}"
            )
    if table.get("split", "eval") not in ("eval", "train"):
        raise UsageError(f'{source}: split must be "eval" or "train", got {table["split"]!r}')
    check_sampling_values({k: v for k, v in table.items() if k in SAMPLING_KEYS}, source)
    return dict(table), path


def pyproject_of(env: str) -> Path | None:
    """The pyproject.toml that declares `env`'s entry point, beside its package (or one folder
    up, a src layout); None when there is none."""
    from rlvr.registry import GROUP, entry_point

    ep = entry_point(env)
    if ep is None:
        return None
    try:
        spec = importlib.util.find_spec(ep.module.split(".")[0])
    except (ImportError, ValueError):
        return None
    if spec is None or spec.origin is None:
        return None
    origin = Path(spec.origin)
    home = origin.parent.parent if origin.name == "__init__.py" else origin.parent
    for folder in (home, home.parent):
        path = folder / "pyproject.toml"
        if not path.is_file():
            continue
        try:
            project = tomllib.loads(path.read_text(encoding="utf-8"))
        except (tomllib.TOMLDecodeError, UnicodeDecodeError):
            continue
        if ep.name in project.get("project", {}).get("entry-points", {}).get(GROUP, {}):
            return path
    return None


def apply_env_defaults(args: argparse.Namespace) -> None:
    """Fill -n, -r, -c and --split not given from the env's `[tool.rlvr.eval]`, else rlvr's
    defaults; keep its sampling keys for `rlvr.commands.sampling`."""
    table, path = eval_defaults(args.env)
    builtin = {"num_tasks": 5, "rollouts": 3, "concurrency": 32, "split": "eval"}
    for key in RUN_KEYS:
        if getattr(args, key) is None:
            setattr(args, key, table.get(key, builtin[key]))
    args.env_sampling = {k: v for k, v in table.items() if k not in RUN_KEYS}
    if table:
        print(f"defaults from {path}: {', '.join(f'{k}={v}' for k, v in table.items())}", flush=True)
