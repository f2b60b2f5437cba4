"""The engine's own cost per rollout: against a zero-latency OpenAI-compatible server, and with a
`Policy` client (no HTTP) to separate the engine's cost from the HTTP client's.

Run: .venv/bin/python benchmarks/bench_engine.py [--quick] [--in-flight]
The server (tests/openai_server.py, echo model, no faults) runs in a child process, so the
client CPU time (`time.process_time` of this process) excludes it; the server's CPU per
request is printed too. Rows: single-turn and 4-turn episodes, concurrency 1 and 64.

`--in-flight`: the OpenAI client with 32, 256 and 1,024 requests in flight, its connections in
pools of `POOL_SIZE` (as it runs) beside one pool for all of them (as it ran before), turns/s
and client CPU ms per turn as the median of 3 runs with their range; the runs interleave so
that a busy machine slows every setting alike.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing as mp
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Self

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from openai_server import OpenAIServer, echo_model

from rlvr.clients import openai_session
from rlvr.clients.openai import OpenAIClient
from rlvr.clients.policy import Policy
from rlvr.engine import run_rollouts
from rlvr.envs.multiturn import MultiTurnEnv, SingleTurnEnv
from rlvr.rubric import Rubric
from rlvr.types import Messages, SamplingArgs, State


def replied(completion: Messages) -> float:
    return float(bool(completion) and completion[-1]["content"] != "")


class ChatEnv(MultiTurnEnv[State]):
    """The user says `continue` after each model turn, until max_turns."""

    async def env_response(self, messages: Messages, state: State) -> Messages:
        return [{"role": "user", "content": f"continue {state.turn}"}]


def make_env(turns: int, n_tasks: int) -> MultiTurnEnv[Any]:
    tasks = [{"id": f"t{i}", "question": f"question number {i}: say something"} for i in range(n_tasks)]
    sampling = SamplingArgs(temperature=0.0, max_tokens=64)
    if turns == 1:
        return SingleTurnEnv(tasks, rubric=Rubric([replied]), sampling=sampling)
    return ChatEnv(tasks, rubric=Rubric([replied]), sampling=sampling, max_turns=turns)


# ---- the server, in a child process ------------------------------------------------------------


def serve(conn: Any) -> None:
    with OpenAIServer(echo_model) as server:
        conn.send(server.port)
        while (msg := conn.recv()) != "stop":
            conn.send((time.process_time(), server.counts["requests"]) if msg == "cpu" else None)


class ServerProcess:
    def __enter__(self) -> Self:
        self.conn, child = mp.get_context("spawn").Pipe()
        self.proc = mp.get_context("spawn").Process(target=serve, args=(child,), daemon=True)
        self.proc.start()
        self.base_url = f"http://127.0.0.1:{self.conn.recv()}/v1"
        return self

    def cpu(self) -> tuple[float, int]:
        self.conn.send("cpu")
        return self.conn.recv()

    def __exit__(self, *exc: object) -> None:
        self.conn.send("stop")
        self.proc.join(10)


# ---- measuring --------------------------------------------------------------------------------


async def measure(
    env: MultiTurnEnv[Any],
    client: Any,
    n: int,
    concurrency: int,
    server: ServerProcess | None = None,
) -> tuple[float, float, float | None]:
    """(rollouts/s, client CPU ms per rollout, server CPU ms per request) of `n` rollouts,
    after a short warm-up."""
    await run_rollouts(env, client, env.dataset[: min(n, 2 * concurrency)], concurrency=concurrency)
    server_before = server.cpu() if server else (0.0, 0)
    wall, cpu = time.perf_counter(), time.process_time()
    rollouts = await run_rollouts(env, client, env.dataset[:n], concurrency=concurrency)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    errors = [r.error for r in rollouts if r.error]
    assert len(rollouts) == n and not errors, errors[:1]
    if isinstance(client, OpenAIClient):
        await client.aclose()
    server_ms = None
    if server:
        server_cpu, server_requests = (a - b for a, b in zip(server.cpu(), server_before))
        server_ms = 1e3 * server_cpu / max(server_requests, 1)
    return n / wall, 1e3 * cpu / n, server_ms


def echo_policy(messages: Messages, rng: Any) -> str:
    return echo_model(messages, None)


# ---- many requests in flight --------------------------------------------------------------------

IN_FLIGHT = (32, 256, 1024)


def in_flight(server: ServerProcess, scale: float, repeats: int = 3) -> None:
    """Print turns/s and client CPU ms per turn at each level of `IN_FLIGHT`, pools of
    `POOL_SIZE` connections beside one pool (the old setting): median [min-max] of `repeats`."""
    pool_size = openai_session.POOL_SIZE
    runs: dict[tuple[int, int, str], list[tuple[float, float]]] = {}
    for _ in range(repeats):
        for turns in (1, 4):
            for concurrency in IN_FLIGHT:
                n = max(int(scale * 2048 / turns), 2 * concurrency)
                env = make_env(turns, n + 2 * concurrency)
                for setting, size in (("one pool", concurrency), (f"pools of {pool_size}", pool_size)):
                    openai_session.POOL_SIZE = size
                    client = OpenAIClient("echo", base_url=server.base_url, concurrency=concurrency)
                    rate, cpu, _ = asyncio.run(measure(env, client, n, concurrency, server))
                    runs.setdefault((turns, concurrency, setting), []).append((rate * turns, cpu / turns))
    openai_session.POOL_SIZE = pool_size

    def spread(values: list[float], fmt: str) -> str:
        return f"{statistics.median(values):{fmt}} [{min(values):{fmt}}-{max(values):{fmt}}]"

    print(f"{'turns':>5}{'in flight':>10}  {'connections':<12}{'turns/s':>20}{'client CPU ms/turn':>26}")
    for (turns, concurrency, setting), samples in runs.items():
        rates, cpus = [r for r, _ in samples], [c for _, c in samples]
        print(f"{turns:>5}{concurrency:>10}  {setting:<12}{spread(rates, '.0f'):>20}{spread(cpus, '.2f'):>26}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer rollouts (a smoke run)")
    parser.add_argument("--in-flight", action="store_true", help="only the 32-1,024 in flight table")
    args = parser.parse_args()
    scale = 0.2 if args.quick else 1.0
    if args.in_flight:
        with ServerProcess() as server:
            in_flight(server, scale, repeats=1 if args.quick else 3)
        return
    rows = []
    with ServerProcess() as server:
        for turns in (1, 4):
            for concurrency in (1, 64):
                n_http = int(scale * (300 if concurrency == 1 else 1500) / turns) or 8
                n_policy = int(scale * 4000 / turns)
                env = make_env(turns, max(n_http, n_policy) + 2 * concurrency)
                policy = Policy(echo_policy, name="echo")
                rows.append(
                    (
                        "policy",
                        turns,
                        concurrency,
                        n_policy,
                        *asyncio.run(measure(env, policy, n_policy, concurrency)),
                    )
                )
                client = OpenAIClient("echo", base_url=server.base_url, concurrency=concurrency)
                rows.append(
                    (
                        "http",
                        turns,
                        concurrency,
                        n_http,
                        *asyncio.run(measure(env, client, n_http, concurrency, server)),
                    )
                )
    print(
        f"{'client':<8}{'turns':>6}{'conc':>6}{'rollouts':>10}{'rollouts/s':>12}"
        f"{'client CPU ms/rollout':>23}{'ms/turn':>9}{'server CPU ms/req':>19}"
    )
    for client_name, turns, conc, n, rate, cpu, server_ms in rows:
        server_col = f"{server_ms:19.2f}" if server_ms is not None else f"{'-':>19}"
        print(f"{client_name:<8}{turns:>6}{conc:>6}{n:>10}{rate:>12.0f}{cpu:>23.3f}{cpu / turns:>9.3f}{server_col}")


if __name__ == "__main__":
    main()
