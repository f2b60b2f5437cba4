"""Shared fixtures. `openai_server`: a real OpenAI-compatible HTTP server (tests/openai_server.py)
on 127.0.0.1, started once per session and reset (echo model, no faults, zero counts) per test."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

_HERE = str(Path(__file__).parent)
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)  # tests import the helper module `openai_server`

from openai_server import OpenAIServer


@pytest.fixture(scope="session")
def _openai_server_session() -> Iterator[OpenAIServer]:
    with OpenAIServer() as server:
        yield server


@pytest.fixture
def openai_server(_openai_server_session: OpenAIServer) -> Iterator[OpenAIServer]:
    _openai_server_session.reset()
    yield _openai_server_session
    _openai_server_session.reset()
