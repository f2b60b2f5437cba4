"""A hostile or broken server, against real local HTTP servers: an API key echoed in any form or
set too short, a compressed body that expands without end, a reply with a thousand tool calls,
a lone surrogate in tool-call arguments, terminal control sequences in a reply."""

from __future__ import annotations

import base64
import io
import json
import resource
import sys
import threading
import types
import urllib.parse
import zlib
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib.metadata import EntryPoint

import pytest
from openai_server import Reply
from test_eval_http import QUESTION, eval_cli, http_arith_env, solver, solver_reward, tool_env

import rlvr.registry
from rlvr.cli import main
from rlvr.clients.openai import OpenAIClient
from rlvr.engine import run_rollouts
from rlvr.errors import ClientError
from rlvr.types import SamplingArgs

__all__ = ["http_arith_env"]  # (a fixture used here)

HI = [{"role": "user", "content": "hi"}]

# ---- the API key ------------------------------------------------------------------------------


def test_a_short_key_is_not_used_to_rewrite_replies(openai_server, http_arith_env, tmp_path, monkeypatch) -> None:
    """`OPENAI_API_KEY=e` turned every `e` of every reply into `[API key redacted]`; here the key
    `1` would have broken every answer holding a 1. Now a short key is not redacted, with a warning."""
    monkeypatch.setenv("RLVR_TEST_KEY", "1")
    openai_server.reset(solver)
    with pytest.warns(UserWarning, match=r"the API key in \$RLVR_TEST_KEY has 1 characters: too short to redact"):
        assert eval_cli(openai_server, tmp_path / "run", max_retries=0, key_var="RLVR_TEST_KEY", timeout=30) == 0
    records = [json.loads(line) for line in (tmp_path / "run" / "results.jsonl").read_text().splitlines()]
    assert len(records) == 45 and sum("1" in r["turns"][0]["completion"]["text"] for r in records) > 10
    for r in records:
        task = types.SimpleNamespace(question=r["prompt"][-1]["content"])
        assert r["error"] is None and r["reward"] == solver_reward(task), r["turns"][0]["completion"]["text"]


SECRET = "sk-rlvr+test/0123456789=abcdef"
"""A key with characters that URL encoding changes."""


def _key_forms() -> dict[str, str]:
    """The key as a server might echo it, and what of each form must not be written anywhere."""
    basic = base64.b64encode(f"user:{SECRET}".encode()).decode()
    return {
        "plain": SECRET,
        "url": urllib.parse.quote(SECRET, safe=""),
        "base64": base64.b64encode(SECRET.encode()).decode().rstrip("="),
        "basic": basic[8:-4],  # the key's part of `Basic base64(user:KEY)`
    }


def echo_key_everywhere(messages, tools):
    """Echoes the key in its text and tool-call arguments, then answers from the tool's result."""
    if messages[-1]["role"] == "tool":
        return f"{SECRET} The answer is {messages[-1]['content']}"
    a, b = map(int, QUESTION.search(messages[-1]["content"]).groups())
    basic = base64.b64encode(f"user:{SECRET}".encode()).decode()
    text = f"url {urllib.parse.quote(SECRET, safe='')} b64 {base64.b64encode(SECRET.encode()).decode()} Basic {basic}"
    args = json.dumps({"a": a, "b": b, "note": SECRET})[:-1] + f', "more": "{urllib.parse.quote(SECRET)}"}}'
    return Reply(text=text, tool_calls=[("add", args)])


def test_a_key_in_any_form_in_text_or_tool_calls_is_written_nowhere(
    openai_server, tmp_path, monkeypatch, capsys
) -> None:
    """Tool-call arguments were stored unredacted in results.jsonl and report.html, and URL-encoded
    and base64 copies of an echoed key reached the terminal."""
    module = types.ModuleType("rlvr_test_http_tools")
    module.load_environment = lambda: tool_env(n=4)
    monkeypatch.setitem(sys.modules, module.__name__, module)
    found = dict(rlvr.registry._entry_points())
    found["http_tools"] = EntryPoint("http_tools", f"{module.__name__}:load_environment", rlvr.registry.GROUP)
    monkeypatch.setattr(rlvr.registry, "_entry_points", lambda: found)
    monkeypatch.setenv("RLVR_TEST_KEY", SECRET)
    openai_server.reset(echo_key_everywhere)
    out = tmp_path / "run"
    argv = ["eval", "http_tools", "-n", "-1", "-m", "scripted", "-b", openai_server.base_url, "-k", "RLVR_TEST_KEY"]
    assert main([*argv, "--max-retries", "0", "-o", str(out)]) == 0
    assert main(["report", str(out)]) == 0
    written = "".join(f.read_text() for f in out.iterdir() if f.is_file()) + "".join(capsys.readouterr())
    records = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    calls = [r["turns"][0]["completion"]["tool_calls"][0] for r in records]
    assert len(records) == 12 and all("[API key redacted]" in c["arguments"] for c in calls)
    assert "report.html" in {f.name for f in out.iterdir()}
    for form, text in _key_forms().items():
        assert text not in written, form


# ---- the size of a response --------------------------------------------------------------------------


class Served:
    """A stdlib HTTP server on 127.0.0.1 answering every POST with one fixed body and headers."""

    def __init__(self, body: bytes, headers: dict[str, str]) -> None:
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("content-length") or 0))
                outer.requests += 1
                self.send_response(200)
                for k, v in {"content-type": "application/json", "content-length": str(len(body)), **headers}.items():
                    self.send_header(k, v)
                self.end_headers()
                try:
                    self.wfile.write(body)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client stopped reading

            def log_message(self, *args: object) -> None:
                pass

        self.requests = 0
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.base_url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def __enter__(self) -> Served:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


def completion_body(content_bytes: Iterator[bytes]) -> Iterator[bytes]:
    yield b'{"id":"x","object":"chat.completion","created":0,"model":"m","choices":[{"index":0,'
    yield b'"finish_reason":"stop","message":{"role":"assistant","content":"'
    yield from content_bytes
    yield b'"}}]}'


def gzipped(parts: Iterator[bytes]) -> bytes:
    packer = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    return b"".join(packer.compress(p) for p in parts) + packer.flush()


async def test_a_gzip_bomb_is_stopped_at_the_cap_and_a_small_gzip_body_is_read() -> None:
    """A 1.04 MB gzip body expanding to 1 GiB took one request to 2.17 GB of memory (here 256 MiB
    of text in 254 KB): now reading stops at 32 MiB decompressed, and the request fails as a
    malformed response."""
    bomb = gzipped(completion_body(b"a" * 2**20 for _ in range(256)))
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB
    with Served(bomb, {"content-encoding": "gzip"}) as server:
        client = OpenAIClient("m", base_url=server.base_url, max_retries=1, backoff_s=0.001)
        with pytest.raises(
            ClientError, match=r"failed 2 times; last: malformed response.*larger than 32 MiB decompressed"
        ):
            await client.chat(HI, SamplingArgs())
        await client.aclose()
    grown_mb = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    assert len(bomb) < 300_000 and server.requests == 2 and grown_mb < 200, grown_mb
    small = gzipped(completion_body(iter([b"hello " * 1000])))
    with Served(small, {"content-encoding": "gzip"}) as server:
        async with OpenAIClient("m", base_url=server.base_url, max_retries=0) as client:
            assert (await client.chat(HI, SamplingArgs())).text == "hello " * 1000


async def test_a_plain_body_over_the_cap_is_stopped_on_the_wire() -> None:
    body = b"".join(completion_body(iter([b"a" * (3 * 2**20)])))
    with Served(body, {}) as server:
        client = OpenAIClient("m", base_url=server.base_url, max_retries=0, max_response_mb=2)
        with pytest.raises(ClientError, match=r"larger than 2 MiB on the wire"):
            await client.chat(HI, SamplingArgs())
        await client.aclose()
        async with OpenAIClient("m", base_url=server.base_url, max_retries=0, max_response_mb=4) as client:
            assert len((await client.chat(HI, SamplingArgs())).text) == 3 * 2**20


# ---- tool calls ------------------------------------------------------------------------------------


async def test_a_reply_with_a_thousand_tool_calls_runs_only_the_first_32(openai_server) -> None:
    """100,000 tool calls in one reply ran one by one (about 2.8 hours with a sandboxed tool)."""

    def many_calls(messages, tools):
        if messages[-1]["role"] == "tool":
            return f"The answer is {messages[-1]['content']}"
        a, b = map(int, QUESTION.search(messages[-1]["content"]).groups())
        return Reply(tool_calls=[("add", {"a": a, "b": b})] * 1000)

    openai_server.reset(many_calls)
    env = tool_env(n=1)
    async with OpenAIClient("scripted", base_url=openai_server.base_url, max_retries=0) as client:
        [rollout] = await run_rollouts(env, client, env.dataset, concurrency=1, sampling=SamplingArgs(max_tokens=10**6))
    replies = [m["content"] for m in rollout.turns[0].env_messages]
    skipped = "Error: 1000 tool calls in one reply; only the first 32 were run, not this one"
    assert rollout.error is None and len(replies) == 1000 and replies.count(skipped) == 1000 - 32
    assert all(r == replies[0] for r in replies[:32]) and replies[0] != skipped


async def test_a_lone_surrogate_in_tool_call_arguments_keeps_the_rollout(openai_server) -> None:
    """Arguments holding `"\\ud800"` (valid JSON, no UTF-8) failed the rollout: the next request
    could not be encoded. Now it goes back as U+FFFD, as the model's text would."""

    def surrogate_call(messages, tools):
        if messages[-1]["role"] == "tool":
            return f"The answer is {messages[-1]['content']}"
        return Reply(text="\udfff", tool_calls=[("add", '{"a": "\ud800", "b": 2}')])

    openai_server.reset(surrogate_call)
    env = tool_env(n=2)
    async with OpenAIClient("scripted", base_url=openai_server.base_url, max_retries=0) as client:
        rollouts = await run_rollouts(env, client, env.dataset, concurrency=2)
    for r in rollouts:
        assert r.error is None and len(r.turns) == 2, r.error
        assert r.turns[0].completion.tool_calls[0].arguments == '{"a": "\ud800", "b": 2}'  # kept as sent
    sent_back = [b["messages"][-2] for b in openai_server.bodies if b["messages"][-1]["role"] == "tool"]
    assert sent_back and all(
        m["tool_calls"][0]["function"]["arguments"] == '{"a": "\ufffd", "b": 2}' for m in sent_back
    )


# ---- rlvr play --------------------------------------------------------------------------------------


def test_play_shows_a_reply_without_its_terminal_control_sequences() -> None:
    """A model's escape sequences reached the terminal: an OSC 52 clipboard write, a screen clear."""
    from rich.console import Console

    from rlvr.commands.terminal import Terminal

    screen = io.StringIO()
    terminal = Terminal(Console(file=screen, force_terminal=True, color_system=None, width=80))
    clipboard = "\x1b]52;c;" + base64.b64encode(b"rm -rf ~").decode() + "\x07"
    terminal.say("assistant\x1b]0;title\x07", f"{clipboard}my move\x1b[2J\x1b[1;1H is 5\x9b2J")
    shown = screen.getvalue()
    assert "my move is 5" in shown and "]52;" not in shown and "]0;" not in shown
    assert "\x1b[2J" not in shown and "\x9b" not in shown and "\x07" not in shown
