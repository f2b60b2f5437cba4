"""Helpers for tests that start a child process and signal it."""

from __future__ import annotations

import signal


def default_sigint() -> None:
    """`preexec_fn` for a child that a test interrupts: a suite started in the background
    (`make test &`) runs with SIGINT ignored, and a child inherits that and would not stop
    (it ran to the end, rc 0); give it the default, as in a terminal."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
