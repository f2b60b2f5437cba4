"""Install packages into a venv for the Makefile: by uv where the venv has it, else by pip.

    python scripts/venv_install.py VENV SPEC...      (e.g. torch==2.13.0 -e '.[train]' -e environments/x)

uv resolves once and downloads and unpacks in parallel; pip builds each editable package in an
isolated environment of its own (each fetching setuptools) and compiles every module. uv does
not read pip's configuration, so the indexes, find-links and constraints that `pip config list`
shows (config files and PIP_* variables: here the local index of CPU torch) become uv's flags,
with pip's choice among indexes (the best version of any index, not the first index's). A
failed uv run is retried by pip. A line every `TICK_S` seconds says the install goes on.

Stdlib only: it runs with the venv's python before anything is installed.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path

TICK_S = 20
"""Seconds between "still installing" lines."""

# pip's option -> uv's flag (each value of a list repeats the flag)
UV_FLAGS = {
    "index-url": "--index-url",
    "extra-index-url": "--extra-index-url",
    "find-links": "--find-links",
    "constraint": "--constraint",
}


def pip_options(listing: str) -> dict[str, list[str]]:
    """Option -> values from `pip config list` (`global.find-links='/opt/wheels'`,
    `:env:.extra-index-url='a b'`); a later source of the same option is appended.

    >>> pip_options("global.extra-index-url='file:///a file:///b'\\n:env:.find-links='/w'\\nglobal.timeout='60'")
    {'extra-index-url': ['file:///a', 'file:///b'], 'find-links': ['/w'], 'timeout': ['60']}
    """
    out: dict[str, list[str]] = {}
    for line in listing.splitlines():
        key, sep, value = line.partition("=")
        if not sep or "." not in key:
            continue
        option = key.rsplit(".", 1)[1]
        for each in value.strip().strip("'\"").split():
            if each not in out.setdefault(option, []):
                out[option].append(each)
    return out


def uv_args(options: dict[str, list[str]]) -> list[str]:
    """uv's flags for pip's options: indexes, find-links and constraints, and pip's choice among
    indexes (uv by default takes a package from the first index that has it).

    >>> uv_args({"find-links": ["/w"], "constraint": ["/c.txt"], "timeout": ["60"]})
    ['--index-strategy', 'unsafe-best-match', '--find-links', '/w', '--constraint', '/c.txt']
    """
    args = ["--index-strategy", "unsafe-best-match"]
    for option, flag in UV_FLAGS.items():
        for value in options.get(option, []):
            args += [flag, value]
    return args


def run_ticking(cmd: list[str], label: str) -> int:
    """Run `cmd`, printing `label` and the seconds so far every `TICK_S` seconds until it ends."""
    start = time.monotonic()
    done = threading.Event()

    def tick() -> None:
        while not done.wait(TICK_S):
            print(f"make: {label}: {time.monotonic() - start:.0f} s", flush=True)

    ticker = threading.Thread(target=tick, daemon=True)
    ticker.start()
    try:
        return subprocess.call(cmd)
    finally:
        done.set()


def main(argv: list[str]) -> int:
    venv, specs = Path(argv[0]), argv[1:]
    python, uv = venv / "bin" / "python", venv / "bin" / "uv"
    if uv.exists():
        listing = subprocess.run(
            [str(python), "-m", "pip", "config", "list"], capture_output=True, text=True, check=False
        ).stdout
        cmd = [str(uv), "pip", "install", "-q", "--python", str(python), *uv_args(pip_options(listing)), *specs]
        if run_ticking(cmd, "installing (uv)") == 0:
            return 0
        print("make: uv failed; installing with pip instead", flush=True)
    # -qq: errors only. A pip config that names index folders absent here (extra-index-url =
    # file://...) makes -q print one "Location ... is ignored" warning per package looked up.
    return run_ticking([str(python), "-m", "pip", "install", "-qq", *specs], "installing (pip)")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
