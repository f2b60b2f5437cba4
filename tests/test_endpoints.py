"""Several endpoints of one model (rlvr.clients.endpoints): requests go to the least busy, a dead
or dying endpoint's requests go to the others with nothing lost, and each endpoint's counts and
latency are reported."""

from __future__ import annotations

import asyncio
import json
import socket
import types

import pytest
from openai_server import OpenAIServer

import rlvr.clients.endpoints
import rlvr.clients.openai
from rlvr.cli import main
from rlvr.clients.endpoints import EndpointPool
from rlvr.clients.openai import OpenAIClient
from rlvr.clients.openai_session import Session
from rlvr.engine import run_rollouts
from rlvr.envs.multiturn import SingleTurnEnv
from rlvr.types import SamplingArgs


def dead_url() -> str:
    with socket.socket() as s:  # a port that nothing listens on
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}/v1"


def test_pick_prefers_the_least_busy_and_avoids_the_one_that_failed() -> None:
    pool = EndpointPool(["a", "b", "c"], limit=8)
    a, b, c = pool.endpoints
    pool.take(a), pool.take(a), pool.take(b)
    assert pool.pick() is c
    pool.take(c)
    assert pool.pick(avoid=b) in (b, c) and pool.pick(avoid=c) is b  # b and c tie; avoid breaks it
    a.on_unreachable(rest_s=60.0)
    assert {pool.pick() for _ in range(4)} == {b, c}  # a rests
    b.on_timeout(), c.on_timeout()  # limits 8 -> 4
    for _ in range(3):
        pool.take(b), pool.take(c)
    assert pool.pick() is None and pool.ready_in() is not None and 59 < pool.ready_in() <= 60


async def test_a_rest_that_ends_between_the_pick_and_the_wait_does_not_hang(monkeypatch) -> None:
    """The clock moves on between reading it for the pick and for the wait: the only endpoint's
    rest ends in between, no request is on the wire to wake the waiter. A request must still get
    the endpoint (it waited with no timer for ever: CI hung 300 s in the retry test)."""
    pool = EndpointPool(["a"], limit=8)
    (ep,) = pool.endpoints
    readings = iter([0.0, 0.0])  # on_unreachable, then the first reading in acquire; 2 ms after that
    clock = types.SimpleNamespace(monotonic=lambda: next(readings, 0.002))
    monkeypatch.setattr(rlvr.clients.endpoints, "time", clock)  # the pool's clock alone, not asyncio's
    ep.on_unreachable(rest_s=0.001)  # rests until 0.001
    session = Session(asyncio.get_running_loop(), lambda url, n: None, pool, "test")  # type: ignore[arg-type,return-value]
    try:
        async with asyncio.timeout(5):
            assert await session.acquire() is ep
    finally:
        session.released.set()
        await session.holder


def test_eval_over_three_endpoints_one_dead_one_slow(monkeypatch, tmp_path, capsys) -> None:
    class QuickRetries(OpenAIClient):  # the CLI's client, with short rests for the dead endpoint
        def __init__(self, *args, **kwargs) -> None:
            super().__init__(*args, backoff_s=0.01, **kwargs)

    monkeypatch.setattr(rlvr.clients.openai, "OpenAIClient", QuickRetries)
    with OpenAIServer() as fast, OpenAIServer(delay_s=0.2) as slow:
        dead = dead_url()
        listed = tmp_path / "endpoints.txt"
        listed.write_text(f"# our servers\n{slow.base_url}\n{dead}  # down for maintenance\n")
        out = tmp_path / "run"
        argv = ["eval", "reverse_text", "-m", "m", "-b", fast.base_url, "-b", str(listed), "-n", "20", "-r", "2"]
        assert main([*argv, "-c", "8", "-o", str(out), "-q"]) == 0
        answered = fast.counts["ok"] + slow.counts["ok"]
    printed = capsys.readouterr().out
    records = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert len(records) == answered == 40 and not [r for r in records if r["error"]]  # nothing lost, nothing twice
    assert fast.counts["ok"] > 2 * slow.counts["ok"] > 0  # the least busy gets more
    stats = {s["url"]: s for s in json.loads((out / "metadata.json").read_text())["endpoints"]}
    assert stats[dead]["answered"] == 0 and 1 <= stats[dead]["failed"]["connection"] <= 8  # then it rested
    assert stats[slow.base_url]["latency_ms_p50"] >= 200 > stats[fast.base_url]["latency_ms_p50"]
    assert f"  {dead}: " in printed and f"  {fast.base_url}: " in printed and "p95" in printed


async def test_an_endpoint_that_dies_mid_run_loses_nothing() -> None:
    env = SingleTurnEnv([{"id": str(i), "question": f"q{i}"} for i in range(60)])
    with OpenAIServer(delay_s=0.02) as stays:
        dies = OpenAIServer(delay_s=0.02).start()
        client = OpenAIClient("m", base_url=[stays.base_url, dies.base_url], backoff_s=0.01, concurrency=16)
        finished = 0

        def on_rollout(rollout) -> None:
            nonlocal finished
            finished += 1
            if finished == 15:  # mid-run, requests in flight: they are answered, later ones refused
                dies.stop()  # blocks the loop until the server is down (~0.1 s), so that it dies for sure

        async with client:
            rollouts = await run_rollouts(env, client, env.dataset, concurrency=16, on_rollout=on_rollout)
        assert len(rollouts) == 60 and not [r.error for r in rollouts if r.error]
        assert [r.turns[0].completion.text for r in rollouts] == [f"echo: q{i}" for i in range(60)]
        assert dies.counts["ok"] >= 5 and stays.counts["ok"] + dies.counts["ok"] >= 60
        assert client.endpoints.endpoints[1].failures["connection"] >= 1  # it did die while in use
        dies.stop()


@pytest.mark.parametrize("value", ["not-a-url", ""])
def test_a_bad_base_url_is_one_line(value, capsys) -> None:
    assert main(["eval", "reverse_text", "-m", "m", "-b", value, "-q"]) == 1
    assert "neither a URL" in capsys.readouterr().err


async def test_check_passes_while_one_endpoint_answers(openai_server) -> None:
    client = OpenAIClient("m", base_url=[dead_url(), openai_server.base_url])
    await client.check()
    assert (await client.chat([{"role": "user", "content": "x"}], SamplingArgs())).text == "echo: x"
    await client.aclose()


def test_the_probe_is_not_counted_as_a_failed_request(monkeypatch, tmp_path, capsys) -> None:
    class QuickRetries(OpenAIClient):
        def __init__(self, *args, **kwargs) -> None:
            super().__init__(*args, backoff_s=0.01, **kwargs)

    monkeypatch.setattr(rlvr.clients.openai, "OpenAIClient", QuickRetries)
    dead, out = dead_url(), tmp_path / "run"
    with OpenAIServer() as live:
        argv = ["eval", "reverse_text", "-m", "m", "-b", live.base_url, "-b", dead, "-n", "6", "-c", "4"]
        assert main([*argv, "-o", str(out), "-q"]) == 0
    stats = {s["url"]: s for s in json.loads((out / "metadata.json").read_text())["endpoints"]}
    assert stats[dead]["probe"] == "unreachable" and stats[live.base_url]["probe"] == "answered"
    for row in stats.values():  # every request either answered or failed, once; the probe is neither
        assert row["requests"] == row["answered"] + sum(row["failed"].values()), row
    printed = capsys.readouterr().out
    line = next(line for line in printed.splitlines() if line.startswith(f"  {dead}: "))
    assert line.startswith(f"  {dead}: probe unreachable; {stats[dead]['requests']} requests, 0 answered"), line
