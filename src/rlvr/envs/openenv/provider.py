"""An OpenEnv app started as a local uvicorn process: OpenEnv's runtime-provider interface, no Docker."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
import time
import weakref
from typing import Any

from openenv.core.containers.runtime import RuntimeProvider

from rlvr.errors import EnvError

_RUNNING = re.compile(r"Uvicorn running on (http://\S+)")


class LocalServer(RuntimeProvider):
    """`python -m uvicorn APP` on 127.0.0.1 and a free port, its log kept in a temporary file.

    `app` is an import path (`package.server.app:app`, OpenEnv's layout); `app_dir` is put first
    on the server's import path (uvicorn's `--app-dir`)."""

    def __init__(self, app: str, *, app_dir: str | None = None, start_timeout_s: float = 60.0) -> None:
        self.app, self.app_dir, self.start_timeout_s = app, app_dir, start_timeout_s
        self.process: subprocess.Popen[bytes] | None = None
        self.base_url: str | None = None
        self._finalizer: weakref.finalize[Any, Any] | None = None
        self._log: str | None = None
        """The file the server writes its output to (appending: reading it moves no offset of the server's)."""

    def log_tail(self, chars: int = 600) -> str:
        """The end of the server's output, on one line."""
        if self._log is None or not os.path.exists(self._log):
            return ""
        with open(self._log, "rb") as f:
            return " ".join(f.read()[-chars:].decode(errors="replace").split())

    def start(self, port: int | None = None, env_vars: dict[str, str] | None = None, **kwargs: Any) -> str:
        """Start the server and wait until it says where it listens; its base URL."""
        if self.process is not None and self.process.poll() is None:
            return str(self.base_url)
        command = [sys.executable, "-m", "uvicorn", self.app, "--host", "127.0.0.1", "--port", str(port or 0)]
        command += ["--ws", "websockets-sansio", "--no-access-log", "--log-level", "info"]
        if self.app_dir is not None:
            command += ["--app-dir", self.app_dir]
        fd, self._log = tempfile.mkstemp(prefix="rlvr-openenv-", suffix=".log")
        os.close(fd)
        environ = {**os.environ, "PYTHONUNBUFFERED": "1", **(env_vars or {})}
        with open(self._log, "ab") as sink:
            self.process = subprocess.Popen(command, stdout=sink, stderr=subprocess.STDOUT, env=environ)
        # a run that ends without aclose() (an exception before it, the interpreter exiting) still stops it
        self._finalizer = weakref.finalize(self, _kill, self.process, self._log)
        deadline = time.monotonic() + self.start_timeout_s
        while time.monotonic() < deadline:
            found = _RUNNING.search(self.log_tail(20_000))
            if found:
                self.base_url = found.group(1)
                return self.base_url
            if self.process.poll() is not None:
                break
            time.sleep(0.05)
        tail = self.log_tail()
        self.stop()
        why = "exited" if tail else f"did not start within {self.start_timeout_s:g} s"
        raise EnvError(f"OpenEnv app {self.app!r} {why}" + (f"; its output ends: {tail}" if tail else ""))

    def wait_for_ready(self, timeout_s: float = 30.0) -> None:
        """Wait until `/health` answers 200."""
        import requests

        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                if requests.get(f"{self.base_url}/health", timeout=2).status_code == 200:
                    return
            except requests.RequestException:
                pass
            time.sleep(0.05)
        raise EnvError(f"OpenEnv app {self.app!r} at {self.base_url} did not answer /health within {timeout_s:g} s")

    def stop(self) -> None:
        """Stop the server (SIGTERM, then SIGKILL after 10 s); safe to call twice."""
        process, self.process = self.process, None
        if self._finalizer is not None:
            self._finalizer.detach()
        if process is not None and process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=5)
        log, self._log = self._log, None
        if log is not None and os.path.exists(log):
            os.unlink(log)
        self.base_url = None


def _kill(process: subprocess.Popen[bytes], log: str) -> None:
    if process.poll() is None:
        process.kill()
        process.wait(timeout=5)
    if os.path.exists(log):
        os.unlink(log)
