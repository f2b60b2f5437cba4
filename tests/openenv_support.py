"""Test support for OpenEnv: an app served by uvicorn in a thread on an ephemeral port."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from typing import Any


@contextlib.contextmanager
def running(app: Any) -> Iterator[str]:
    """Serve `app` on 127.0.0.1, a free port, in a thread; yield its URL; stop it after."""
    import uvicorn

    config = uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning", ws="websockets-sansio", lifespan="on")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("the test server did not start")
        time.sleep(0.02)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=20)
        assert not thread.is_alive(), "the test server did not stop"
