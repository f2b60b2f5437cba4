"""Shared fixtures. `openai_server`: a real OpenAI-compatible HTTP server (tests/openai_server.py)
on 127.0.0.1, started once per session and reset (echo model, no faults, zero counts) per test."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

_HERE = str(Path(__file__).parent)
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)  # tests import the helper module `openai_server`

if TYPE_CHECKING:
    from openai_server import OpenAIServer


@pytest.fixture(scope="session")
def _openai_server_session() -> Iterator[OpenAIServer]:
    # imported here: the server needs the dev extra (uvicorn), which a GPU machine running only
    # tests/test_gpu.py may not have
    from openai_server import OpenAIServer

    with OpenAIServer() as server:
        yield server


@pytest.fixture
def openai_server(_openai_server_session: OpenAIServer) -> Iterator[OpenAIServer]:
    _openai_server_session.reset()
    yield _openai_server_session
    _openai_server_session.reset()


@pytest.fixture(scope="module")
def one_thread() -> Iterator[None]:
    """One torch intra-op thread for a module: tiny matrices gain nothing from more, and on a
    busy 2-core machine OpenMP thread pools stall. Use with
    `pytestmark = pytest.mark.usefixtures("one_thread")`."""
    import torch

    saved = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(saved)


@pytest.fixture(scope="session")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny random model rlvr builds itself (preset "tiny", seed 0), one for the session:
    read it, or copy it before changing it."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from rlvr.models import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("tiny"), preset="tiny", seed=0)


@pytest.fixture(scope="session")
def scramble():
    """`scramble(model, seed)`: large random weights, N(0, 0.3) on every matrix. Greedy replies
    then vary with the prompt and never end early, so decoding mistakes show as different ids."""
    import torch

    def apply(model, seed: int = 0):
        gen = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            for p in model.parameters():
                if p.dim() > 1:
                    p.normal_(0.0, 0.3, generator=gen)
        return model

    return apply


@pytest.fixture(scope="module")
def scrambled_tiny(scramble):
    """A tiny model on its own tokenizer, scrambled (seed 1), SDPA attention, in eval mode: the
    training forward's test model (tests/test_logprobs.py, tests/test_update.py)."""
    from rlvr.models.tiny import default_corpus, init_model
    from rlvr.models.tokenizer import train_tokenizer

    tokenizer = train_tokenizer(default_corpus(), vocab_size=600, model_max_length=512)
    model = scramble(init_model(tokenizer, preset="tiny", seed=0), seed=1)
    model.config._attn_implementation = "sdpa"
    return model.eval()


@pytest.fixture(scope="module")
def scrambled_chat(tmp_path_factory, scramble):
    """The tiny Qwen3-architecture model built by `rlvr.models` (its own tokenizer and chat
    template), with large random weights (seed 1: replies never end early), and its tokenizer:
    the static-slot tests' model (tests/test_local_slots.py, tests/test_local_prefill.py)."""
    import transformers

    from rlvr.models import build_tiny_model

    path = build_tiny_model(tmp_path_factory.mktemp("tiny"), preset="tiny")
    model = transformers.AutoModelForCausalLM.from_pretrained(path).eval()
    tokenizer = transformers.AutoTokenizer.from_pretrained(path)
    return scramble(model, seed=1), tokenizer
