"""The core install (`pip install rlvr`, no extras) imports and runs: no numpy, no torch.

The suite's own venv has every extra, so an import of numpy or torch at the top of a core
module passes there and breaks `import rlvr` for a user who installed the core alone. The
heavy test builds that user's venv (the checkout and `environments/reverse_text` from a fresh
`python -m venv`, their dependencies from the package index) and runs the first commands of
the README in it; the light one checks, in the suite's venv, that importing rlvr and its CLI
loads none of the extras' heavy modules.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
HEAVY_MODULES = ("numpy", "torch", "transformers", "datasets")


def _clean_env() -> dict[str, str]:
    """The environment without this checkout on PYTHONPATH and without the suite's venv."""
    drop = {"PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME"}
    return {k: v for k, v in os.environ.items() if k not in drop} | {"PYTHONNOUSERSITE": "1"}


def _copy_sources(dest: Path) -> tuple[Path, Path]:
    """The package and reverse_text, copied: pip builds in the source folder, and the checkout stays clean."""
    skip = shutil.ignore_patterns("__pycache__", "*.egg-info", "build", "runs")
    core, env = dest / "rlvr", dest / "reverse_text"
    shutil.copytree(ROOT / "src", core / "src", ignore=skip)
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, core / name)
    shutil.copytree(ROOT / "environments" / "reverse_text", env, ignore=skip)
    return core, env


def test_importing_rlvr_and_its_cli_loads_no_extra() -> None:
    code = (
        "import sys, rlvr, rlvr.cli, rlvr.envs, rlvr.engine, rlvr.clients.openai\n"
        f"print(sorted({{m.split('.')[0] for m in sys.modules}} & set({HEAVY_MODULES!r})))"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]", f"importing rlvr loaded {proc.stdout.strip()}: import them where used"


@pytest.mark.heavy
@pytest.mark.timeout(600)
def test_the_core_alone_installs_and_runs(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    bin_dir = venv / "bin"
    env = _clean_env() | {"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}

    def run(*args: str | Path, timeout: float = 300) -> str:
        proc = subprocess.run(
            [str(a) for a in args], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=timeout
        )
        assert proc.returncode == 0, f"{' '.join(map(str, args))}:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
        return proc.stdout

    core, reverse_text = _copy_sources(tmp_path / "src")
    start = time.monotonic()
    run(sys.executable, "-m", "venv", venv)
    run(bin_dir / "python", "-m", "pip", "install", "-q", core, reverse_text, timeout=500)
    installed = time.monotonic() - start

    present = run(
        bin_dir / "python",
        "-c",
        f"import importlib.util; print([m for m in {HEAVY_MODULES!r} if importlib.util.find_spec(m)])",
    )
    assert present.strip() == "[]", f"the core install brought {present.strip()}; it must bring no extra's module"

    where = run(bin_dir / "python", "-c", "import rlvr; print(rlvr.__file__)")
    assert where.strip().startswith(str(venv)), f"rlvr came from {where.strip()}, not the fresh venv"
    assert "eval" in run(bin_dir / "rlvr", "--help")
    assert "reverse_text" in run(bin_dir / "rlvr", "list")
    out = run(bin_dir / "rlvr", "eval", "reverse_text", "-m", "policy:oracle", "-n", "2")
    assert "errors: 0" in out, out
    assert list(tmp_path.glob("runs/eval/reverse_text--policy_oracle--*/results.jsonl")), out
    print(f"core install: {installed:.1f} s; total {time.monotonic() - start:.1f} s")
