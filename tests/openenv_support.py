"""Test support for OpenEnv: apps served by uvicorn in a thread on an ephemeral port."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Iterator
from typing import Any


class ThreadServer:
    """`app` served on 127.0.0.1 and a free port by uvicorn in a thread of its own."""

    def __init__(self, app: Any) -> None:
        import uvicorn

        config = uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning", ws="websockets-sansio")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.loop: asyncio.AbstractEventLoop | None = None
        self.thread.start()
        deadline = time.monotonic() + 20
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the test server did not start")
            time.sleep(0.02)
        self.url = f"http://127.0.0.1:{self.server.servers[0].sockets[0].getsockname()[1]}"

    def _run(self) -> None:
        async def serve() -> None:
            self.loop = asyncio.get_running_loop()
            await self.server.serve()

        asyncio.run(serve())

    def kill(self) -> None:
        """Die as a killed process does: every connection dropped at once, no more answers."""
        assert self.loop is not None
        done = threading.Event()

        def abort() -> None:
            for server in self.server.servers:
                server.close()
            for connection in list(self.server.server_state.connections):
                connection.transport.abort()
            done.set()

        self.loop.call_soon_threadsafe(abort)
        assert done.wait(10)

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=20)
        assert not self.thread.is_alive(), "the test server did not stop"


@contextlib.contextmanager
def running(app: Any) -> Iterator[str]:
    """Serve `app` in a thread; yield its URL; stop it after."""
    server = ThreadServer(app)
    try:
        yield server.url
    finally:
        server.stop()
