"""`rlvr eval` against a real OpenAI-compatible server nobody here wrote: `transformers serve`
(transformers' `serving` extra) on the CPU, serving a tiny model that rlvr builds itself.

One server for the module (about 5-10 s to start); each eval sends a few short requests. The
server runs torch on one thread: on a busy 2-core machine its default thread pool slows
generation from ~200 to ~10 tokens/s.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("fastapi", reason="transformers serve needs the serving extra (fastapi)")
pytest.importorskip("transformers")

from rlvr.cli import main
from rlvr.clients.openai import OpenAIClient
from rlvr.errors import ClientError
from rlvr.types import SamplingArgs

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str, Path]]:
    """(model name, base URL, server log) of `transformers serve` serving a fresh tiny model."""
    from rlvr.models import build_tiny_model

    root = tmp_path_factory.mktemp("serve")
    model = str(build_tiny_model(root / "tiny"))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    log = root / "server.log"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    command = [sys.executable, "-m", "transformers.cli.transformers", "serve", model]
    command += ["--host", "127.0.0.1", "--port", str(port), "--device", "cpu"]
    with log.open("w") as out:
        server = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env)
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2):
                    break
            except OSError:
                if server.poll() is not None or time.monotonic() > deadline:
                    pytest.fail(f"transformers serve did not start:\n{log.read_text()[-3000:]}")
                time.sleep(0.5)
        yield model, f"http://127.0.0.1:{port}/v1", log
    finally:
        server.terminate()
        server.wait(timeout=30)


def chat_requests(log: Path) -> int:
    return log.read_text().count('"POST /v1/chat/completions HTTP/1.1" 200')


def evaluate(served: tuple[str, str, Path], env: str, out: Path, *flags: str) -> list[dict]:
    model, url, _ = served
    code = main(["eval", env, "-m", model, "-b", url, "-t", "16", "-o", str(out), "-q", *flags])
    assert code == 0
    return [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]


def test_reverse_text_samples_differ_within_a_group(served, tmp_path, capsys) -> None:
    before = chat_requests(served[2])
    records = evaluate(served, "reverse_text", tmp_path / "run", "-n", "2", "-r", "3")
    assert len(records) == 6 and not [r["error"] for r in records if r["error"]]
    for task in ("eval-0", "eval-1"):
        texts = {r["turns"][0]["completion"]["text"] for r in records if r["task_id"] == task}
        assert len(texts) == 3, texts  # the model's generation config samples; greedy would repeat
    assert "max tokens per reply: 16 (-t); 6 of 6 replies hit it" in capsys.readouterr().out
    assert chat_requests(served[2]) - before == 6  # one request per rollout: no retries


def test_tictactoe_games_finish(served, tmp_path) -> None:
    records = evaluate(served, "tictactoe", tmp_path / "run", "-n", "1", "-r", "2")
    assert len(records) == 2 and not [r["error"] for r in records if r["error"]]
    assert all(r["turns"] and r["stop_reason"] for r in records)


async def test_a_wrong_model_name_shows_the_servers_reason(served) -> None:
    _, url, _ = served
    async with OpenAIClient("no-such-model", base_url=url) as client:
        with pytest.raises(ClientError, match=r"HTTP 400: Server is pinned to '.*tiny'; requested 'no-such-model'"):
            await client.chat([{"role": "user", "content": "hi"}], SamplingArgs(max_tokens=4))


@pytest.mark.heavy
@pytest.mark.timeout(900)
def test_tictactoe_games_that_write_tool_calls_have_no_errors(served, tmp_path) -> None:
    """20 games at the env's own token limit (256), 3 turns each: the untrained model writes
    `<tool_call>` (with no JSON after it) in about one reply of three, which transformers serve
    parses by its Qwen template unless the model's tokenizer has a response template without
    tool calls (`rlvr model new` writes one); parsed, each such reply was an HTTP 400 and an
    error record (12 of 20 games at 3 turns, 20 of 20 at 8). All 8 turns of 20 games take over
    15 minutes on busy cores; 3 took 256 s."""
    model, url, _ = served
    out = tmp_path / "run"
    argv = ["eval", "tictactoe", "-m", model, "-b", url, "-n", "10", "-r", "2", "-a", '{"max_turns": 3}']
    assert main([*argv, "-o", str(out), "-q"]) == 0
    records = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert len(records) == 20
    assert [r["error"] for r in records if r["error"]] == []
    texts = [t["completion"]["text"] for r in records for t in r["turns"]]
    with_tag = sum("<tool_call>" in text for text in texts)
    print(f"{with_tag} of {len(texts)} replies wrote <tool_call>")
    assert with_tag >= 1, "no reply wrote <tool_call>: the test no longer exercises the server's tool-call parsing"
