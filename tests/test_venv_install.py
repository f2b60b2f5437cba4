"""scripts/venv_install.py, the Makefile's installer: pip's settings become uv's flags, a long
install prints a line now and then, a failed uv run is retried by pip."""

from __future__ import annotations

import doctest
import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "venv_install.py"


def _script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("venv_install", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_doctests() -> None:
    assert doctest.testmod(_script()).failed == 0


def test_pip_config_listing_becomes_uv_flags() -> None:
    """The listing as pip prints it (config files and PIP_* variables together, here with this
    machine's shape: an env find-links, two extra indexes in one value, a constraint)."""
    vi = _script()
    listing = "\n".join(
        [
            ":env:.default-timeout='180'",
            ":env:.find-links='/opt/wheels'",
            "global.cert='/etc/ssl/certs/ca-certificates.crt'",
            "global.constraint='/etc/xdg/pip/constraints.txt'",
            "global.extra-index-url='file:///opt/pypi/simple file:///opt/pypi-more/simple'",
            "global.find-links='/opt/wheels'",
            'global.index-url="https://mirror.example/simple"',
        ]
    )
    assert vi.uv_args(vi.pip_options(listing)) == [
        "--index-strategy",
        "unsafe-best-match",
        "--index-url",
        "https://mirror.example/simple",
        "--extra-index-url",
        "file:///opt/pypi/simple",
        "--extra-index-url",
        "file:///opt/pypi-more/simple",
        "--find-links",
        "/opt/wheels",
        "--constraint",
        "/etc/xdg/pip/constraints.txt",
    ]
    assert vi.uv_args(vi.pip_options("")) == ["--index-strategy", "unsafe-best-match"]


def test_a_long_install_prints_a_line_every_tick(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    vi = _script()
    monkeypatch.setattr(vi, "TICK_S", 0.2)
    rc = vi.run_ticking([sys.executable, "-c", "import time, sys; time.sleep(0.9); sys.exit(3)"], "installing (x)")
    lines = capsys.readouterr().out.splitlines()
    assert rc == 3
    assert 3 <= len(lines) <= 5 and all(line.startswith("make: installing (x): ") for line in lines)


def test_failed_uv_is_retried_by_pip(tmp_path: Path) -> None:
    """A venv whose uv fails (here a uv that exits 2): the same specs go to the venv's pip (here
    a python that records its arguments)."""
    bin_dir = tmp_path / "venv" / "bin"
    bin_dir.mkdir(parents=True)
    calls = tmp_path / "calls"
    for name, body in (("uv", "echo uv-ran >&2; exit 2"), ("python", f'echo "$*" >> {calls}')):
        (bin_dir / name).write_text(f"#!/bin/sh\n{body}\n")
        (bin_dir / name).chmod(0o755)
    done = subprocess.run(
        [sys.executable, SCRIPT, tmp_path / "venv", "torch==2.13.0", "-e", ".[train]"],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert "uv-ran" in done.stderr and "make: uv failed; installing with pip instead" in done.stdout
    assert calls.read_text().splitlines() == ["-m pip config list", "-m pip install -qq torch==2.13.0 -e .[train]"]
