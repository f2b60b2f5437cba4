"""Env servers for scale-out: `rlvr eval --env-server` plays an environment on `rlvr serve`
servers; a server killed mid-run has its rollouts finished on another, nothing lost or doubled."""

from __future__ import annotations

import asyncio
import json

import pytest

pytest.importorskip("openenv.core")
pytest.importorskip("rlvr_tictactoe")

from openenv_support import ThreadServer  # noqa: E402

from rlvr.cli import main  # noqa: E402
from rlvr.clients.policy import Policy  # noqa: E402
from rlvr.engine import run_rollouts  # noqa: E402
from rlvr.registry import load_environment  # noqa: E402
from rlvr.serve import build_app  # noqa: E402
from rlvr.serve.remote import RemoteEnv  # noqa: E402
from rlvr.types import Task  # noqa: E402


def results(out) -> dict:
    rows = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert len(rows) == len({(r["task_id"], r["rollout_index"]) for r in rows})  # none twice
    return {(r["task_id"], r["rollout_index"]): (r["reward"], r["rewards"], r["stop_reason"]) for r in rows}


def test_eval_on_two_env_servers_equals_eval_in_process(capsys, tmp_path) -> None:
    servers = [ThreadServer(build_app(load_environment("tictactoe"))) for _ in range(2)]
    try:
        argv = ["eval", "tictactoe", "-m", "policy:random", "-n", "6", "-r", "2", "-q"]
        assert main([*argv, "-o", str(tmp_path / "here")]) == 0
        remote = [*argv, "-o", str(tmp_path / "there"), "-c", "4"]
        assert main([*remote, *(f"--env-server={s.url}" for s in servers)]) == 0, capsys.readouterr().err
    finally:
        for server in servers:
            server.stop()
    assert results(tmp_path / "there") == results(tmp_path / "here")
    meta = json.loads((tmp_path / "there" / "metadata.json").read_text())
    counts = meta["env_servers"]
    assert sorted(counts) == sorted(s.url for s in servers)
    assert sum(c["rollouts"] for c in counts.values()) == 12 and all(c["rollouts"] >= 2 for c in counts.values())
    assert all(c["failures"] == 0 for c in counts.values())


def test_servers_killed_mid_run_lose_and_double_nothing() -> None:
    env = load_environment("tictactoe")
    player = env.policies()["random"]()
    tasks = env.tasks()[:8]
    plain = Policy(player.fn, name="random")
    expected = asyncio.run(run_rollouts(env, plain, tasks, rollouts_per_task=2))
    servers = [ThreadServer(build_app(load_environment("tictactoe"))) for _ in range(4)]
    killed: list[int] = []

    def play(messages, rng):  # the same player; at its 12th and 30th turns, a server dies
        if counting.calls in (12, 30):
            servers[len(killed)].kill()
            killed.append(counting.calls)
        return player.fn(messages, rng)

    counting = Policy(play, name="random")
    remote = RemoteEnv(env, [s.url for s in servers])
    try:
        got = asyncio.run(run_rollouts(remote, counting, tasks, rollouts_per_task=2, concurrency=8))
    finally:
        for server in servers:
            server.stop()
    assert killed == [12, 30]
    assert [(r.task_id, r.rollout_index, r.reward, r.rewards, r.stop_reason) for r in got] == [
        (r.task_id, r.rollout_index, r.reward, r.rewards, r.stop_reason) for r in expected
    ]
    assert [r.error for r in got] == [None] * 16
    assert [len(r.turns) for r in got] == [len(r.turns) for r in expected]
    assert counting.calls == plain.calls  # no turn was asked of the model twice
    stats = remote.pool.stats()
    assert stats[servers[0].url]["failures"] >= 1 and stats[servers[1].url]["failures"] >= 1
    assert sum(s["rollouts"] for s in stats.values()) == 16


def test_busy_servers_are_waited_for_and_an_episode_a_server_lacks_is_refused() -> None:
    env = load_environment("tictactoe")
    player = env.policies()["random"]()
    tasks = env.tasks()[:6]
    expected = asyncio.run(run_rollouts(env, Policy(player.fn), tasks))
    servers = [ThreadServer(build_app(load_environment("tictactoe"), max_sessions=1)) for _ in range(2)]
    try:
        remote = RemoteEnv(env, [s.url for s in servers])
        got = asyncio.run(run_rollouts(remote, Policy(player.fn), tasks, concurrency=6))
        lacking = [Task(id="not-on-the-server", question="q", seed=1)]  # (a server loaded with other -a)
        (refused,) = asyncio.run(run_rollouts(RemoteEnv(env, [servers[0].url]), Policy(player.fn), lacking))
    finally:
        for server in servers:
            server.stop()
    assert [(r.reward, r.error) for r in got] == [(r.reward, None) for r in expected]
    assert all(s["failures"] == 0 for s in remote.pool.stats().values())
    assert refused.error is not None and "refused the episode (no task with id 'not-on-the-server'" in refused.error
