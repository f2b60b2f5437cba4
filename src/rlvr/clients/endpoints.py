"""Where an `OpenAIClient`'s requests go: one endpoint, or several serving the same model.

`EndpointPool` sends each request to the endpoint with the fewest requests in flight among
those that can take one (ties go round the pool), and keeps each endpoint's health:

- **Unreachable** (connection refused or reset; or at `check()`): the endpoint rests for a
  jittered, doubling spell (`backoff_s`, 2 x, ... up to `max_backoff_s`), its requests go to
  the others, and one request tries it again when the spell ends (its limit on requests in
  flight drops to 1 and grows by one with each answer). When every endpoint rests, a request
  waits for the first to come back.
- **Too slow** (a request got no answer within the client's timeout): the endpoint's limit on
  requests in flight halves (at least 1) and grows back by one with each answer, so a server
  that queues work (`transformers serve` runs one `generate` at a time) is no longer sent more
  than it can answer in time. The endpoint also switches to streamed requests: a server stops
  generating when the client hangs up on a stream (transformers serve, vLLM, SGLang), but not
  always for a plain request, which it would go on computing for nobody.

The pool holds no event-loop objects: the client's per-loop session waits on its own
`asyncio.Condition` and asks the pool which endpoint is free (`pick`) and when one comes back
(`ready_in`). Per-endpoint counts and latencies (`stats`) are what `rlvr eval` prints after a
run against several endpoints.
"""

from __future__ import annotations

import statistics
import time
from array import array
from collections import Counter
from collections.abc import Sequence
from typing import Any


class Endpoint:
    """One base URL: its limit on requests in flight, its health, its counts."""

    def __init__(self, url: str | None, limit: int) -> None:
        self.url = url
        """Base URL (None: the SDK's default, api.openai.com)."""
        self.max_limit = limit
        self.limit = float(limit)
        """Requests this endpoint may have in flight now: halved on a timeout, +1 per answer."""
        self.in_flight = 0
        self.resting_until = 0.0
        """`time.monotonic()` before which no request is sent (after connection failures)."""
        self.unreachable = 0
        """Connection failures in a row."""
        self.stream = False
        """Send streamed requests (set after the first timeout: hanging up then cancels them)."""
        self.probe: str | None = None
        """What the pre-run probe (`GET /models`, `OpenAIClient.check`) found: "answered",
        "unreachable" or "key refused"; None: not probed. Not a request: it counts in neither
        `requests` nor `failures`, which are the chat requests'."""
        self.requests = 0
        self.answered = 0
        self.failures: Counter[str] = Counter()
        """Failed requests by reason: `timeout`, `connection`, `HTTP 500`, `malformed` ..."""
        self.latencies = array("d")
        """Seconds of each answered request."""

    def free(self, now: float) -> bool:
        return now >= self.resting_until and self.in_flight < int(self.limit)

    def on_answer(self, seconds: float) -> None:
        self.answered += 1
        self.latencies.append(seconds)
        self.unreachable = 0
        self.limit = min(float(self.max_limit), self.limit + 1.0)

    def on_timeout(self) -> None:
        self.failures["timeout"] += 1
        self.limit = max(1.0, self.limit / 2)
        self.stream = True

    def on_unreachable(self, rest_s: float) -> None:
        self.failures["connection"] += 1
        self.unreachable += 1
        self.resting_until = time.monotonic() + rest_s
        self.limit = 1.0  # when the rest ends, one request tries it; each answer then adds one

    def on_probe(self, found: str, rest_s: float = 0.0) -> None:
        """The probe's finding; an unreachable endpoint rests as after a connection failure."""
        self.probe = found
        if found == "unreachable":
            self.unreachable += 1
            self.resting_until = time.monotonic() + rest_s
            self.limit = 1.0

    def on_failure(self, reason: str) -> None:
        self.failures[reason] += 1

    def stats(self) -> dict[str, Any]:
        """Counts and latency percentiles (ms) of this endpoint, for a summary."""
        lat = sorted(self.latencies)
        ms = {}
        if lat:
            ms = {
                "latency_ms_mean": round(1e3 * statistics.fmean(lat), 1),
                "latency_ms_p50": round(1e3 * lat[len(lat) // 2], 1),
                "latency_ms_p95": round(1e3 * lat[min(len(lat) - 1, int(0.95 * len(lat)))], 1),
            }
        return {
            "url": self.url,
            "probe": self.probe,
            "requests": self.requests,
            "answered": self.answered,
            "failed": dict(self.failures),
            **ms,
        }


class EndpointPool:
    """The endpoints of one client and the choice among them (see the module docstring)."""

    def __init__(self, urls: Sequence[str | None], limit: int) -> None:
        self.endpoints = [Endpoint(url, limit) for url in urls]
        self.in_flight = 0
        self.limit = limit
        """Requests in flight over all endpoints at most."""
        self._next = 0

    def pick(self, avoid: Endpoint | None = None) -> Endpoint | None:
        """The free endpoint with the fewest requests in flight (None: none is free). `avoid`
        (the one a request just failed on) is taken only when no other is free."""
        if self.in_flight >= self.limit:
            return None
        if len(self.endpoints) == 1:
            only = self.endpoints[0]
            return only if only.free(time.monotonic()) else None
        now = time.monotonic()
        n = len(self.endpoints)
        start, self._next = self._next, (self._next + 1) % n  # equal loads take turns
        free = [ep for ep in (self.endpoints[(start + i) % n] for i in range(n)) if ep.free(now)]
        if len(free) > 1 and avoid in free:
            free.remove(avoid)
        return min(free, key=lambda ep: ep.in_flight) if free else None

    def take(self, ep: Endpoint) -> None:
        ep.in_flight += 1
        ep.requests += 1
        self.in_flight += 1

    def give_back(self, ep: Endpoint) -> None:
        ep.in_flight -= 1
        self.in_flight -= 1

    def ready_in(self) -> float | None:
        """Seconds until a resting endpoint comes back (None: none rests, so only an answer
        can free a slot)."""
        now = time.monotonic()
        resting = [ep.resting_until - now for ep in self.endpoints if ep.resting_until > now]
        return max(min(resting), 0.0) if resting else None

    def free_slots(self) -> int:
        """How many requests could start now (how many waiters to wake)."""
        now = time.monotonic()
        slots = sum(max(0, int(ep.limit) - ep.in_flight) for ep in self.endpoints if now >= ep.resting_until)
        return max(0, min(slots, self.limit - self.in_flight))

    def stats(self) -> list[dict[str, Any]]:
        return [ep.stats() for ep in self.endpoints]
