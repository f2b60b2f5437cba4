"""`rlvr serve`: rlvr environments behind OpenEnv's protocol, played by OpenEnv's own client.

The player on the client side is the same reference player `rlvr eval -m policy:NAME` uses,
seeded from each observation's `sampling`; the rewards must equal those of `rlvr eval`.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from typing import Any

import pytest

pytest.importorskip("openenv.core")
pytest.importorskip("reverse_text")
pytest.importorskip("rlvr_tictactoe")
pytest.importorskip("wiki_search")

from openenv.core import GenericEnvClient  # noqa: E402
from openenv_support import running  # noqa: E402

from rlvr.cli import main  # noqa: E402
from rlvr.envs import SingleTurnEnv  # noqa: E402
from rlvr.errors import UsageError  # noqa: E402
from rlvr.registry import load_environment  # noqa: E402
from rlvr.serve import build_app  # noqa: E402
from rlvr.serve.models import RlvrAction, RlvrEnvClient  # noqa: E402
from rlvr.serve.session import Picker  # noqa: E402
from rlvr.types import SamplingArgs, State, Task  # noqa: E402

CASES = [
    ("tictactoe", {}, "random", 4, 2),
    ("reverse_text", {}, "echo", 3, 2),
    ("wiki_search", {"size": "small", "num_tasks": 4, "eval_tasks": 3}, "oracle", 3, 1),
]


def eval_rewards(capsys, tmp_path, name: str, env_args: dict[str, Any], player: str, n: int, r: int) -> dict:
    """(task id, rollout) -> (reward, rewards) of `rlvr eval NAME -m policy:PLAYER -n N -r R`."""
    out = tmp_path / f"eval-{name}"
    argv = ["eval", name, "-m", f"policy:{player}", "-n", str(n), "-r", str(r), "-q", "-o", str(out)]
    assert main([*argv, "-a", json.dumps(env_args)]) == 0, capsys.readouterr().err
    rows = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    return {(row["task_id"], row["rollout_index"]): (row["reward"], row["rewards"]) for row in rows}


async def play_over_openenv(url: str, policy: Any, task: int, rollout: int) -> tuple[str, float, dict, int]:
    """One episode through OpenEnv's generic client: (task id, reward, rewards, steps)."""
    async with GenericEnvClient(base_url=url) as client:
        result = await client.reset(task=task, rollout=rollout)
        conversation = list(result.observation["messages"])
        steps = 0
        while not result.done:
            obs = result.observation
            completion = await policy.chat(conversation, SamplingArgs(**obs["sampling"]), obs["tools"])
            action = RlvrAction(content=completion.text, tool_calls=[vars(c) for c in completion.tool_calls])
            conversation.append(completion.message())
            result = await client.step(action.model_dump(exclude={"metadata"}))
            conversation.extend(result.observation["messages"])
            steps += 1
        state = await client.state()
        assert state["done"] and state["step_count"] == steps
        obs = result.observation
        assert obs["stop_reason"] and obs["error"] is None, obs
        return obs["task_id"], result.reward, obs["rewards"], steps


@pytest.mark.parametrize(("name", "env_args", "player", "n", "r"), CASES, ids=[c[0] for c in CASES])
def test_openenv_client_gets_the_rewards_of_rlvr_eval(capsys, tmp_path, name, env_args, player, n, r) -> None:
    expected = eval_rewards(capsys, tmp_path, name, env_args, player, n, r)
    env = load_environment(name, **env_args)
    policy = env.policies()[player]()

    async def play_all(url: str) -> dict:
        got = {}
        for task in range(n):
            for rollout in range(r):
                task_id, reward, rewards, steps = await play_over_openenv(url, policy, task, rollout)
                got[(task_id, rollout)] = (reward, rewards)
                assert steps >= 1
        return got

    with running(build_app(env, sampling=env.sampling)) as url:
        got = asyncio.run(play_all(url))
    assert got == expected
    if name == "wiki_search":  # the tool env really called its tools through the steps
        assert all(sum(v for k, v in rewards.items() if k.endswith("_calls")) > 0 for _, rewards in got.values())
    assert len({reward for reward, _ in got.values()}) > 1 or name == "wiki_search"


class _Walked(list):
    """A task list that counts the walks over it."""

    walks = 0

    def __iter__(self):
        self.walks += 1
        return super().__iter__()


def test_resets_by_id_walk_the_tasks_once_and_follow_a_changed_list() -> None:
    tasks = _Walked(Task(id=f"t{i}", question=str(i)) for i in range(5000))
    picker = Picker()
    for i in range(0, 5000, 25):  # a remote evaluation resets by id for every rollout
        assert picker.pick(tasks, f"t{i}", None).question == str(i)
    assert tasks.walks == 1  # (each reset walked them all before: 200 walks)
    tasks.append(Task(id="added", question="a"))
    assert picker.pick(tasks, "added", None).question == "a"
    tasks[7] = Task(id="swapped", question="s")  # same length, a task replaced in place
    with pytest.raises(UsageError, match="no task with id 't7'"):
        picker.pick(tasks, "t7", None)  # the index named a task that changed: built again
    assert picker.pick(tasks, "swapped", None).question == "s"
    walks = tasks.walks
    assert [picker.pick(tasks, str(i), None).id for i in (12, 13)] == ["t12", "t13"]  # no such id: an index
    assert tasks.walks == walks  # a miss walks nothing
    assert [picker.pick(tasks, None, None).id for _ in range(2)] == ["t0", "t1"]
    for hostile in (float("nan"), 1.5, True):  # (JSON gives floats; NaN too)
        with pytest.raises(UsageError, match="task is a task id or an index"):
            picker.pick(tasks, hostile, None)  # type: ignore[arg-type]
    with pytest.raises(UsageError) as caught:
        picker.pick(tasks, "x" * 10**6, None)
    assert len(str(caught.value)) < 300  # a huge id is cut in the message


async def test_sessions_run_concurrently_and_errors_are_one_message() -> None:
    env = load_environment("reverse_text")
    with running(build_app(env)) as url:
        async with RlvrEnvClient(base_url=url) as a, RlvrEnvClient(base_url=url) as b:
            first = await a.reset(task=0)
            second = await b.reset(task="1")
            assert first.observation.task_id != second.observation.task_id
            assert [m["role"] for m in first.observation.messages][-1] == "user"
            done = await a.step(RlvrAction(content="nothing like the reverse"))
            assert done.done and done.observation.rewards and 0 <= done.reward < 1
            with pytest.raises(RuntimeError, match="no episode in progress"):
                await a.step(RlvrAction(content="again"))
            with pytest.raises(RuntimeError, match="task must be 0[.][.]"):
                await a.reset(task=10**6)
            still = await b.step(RlvrAction(content="x"))
            assert still.done


async def test_a_session_that_leaves_mid_episode_ends_its_rollout_and_frees_its_slot() -> None:
    closed: list[str] = []

    class Recorded(SingleTurnEnv[State]):
        async def close_state(self, state: State) -> None:
            closed.append(state.task.id)

    env = Recorded([{"question": "first", "id": "a"}, {"question": "second", "id": "b"}])
    with running(build_app(env, max_sessions=1)) as url:
        async with RlvrEnvClient(base_url=url) as leaving:
            assert (await leaving.reset(task="a")).observation.messages[-1]["content"] == "first"
        for _ in range(200):  # the server ends the session, then its rollout, in its own time
            if closed:
                break
            await asyncio.sleep(0.02)
        async with RlvrEnvClient(base_url=url) as next_one:
            await next_one.reset(task="b")
            assert (await next_one.step(RlvrAction(content="done"))).done
    assert closed == ["a", "b"]


@pytest.mark.slow  # a server process: ~3 s of CPU importing OpenEnv (fastmcp, fastapi)
def test_rlvr_serve_command_serves_on_a_free_port(tmp_path) -> None:
    log = tmp_path / "serve.log"
    cmd = [sys.executable, "-m", "rlvr.cli", "serve", "reverse_text", "--port", "0", "-a", '{"num_tasks": 2}']
    with open(log, "w") as sink:
        proc = subprocess.Popen(cmd, stdout=sink, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        deadline, url = time.monotonic() + 60, None
        while url is None and time.monotonic() < deadline and proc.poll() is None:
            for line in log.read_text().splitlines():
                if "Uvicorn running on " in line:
                    url = line.split("Uvicorn running on ")[1].split()[0]
            time.sleep(0.05)
        assert url is not None, log.read_text()
        with GenericEnvClient(base_url=url).sync() as client:
            result = client.reset(task=1)
            assert result.observation["task_id"] and not result.done
            result = client.step({"content": "x", "tool_calls": []})
            assert result.done and set(result.observation["rewards"]) >= {"lcs_reward"}
    finally:
        proc.terminate()
        proc.wait(timeout=20)
