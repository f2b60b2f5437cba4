"""MCP environments: the tools come from Model Context Protocol servers.

    env = MCPEnv(dataset, servers=[MCPServerConfig("wiki", command="python", args=["-m", "wiki.server"])])

A server is started over stdio (`command`, `args`, `env`, `cwd`) or reached over streamable
HTTP (`url`, e.g. `http://127.0.0.1:8000/mcp`). Tool names, descriptions and input schemas come
from the server's `tools/list`.

Lifecycle. Servers start once per environment and event loop: lazily, on the first rollout (or
at `await env.start()`, which fails fast with an `EnvError`). Each connection is owned by one
background task of the running loop (the SDK's transports are anyio task groups, which must be
entered and left by the same task). `await env.aclose()` stops every server (stdio servers get
EOF on stdin, then SIGTERM, then SIGKILL, each bounded); `async with env:` does the same. A run
must call `aclose()` in a `finally` inside its event loop, so that Ctrl-C and errors stop the
servers too; if it does not, `asyncio.run`'s own teardown cancels the owner tasks, which stops
them as well. A new event loop (a second `asyncio.run`) starts fresh connections.

Failures never hang a run: starting is bounded by `start_timeout_s` (a server that cannot
start turns every rollout into an error record naming the server and the tail of its stderr),
each call by `call_timeout_s`; a call to a server that died, an unknown tool, malformed or
ill-typed arguments, and tool errors reported by the server all reach the model as
`Error: ...` tool messages and count as failed tool calls.

The `mcp` SDK (version 2) is imported lazily: `pip install 'rlvr[mcp]'`.
"""

from __future__ import annotations

import asyncio
import logging
import re
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Self, Unpack

from rlvr.envs.multiturn import EnvOptions
from rlvr.envs.schema import validate_arguments
from rlvr.envs.tools import ToolCallError, ToolEnv, ToolState, parse_arguments
from rlvr.errors import EnvError, UsageError
from rlvr.types import Task, ToolCall

log = logging.getLogger("rlvr.mcp")


def describe_error(exc: BaseException) -> str:
    """`Type: message` of the first leaf of (nested) exception groups, on one line.

    >>> describe_error(ExceptionGroup("group", [OSError("no such file")]))
    'OSError: no such file'
    """
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return f"{type(exc).__name__}: {' '.join(str(exc).split())}".rstrip(": ")


def import_mcp() -> Any:
    """The `mcp` SDK module, or a `UsageError` naming the extra to install."""
    try:
        import mcp
        from mcp import Client  # noqa: F401  (the v2 high-level client)
    except ImportError as exc:
        raise UsageError(f"MCP environments need the mcp SDK (version 2): pip install 'rlvr[mcp]' ({exc})") from None
    return mcp


@dataclass(frozen=True)
class MCPServerConfig:
    """How to reach one MCP server: a stdio `command` to start, or the `url` of a running one."""

    name: str
    """Label used in error messages."""
    command: str | None = None
    """Executable of a stdio server (e.g. `sys.executable`)."""
    args: tuple[str, ...] = ()
    env: Mapping[str, str] | None = None
    """Extra environment variables for a stdio server (merged over a minimal safe default)."""
    cwd: str | None = None
    url: str | None = None
    """Streamable HTTP endpoint of a running server, e.g. `http://127.0.0.1:8000/mcp`."""
    start_timeout_s: float = 30.0
    """Most seconds to start the server and list its tools."""
    call_timeout_s: float = 60.0
    """Most seconds one tool call may take."""
    stop_timeout_s: float = 10.0
    """Most seconds to wait for a clean stop before the connection task is cancelled."""

    def __post_init__(self) -> None:
        if (self.command is None) == (self.url is None):
            raise UsageError(f"MCP server {self.name!r}: give exactly one of command= (stdio) or url= (HTTP)")
        for label in ("start_timeout_s", "call_timeout_s", "stop_timeout_s"):
            if getattr(self, label) <= 0:
                raise UsageError(f"MCP server {self.name!r}: {label} must be > 0, got {getattr(self, label)}")

    def describe(self) -> str:
        return self.url if self.url is not None else " ".join([str(self.command), *self.args])


_SDK_PREFIX = re.compile(r"^Error executing tool \S+(: |$)")
"""The SDK's prefix on tool errors; the model gets the message itself."""


class MCPServerConnection:
    """One running server: a background task owns the SDK client; others call through it."""

    def __init__(self, config: MCPServerConfig) -> None:
        self.config = config
        self.tools: dict[str, dict[str, Any]] = {}
        """Tool name -> OpenAI-style function schema, as listed by the server."""
        self._client: Any = None
        self._task: asyncio.Task[None] | None = None
        self._stop = asyncio.Event()
        self._stderr: Any = None
        self._stderr_text = ""
        self.dead: str | None = None
        """Why the server stopped answering (None while it is fine)."""

    def stderr_tail(self, chars: int = 600) -> str:
        """The end of a stdio server's stderr, on one line ("" for HTTP servers)."""
        text = self._stderr_text
        if self._stderr is not None and not self._stderr.closed:
            self._stderr.flush()
            self._stderr.seek(0)
            text = self._stderr.read()
        return " ".join(text[-chars:].split())

    async def start(self) -> None:
        mcp = import_mcp()
        ready = asyncio.Event()
        self._task = asyncio.get_running_loop().create_task(self._own(mcp, ready), name=f"mcp:{self.config.name}")
        waiter = asyncio.ensure_future(ready.wait())
        try:
            await asyncio.wait(
                {self._task, waiter}, timeout=self.config.start_timeout_s, return_when=asyncio.FIRST_COMPLETED
            )
        finally:
            waiter.cancel()
        if ready.is_set():
            return
        if self._task.done() and not self._task.cancelled() and self._task.exception() is not None:
            reason = describe_error(self._task.exception())  # type: ignore[arg-type]
        else:
            reason = f"no answer within {self.config.start_timeout_s:g} s"
        await self.stop()
        tail = self.stderr_tail()
        raise EnvError(
            f"MCP server {self.config.name!r} ({self.config.describe()}) failed to start: {reason}"
            + (f"; its stderr ends: {tail}" if tail else "")
        )

    def _transport(self, mcp: Any) -> Any:
        if self.config.url is not None:
            from mcp.client.streamable_http import streamable_http_client

            return streamable_http_client(self.config.url)
        from mcp.client.stdio import stdio_client

        params = mcp.StdioServerParameters(
            command=self.config.command,
            args=list(self.config.args),
            env=dict(self.config.env) if self.config.env else None,
            cwd=self.config.cwd,
        )
        return stdio_client(params, errlog=self._stderr)

    async def _own(self, mcp: Any, ready: asyncio.Event) -> None:
        if self.config.command is not None:
            self._stderr = tempfile.TemporaryFile("w+", encoding="utf-8", errors="replace")  # noqa: SIM115 (closed below)
        try:
            async with mcp.Client(self._transport(mcp)) as client:
                tools, cursor = [], None
                for _ in range(100):  # pages; a server that never ends its listing cannot hang us
                    page = await client.list_tools(cursor=cursor)
                    tools.extend(page.tools)
                    cursor = page.next_cursor
                    if cursor is None:
                        break
                self.tools = {
                    t.name: {
                        "type": "function",
                        "function": {"name": t.name, "description": t.description or "", "parameters": t.input_schema},
                    }
                    for t in tools
                }
                self._client = client
                ready.set()
                await self._stop.wait()
        except Exception as exc:
            self.dead = describe_error(exc)
            if not ready.is_set():
                raise  # start() reports it
            log.warning("MCP server %r stopped: %s", self.config.name, self.dead)
        finally:
            self._client = None
            self.dead = self.dead or "stopped"
            if self._stderr is not None:  # the process is gone: keep what it said, close the file
                self._stderr_text = self.stderr_tail(4000)
                self._stderr.close()

    async def call(self, name: str, args: dict[str, Any]) -> str:
        """The tool's text result; `ToolCallError` for anything the model should hear about."""
        client, label = self._client, f"MCP server {self.config.name!r}"
        if client is None:
            raise ToolCallError(f"{label} is not running ({self.dead or 'not started'}); its tools are unavailable")
        try:
            async with asyncio.timeout(self.config.call_timeout_s):
                result = await client.call_tool(name, args)
        except TimeoutError:
            raise ToolCallError(f"tool {name!r} did not answer within {self.config.call_timeout_s:g} s") from None
        except Exception as exc:  # noqa: BLE001 (connection closed, protocol error, server crash)
            raise ToolCallError(
                f"{label} failed: {exc}"
                + (f" (stderr: {self.stderr_tail(300)})" if "closed" in str(exc).lower() else "")
            ) from None
        parts = []
        for block in result.content:
            parts.append(block.text if getattr(block, "type", None) == "text" else f"[{block.type} content]")
        text = "\n".join(parts)
        if result.is_error:
            raise ToolCallError(_SDK_PREFIX.sub("", text).strip() or f"tool {name!r} failed on the server")
        return text

    async def stop(self) -> None:
        """Stop the server and wait for it (bounded); safe to call twice."""
        task, self._task = self._task, None
        if task is not None and not task.done():
            if self._client is None:  # still starting: abandon the handshake
                task.cancel()
            self._stop.set()
            done, _ = await asyncio.wait({task}, timeout=self.config.stop_timeout_s)
            if not done:
                task.cancel()
                await asyncio.wait({task}, timeout=self.config.stop_timeout_s)
        if task is not None and task.done() and not task.cancelled():
            task.exception()  # retrieved: a failed server was already reported


@dataclass
class _Servers:
    """The connections of one event loop."""

    loop: asyncio.AbstractEventLoop
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    connections: list[MCPServerConnection] = field(default_factory=list)
    routes: dict[str, MCPServerConnection] = field(default_factory=dict)
    failure: EnvError | None = None
    started: bool = False


class MCPEnv(ToolEnv[ToolState]):
    """A tool environment whose tools live on MCP servers (see the module docstring)."""

    def __init__(
        self,
        dataset: Sequence[Task | Mapping[str, Any]],
        *,
        servers: Sequence[MCPServerConfig],
        **options: Unpack[EnvOptions],
    ) -> None:
        """`servers`: where the tools live; `options`: those of `MultiTurnEnv`."""
        if not servers:
            raise UsageError("MCPEnv needs at least one server (servers=[MCPServerConfig(...)])")
        names = [s.name for s in servers]
        if len(set(names)) != len(names):
            raise UsageError(f"MCP server names must be unique, got {names}")
        super().__init__(dataset, tools=[], **options)
        self.servers = list(servers)
        self._state: _Servers | None = None

    # ---- lifecycle ----------------------------------------------------------------------

    async def start(self) -> None:
        """Start every server in the running loop (once); raise `EnvError` if one fails."""
        loop = asyncio.get_running_loop()
        if self._state is None or self._state.loop is not loop:
            self._state = _Servers(loop)
        state = self._state
        async with state.lock:
            if state.failure is not None:
                raise state.failure
            if state.started:
                return
            connections = [MCPServerConnection(c) for c in self.servers]
            state.connections = connections
            results = await asyncio.gather(*(c.start() for c in connections), return_exceptions=True)
            errors = [r for r in results if isinstance(r, BaseException)]
            routes: dict[str, MCPServerConnection] = {}
            for conn in connections if not errors else ():
                for tool in conn.tools:
                    if tool in routes:
                        errors.append(
                            EnvError(
                                f"tool {tool!r} is offered by MCP servers {routes[tool].config.name!r} "
                                f"and {conn.config.name!r}; tool names must be unique"
                            )
                        )
                    routes[tool] = conn
            if errors:
                await asyncio.gather(*(c.stop() for c in connections))
                failure = errors[0]
                state.failure = failure if isinstance(failure, EnvError) else EnvError(describe_error(failure))
                raise state.failure
            state.routes, state.started = routes, True
            self.tools = {}
            self._schemas = [conn.tools[name] for name, conn in routes.items()]

    async def aclose(self) -> None:
        """Stop every server of the running loop's connections (bounded; idempotent)."""
        state, self._state = self._state, None
        if state is not None and state.loop is asyncio.get_running_loop():
            await asyncio.gather(*(c.stop() for c in state.connections))

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    # ---- episodes -----------------------------------------------------------------------

    def tool_schemas(self, state: ToolState) -> list[dict[str, Any]] | None:
        return self._schemas or None

    async def call_tool(self, call: ToolCall, state: ToolState) -> str:
        state.tool_calls[call.name] = state.tool_calls.get(call.name, 0) + 1
        routes = self._state.routes if self._state is not None else {}
        try:
            conn = routes.get(call.name)
            if conn is None:
                raise ToolCallError(f"unknown tool {call.name!r}; available: {', '.join(routes) or 'none'}")
            args = parse_arguments(call.arguments)
            problem = validate_arguments(conn.tools[call.name]["function"]["parameters"], args)
            if problem:
                raise ToolCallError(problem)
            return await conn.call(call.name, args)
        except ToolCallError as exc:
            state.failed_tool_calls += 1
            return f"Error: {exc}"
