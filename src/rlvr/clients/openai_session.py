"""An `OpenAIClient`'s HTTP connections in one event loop: the SDK clients, the wait for a free
endpoint, and the task that closes them.

HTTP connections belong to an event loop, so the client opens them in the loop of its first
request, as a `Session`, and a task holds them open until the client releases it (it then lets
the requests on the wire finish, sends no other, and closes them) or the loop shuts down
(`asyncio.run` and `asyncio.Runner` cancel every task still pending; the task closes the
connections as it ends).

Connections come in pools of at most `POOL_SIZE`, each an SDK client of its own, as many pools
per endpoint as its requests in flight need. One pool for everything would do, but the HTTP
library (httpcore) looks at every connection of its pool for each request it sends and each
answer it reads: with one pool of 1,024 connections a turn cost 3.9 ms of client CPU instead
of 1.6 ms in pools of 16, and throughput fell to a third of its value at 32 in flight
(`benchmarks/bench_engine.py --in-flight`, docs/benchmarks.md). A request goes to the first
pool with a free connection, so the first pools stay warm (their idle connections are kept
alive, one per request the pool may carry) and the later ones open only for a burst.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import Callable, Iterator

import openai

from rlvr.clients.endpoints import Endpoint, EndpointPool

POOL_SIZE = 16
"""Connections of one SDK client (one httpcore pool); more requests in flight open more pools."""


class ConnectionPools:
    """One endpoint's SDK clients, each carrying at most `POOL_SIZE` requests at once."""

    def __init__(self, make: Callable[[str | None, int], openai.AsyncOpenAI], url: str | None) -> None:
        self.make, self.url = make, url  # make(url, n): a new SDK client with n connections
        self.clients: list[openai.AsyncOpenAI] = []
        self.busy: list[int] = []  # requests in flight, per client

    def take(self) -> int:
        """The index of the first client with a free connection (a new one if none has), counted
        as one request busier until `give_back`."""
        for i, busy in enumerate(self.busy):
            if busy < POOL_SIZE:
                break
        else:
            i = len(self.clients)
            self.clients.append(self.make(self.url, POOL_SIZE))
            self.busy.append(0)
        self.busy[i] += 1
        return i

    def give_back(self, i: int) -> None:
        self.busy[i] -= 1

    async def close(self) -> None:
        for client in self.clients:
            await client.close()


class Session:
    """An `OpenAIClient`'s connections in one event loop (the running one), the wait for a free
    endpoint, and the task that closes the connections."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        make: Callable[[str | None, int], openai.AsyncOpenAI],
        pool: EndpointPool,
        name: str,
    ) -> None:
        self.loop, self.pool = loop, pool
        self.connections = {id(ep): ConnectionPools(make, ep.url) for ep in pool.endpoints}
        self.waiting: deque[asyncio.Future[None]] = deque()  # requests waiting for an endpoint
        self.released = asyncio.Event()  # set: close the connections once no request is sending
        self.idle = asyncio.Event()  # set while no request is sending
        self.idle.set()
        self.busy = 0
        self.holder = loop.create_task(self.hold(), name=f"rlvr-openai-connections:{name}")

    async def acquire(self, avoid: Endpoint | None = None) -> Endpoint:
        """A free endpoint (the least busy; not `avoid` if another is free), counted as in flight
        until `give_back`; waits for one when none is free."""
        while True:
            # the clock for the wait first, then the pick: a rest that ends in between is seen
            # by the pick, where the other order waited, with no timer, for an answer that no
            # request was on the wire to give (a 1 ms rest on a loaded machine hung a test)
            ready_in = self.pool.ready_in()
            ep = self.pool.pick(avoid)
            if ep is not None:
                break
            woken = self.loop.create_future()
            self.waiting.append(woken)
            try:
                async with asyncio.timeout(ready_in):  # or a resting endpoint is back
                    await woken
            except TimeoutError:
                pass
            except BaseException:
                if woken.done() and not woken.cancelled():
                    self.wake()  # cancelled once woken: pass the slot on
                raise
        self.pool.take(ep)
        return ep

    def give_back(self, ep: Endpoint) -> None:
        self.pool.give_back(ep)
        self.wake()

    def wake(self) -> None:
        """Wake as many waiting requests as can start now."""
        slots = self.pool.free_slots() if self.waiting else 0
        while slots > 0 and self.waiting:
            woken = self.waiting.popleft()
            if not woken.done():
                woken.set_result(None)
                slots -= 1

    async def hold(self) -> None:
        """Keep the connections open until released, let the requests on the wire finish, and
        close them. Cancelled (the loop shuts down), close them at once."""
        try:
            await self.released.wait()
            await self.idle.wait()
        finally:
            for connections in self.connections.values():
                await connections.close()

    @contextlib.contextmanager
    def sending(self, ep: Endpoint) -> Iterator[openai.AsyncOpenAI]:
        """An SDK client with a free connection to `ep`, for one request on the wire (`hold`
        waits for it)."""
        connections = self.connections[id(ep)]
        i = connections.take()
        self.busy += 1
        self.idle.clear()
        try:
            yield connections.clients[i]
        finally:
            connections.give_back(i)
            self.busy -= 1
            if not self.busy:
                self.idle.set()

    def release(self) -> None:
        """Tell the holder to close the connections (from any thread or loop)."""
        if self.loop is _running_loop():
            self.released.set()
        elif not self.loop.is_closed():  # the holder sees it when that loop runs again
            with contextlib.suppress(RuntimeError):  # that loop closed just now
                self.loop.call_soon_threadsafe(self.released.set)


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None
