"""MCPEnv against real MCP servers (written with the SDK, run as subprocesses): schemas from the
server, tool calls end to end, bad input, timeouts, a server that cannot start or dies mid-run,
and the lifecycle (one server per environment and event loop, stopped by aclose or teardown)."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import time

import pytest
from child_process import default_sigint

pytest.importorskip("mcp")

from rlvr import Policy, Rubric
from rlvr.engine import run_rollouts
from rlvr.envs.mcp import MCPEnv, MCPServerConfig, import_mcp, validate_arguments
from rlvr.errors import EnvError, UsageError
from rlvr.types import Completion, ToolCall

SERVER = '''
import asyncio, logging, os, sys
from mcp.server import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

app = MCPServer("toy", log_level="WARNING")
logging.disable(logging.CRITICAL)  # no slow traceback rendering for the crash tool

@app.tool(structured_output=False)
def add(a: int, b: int) -> str:
    """Add two integers."""
    return str(a + b)

@app.tool(structured_output=False)
def pid() -> str:
    """The server's process id."""
    return str(os.getpid())

@app.tool(structured_output=False)
def refuse(reason: str) -> str:
    """Fail on purpose."""
    raise ToolError(f"refused: {reason}")

@app.tool(structured_output=False)
def crash() -> str:
    """Raise an unexpected exception."""
    raise RuntimeError("internal detail")

@app.tool(structured_output=False)
async def nap(seconds: float) -> str:
    """Sleep."""
    await asyncio.sleep(seconds)
    return "awake"

@app.tool(structured_output=False)
def die() -> str:
    """Exit the server process at once."""
    os._exit(3)

if len(sys.argv) > 1:
    app.run(transport="streamable-http", host="127.0.0.1", port=int(sys.argv[1]))
else:
    app.run()
'''


@pytest.fixture(scope="module")
def server_file(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = tmp_path_factory.mktemp("mcp") / "toy_server.py"
    path.write_text(SERVER)
    return str(path)


def calls_reward(state) -> float:
    return float(sum(state.tool_calls.values()))


def _env(*configs: MCPServerConfig, n: int = 1) -> MCPEnv:
    return MCPEnv(
        [{"id": f"t{i}", "question": "go"} for i in range(n)],
        servers=list(configs),
        rubric=Rubric([calls_reward]),
        max_turns=20,
    )


def _stdio(path: str, **kw) -> MCPServerConfig:
    return MCPServerConfig("toy", command=sys.executable, args=(path,), **kw)


def _scripted(*calls: tuple[str, str]) -> Policy:
    """One tool call per turn (name, raw JSON arguments), then a plain answer."""

    def fn(messages, rng):
        done = sum(m["role"] == "tool" for m in messages)
        if done < len(calls):
            name, args = calls[done]
            return Completion(text="", tool_calls=[ToolCall(f"c{done}", name, args)], finish_reason="tool_calls")
        return "done"

    return Policy(fn, name="scripted")


def _replies(rollout) -> list[str]:
    return [m["content"] for m in rollout.completion if m["role"] == "tool"]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as f:  # a zombie is dead too
        return f.read().split(")")[-1].split()[0] != "Z"


async def test_tools_schemas_calls_bad_input_timeouts_and_one_server_per_env(server_file: str) -> None:
    env = _env(_stdio(server_file, call_timeout_s=2.0), n=3)
    try:
        await env.start()
        schemas = {s["function"]["name"]: s["function"] for s in env.tool_schemas(None)}
        assert set(schemas) == {"add", "pid", "refuse", "crash", "nap", "die"}
        assert schemas["add"]["description"] == "Add two integers."
        assert schemas["add"]["parameters"]["properties"]["a"]["type"] == "integer"
        policy = _scripted(
            ("add", '{"a": 2, "b": 3}'),
            ("pid", ""),
            ("add", '{"a": 2'),
            ("nope", "{}"),
            ("add", '{"a": "2", "b": 3}'),
            ("add", '{"a": 2}'),
            ("add", '{"a": 1, "b": 2, "c": 3}'),
            ("refuse", '{"reason": "why not"}'),
            ("crash", "{}"),
            ("nap", '{"seconds": 30}'),
            ("add", '{"a": 1, "b": 1}'),
        )
        t0 = time.monotonic()
        rollouts = await run_rollouts(env, policy, env.tasks(), concurrency=3)
        assert time.monotonic() - t0 < 25  # the 30 s nap was cut at 2 s (margin: server start-up on a loaded machine)
        pids = set()
        for r in rollouts:
            replies = _replies(r)
            assert r.error is None and r.stop_reason == "no_tool_call"
            assert replies[0] == "5" and replies[-1] == "2"
            pids.add(int(replies[1]))
            assert "not valid JSON" in replies[2] and "unknown tool 'nope'" in replies[3]
            assert replies[4] == "Error: argument 'a' must be integer, got string '2'"
            assert replies[5] == "Error: missing required argument 'b'" and "unknown argument 'c'" in replies[6]
            assert replies[7] == "Error: refused: why not"
            assert replies[8] == "Error: tool 'crash' failed on the server"  # no internal details leak
            assert replies[9] == "Error: tool 'nap' did not answer within 2 s"
            assert r.rewards["calls_reward"] == 11
        [pid] = pids  # one server for every rollout
        assert _alive(pid)
    finally:
        await env.aclose()
    assert not _alive(pid)
    await env.aclose()  # idempotent


async def test_server_dying_mid_run_becomes_tool_errors_without_hanging(server_file: str) -> None:
    env = _env(_stdio(server_file, call_timeout_s=5.0))
    policy = _scripted(("add", '{"a": 1, "b": 1}'), ("die", "{}"), ("add", '{"a": 1, "b": 1}'))
    t0 = time.monotonic()
    try:
        [r] = await run_rollouts(env, policy, env.tasks())
    finally:
        await env.aclose()
    replies = _replies(r)
    assert time.monotonic() - t0 < 15 and r.error is None and r.stop_reason == "no_tool_call"
    assert replies[0] == "2" and all(x.startswith("Error: MCP server 'toy'") for x in replies[1:]), replies


@pytest.mark.parametrize(
    ("command", "args", "expected"),
    [
        (
            sys.executable,
            ("-c", "import sys; print('cannot start: bad config', file=sys.stderr); sys.exit(3)"),
            "cannot start: bad config",
        ),
        ("/no/such/server-binary", (), "failed to start"),
    ],
)
async def test_server_that_fails_to_start(command: str, args: tuple[str, ...], expected: str) -> None:
    env = _env(MCPServerConfig("broken", command=command, args=args, start_timeout_s=20), n=3)
    try:
        with pytest.raises(EnvError, match="MCP server 'broken'.*failed to start") as info:
            await env.start()
        assert expected in str(info.value)
        rollouts = await run_rollouts(env, _scripted(), env.tasks())  # every rollout an error record
    finally:
        await env.aclose()
    assert [r.stop_reason for r in rollouts] == ["error"] * 3
    assert all("failed to start" in r.error for r in rollouts)


async def test_server_that_never_answers_times_out_and_is_killed() -> None:
    env = _env(
        MCPServerConfig("mute", command=sys.executable, args=("-c", "import time; time.sleep(60)"), start_timeout_s=1.0)
    )
    t0 = time.monotonic()
    with pytest.raises(EnvError, match="no answer within 1 s"):
        await env.start()
    assert time.monotonic() - t0 < 20  # not the 60 s the server would sleep
    await env.aclose()


def test_event_loop_teardown_stops_servers_and_a_new_loop_restarts_them(server_file: str) -> None:
    env = _env(_stdio(server_file))

    async def server_pid() -> int:  # no aclose: asyncio.run's teardown must stop it
        [r] = await run_rollouts(env, _scripted(("pid", "")), env.tasks())
        return int(_replies(r)[0])

    first = asyncio.run(server_pid())
    second = asyncio.run(server_pid())
    assert first != second
    deadline = time.monotonic() + 5
    while (_alive(first) or _alive(second)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(first) and not _alive(second)


CTRL_C = """
import asyncio, sys
from rlvr import Policy
from rlvr.engine import run_rollouts
from rlvr.envs.mcp import MCPEnv, MCPServerConfig
from rlvr.types import Completion, ToolCall

async def player(messages, rng):
    if messages[-1]["role"] != "tool":
        return Completion(text="", tool_calls=[ToolCall("c0", "pid", "{}")])
    print(messages[-1]["content"], flush=True)
    await asyncio.sleep(60)

env = MCPEnv([{"question": "q"}], servers=[MCPServerConfig("toy", command=sys.executable, args=(sys.argv[1],))])
asyncio.run(run_rollouts(env, Policy(player), env.tasks()))
"""


def test_ctrl_c_stops_the_server(server_file: str, tmp_path) -> None:
    script = tmp_path / "ctrl_c.py"
    script.write_text(CTRL_C)
    proc = subprocess.Popen(
        [sys.executable, str(script), server_file],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        preexec_fn=default_sigint,
    )
    try:
        pid = int(proc.stdout.readline())
        assert _alive(pid)
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=20) != 0
    finally:
        proc.kill()
        proc.wait()
        proc.stdout.close()
    deadline = time.monotonic() + 5
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(pid)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def test_streamable_http_server_on_localhost(server_file: str) -> None:
    port = _free_port()
    proc = await asyncio.create_subprocess_exec(
        sys.executable, server_file, str(port), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        deadline = time.monotonic() + 20
        while True:  # wait for the port
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                assert time.monotonic() < deadline and proc.returncode is None, "the HTTP server did not come up"
                await asyncio.sleep(0.1)
        url = f"http://127.0.0.1:{port}/mcp"
        env = _env(MCPServerConfig("toy", url=url), n=2)
        try:
            rollouts = await run_rollouts(env, _scripted(("add", '{"a": 40, "b": 2}')), env.tasks())
        finally:
            await env.aclose()
        assert [_replies(r) for r in rollouts] == [["42"], ["42"]]
        twice = _env(MCPServerConfig("a", url=url), MCPServerConfig("b", url=url))
        with pytest.raises(EnvError, match="tool 'add' is offered by MCP servers 'a' and 'b'"):
            await twice.start()
        await twice.aclose()
    finally:
        proc.terminate()
        await asyncio.wait_for(proc.wait(), 10)


def test_config_and_missing_sdk(monkeypatch) -> None:
    with pytest.raises(UsageError, match="exactly one of"):
        MCPServerConfig("x")
    with pytest.raises(UsageError, match="exactly one of"):
        MCPServerConfig("x", command="a", url="http://127.0.0.1:1/mcp")
    with pytest.raises(UsageError, match="call_timeout_s"):
        MCPServerConfig("x", command="a", call_timeout_s=0)
    with pytest.raises(UsageError, match="unique"):
        _env(MCPServerConfig("x", command="a"), MCPServerConfig("x", command="b"))
    monkeypatch.setitem(sys.modules, "mcp", None)
    with pytest.raises(UsageError, match=r"pip install 'rlvr\[mcp\]'"):
        import_mcp()


def test_validate_arguments() -> None:
    schema = {
        "type": "object",
        "required": ["q"],
        "properties": {
            "q": {"type": "string"},
            "n": {"type": "integer"},
            "x": {"type": "number"},
            "flag": {"type": "boolean"},
            "tags": {"type": "array", "items": {"type": "string"}},
            "mode": {"enum": ["a", "b"]},
            "maybe": {"anyOf": [{"type": "integer"}, {"type": "null"}]},
        },
    }
    assert (
        validate_arguments(schema, {"q": "s", "n": 1, "x": 1, "flag": False, "tags": ["a"], "mode": "a", "maybe": None})
        is None
    )
    bad = [
        ({"q": "s", "n": True}, "'n' must be integer, got boolean"),
        ({"q": "s", "x": "1"}, "'x' must be number"),
        ({"q": "s", "tags": ["a", 1]}, "'tags'[1] must be string"),
        ({"q": "s", "mode": "c"}, "one of ['a', 'b']"),
        ({"q": "s", "maybe": "1"}, "'maybe' must be one of"),
        ({"q": None}, "'q' must be string, got null"),
    ]
    for args, message in bad:
        assert message in validate_arguments(schema, args), args


def test_module_imports_without_touching_the_sdk() -> None:
    code = "import sys, rlvr.envs.mcp, rlvr.sandbox, rlvr.judge; print('mcp' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
