"""Runs for the report tests (tests/test_report*.py), made by the code that makes them in real
use (the engine and a results directory, `rlvr eval`, the trainer's metrics and evaluation
writers), each in a second or two on a laptop."""

from __future__ import annotations

import asyncio
import json
import math
import random
import zlib
from pathlib import Path
from typing import Any

from rlvr import MultiTurnEnv, Policy, Rubric, State, stop
from rlvr.cli import main
from rlvr.engine import run_rollouts
from rlvr.results import RunDir
from rlvr.types import Completion, Messages, SamplingArgs, ToolCall

NASTY = '<script>alert("x")</script> & <b>bold</b>'
"""Run text that must reach the page as text, never as markup."""

GREEDY = SamplingArgs(temperature=0.0)


# ---- a small env with error records, markup in every text and extreme metric values -------


class TwoTurnEnv(MultiTurnEnv[State]):
    """Task 'short' ends after one turn, the others after two; task 'boom' makes the model fail."""

    async def env_response(self, messages: Messages, state: State) -> Messages:
        return [{"role": "user", "content": f"again {NASTY}"}]

    @stop
    def done(self, state: State) -> bool:
        return state.turn >= (1 if state.task.id == "short" else 2)


def says_answer(completion: Messages, answer: str | None) -> float:
    return float(answer is not None and answer in str(completion[-1]["content"]))


def nasty_metric(completion: Messages) -> float:
    return -0.5


def extreme_metric(task: Any) -> float:
    """A weight-0 metric at the ends of the float range: 1e308 for task 'short', -1e308 for 't0'."""
    return {"short": 1e308, "t0": -1e308}.get(task.id, 0.0)


def _policy(messages: Messages, rng: object) -> str:
    if "boom" in str(messages[-1]["content"]):
        raise RuntimeError(f"model exploded {NASTY}")
    return f"the answer is 4 {NASTY}"


def make_run(path: Path, tasks: int = 3, *, rollouts: int = 2, extreme: bool = False) -> Path:
    """A results directory of `TwoTurnEnv`: `rollouts` rollouts of 2 + `tasks` tasks, those of
    'boom' errors. `extreme` adds `extreme_metric` (with one rollout a task, its mean and std
    stay finite)."""
    rows = [
        {"id": "short", "question": f"2+2? {NASTY}", "answer": "4"},
        {"id": "boom", "question": "boom", "answer": "4"},
    ]
    rows += [{"id": f"t{i}", "question": f"{i}+{4 - i}?", "answer": "5"} for i in range(tasks)]
    funcs: list[Any] = [says_answer, nasty_metric] + ([extreme_metric] if extreme else [])
    rubric = Rubric(funcs, [1.0] + [0.0] * (len(funcs) - 1))
    env = TwoTurnEnv(rows, system_prompt="be brief", rubric=rubric)
    meta = {
        "env": "two_turn",
        "model": f"policy:{NASTY}",
        "num_tasks": len(rows),
        "rollouts_per_task": rollouts,
        "reward_weights": dict(zip(rubric.names, rubric.weights)),
    }
    run, _ = RunDir.create(path, meta)
    asyncio.run(run_rollouts(env, Policy(_policy, "p"), env.tasks(), rollouts_per_task=rollouts, on_rollout=run.append))
    run.close(rollouts=rollouts * len(rows))
    return path


# ---- bundled environments through the CLI --------------------------------------------------


def eval_run(path: Path, env: str, policy: str, *, tasks: int = 8, rollouts: int = 2) -> Path:
    """`rlvr eval ENV -m policy:POLICY`: the results directory a user gets."""
    argv = ["eval", env, "-m", f"policy:{policy}", "-n", str(tasks), "-r", str(rollouts), "-q", "-o", str(path)]
    assert main(argv) == 0
    return path


def exact_run(path: Path) -> Path:
    """`rlvr eval tictactoe --exhaustive` of the teacher, which falls for fork traps: lost games."""
    assert main(["eval", "tictactoe", "-m", "policy:teacher", "--exhaustive", "-q", "-o", str(path)]) == 0
    return path


def tool_run(path: Path, tasks: int = 12) -> Path:
    """wiki_search with a flaky researcher: by question, it looks things up as the oracle does,
    first calls a tool that does not exist, first sends arguments that are not JSON (both come
    back as tool errors), or crashes after its first lookup (an error record)."""
    from wiki_search.players import oracle_policy

    from rlvr.registry import load_environment

    def flaky(messages: Messages, rng: random.Random) -> Completion:
        question = next(str(m["content"]) for m in messages if m["role"] == "user")
        kind = zlib.crc32(question.encode()) % 4
        results = [m for m in messages if m["role"] == "tool"]
        if kind in (1, 2) and not results:
            name, args = ("fetch_page", '{"title": "x"}') if kind == 1 else ("search_pages", "{not json")
            return Completion(text="", tool_calls=[ToolCall(id="call_bad", name=name, arguments=args)])
        if kind == 3 and results:
            raise RuntimeError("the researcher crashed after one lookup")
        clean = [m for m in messages if not (m["role"] == "tool" and str(m["content"]).startswith("Error:"))]
        return oracle_policy(clean, rng)

    env = load_environment("wiki_search")
    meta = {
        "command": "eval",
        "env": "wiki_search",
        "env_args": {},
        "model": "policy:flaky",
        "num_tasks": tasks,
        "rollouts_per_task": 1,
        "reward_weights": dict(zip(env.rubric.names, env.rubric.weights)),
    }
    run, _ = RunDir.create(path, meta)
    asyncio.run(run_rollouts(env, Policy(flaky, "flaky"), env.tasks()[:tasks], on_rollout=run.append))
    run.close(status="complete", rollouts=tasks)
    return path


# ---- a training run -----------------------------------------------------------------------


def training_run(path: Path, *, steps: int = 24, eval_every: int = 8) -> Path:
    """A tic-tac-toe training run's folder as `rlvr train` leaves it: config.json, metrics.csv
    (the trainer's metric names; made-up training numbers that improve, one step whose KL is
    NaN and whose gradient norm is infinite), and at every evaluation the evaluation sets and
    the exact evaluation, played by reference players that get better, measured and saved by
    the trainer's own functions."""
    from rlvr.exact import enumerate_games
    from rlvr.registry import load_environment
    from rlvr.train.evaluation import EvalSet, eval_metrics, exact_metrics, save_eval, save_exact
    from rlvr.train.logging import MetricsLog

    path.mkdir(parents=True)
    config = {"env": "tictactoe", "model": "models/tictactoe-tiny", "steps": steps, "loss": "cispo", "lr": 3e-5}
    (path / "config.json").write_text(json.dumps(config))
    log = MetricsLog(path, tensorboard=False, plots=False)
    opponents = ("random", "optimal")
    envs = {o: load_environment("tictactoe", opponent=o) for o in opponents}
    sets = [EvalSet(f"opponent={o}", env, env.tasks("eval")[:12], {"opponent": o}, size=12) for o, env in envs.items()]
    rng = random.Random(0)
    for step in range(steps + 1):
        if step:
            log.write(step, _train_metrics(step / steps, rng))
        if step % eval_every == 0:
            player = "random" if step == 0 else "teacher" if step < steps else "optimal"
            played = {
                s.label: asyncio.run(run_rollouts(s.env, s.env.policies()[player](), s.tasks, sampling=GREEDY))
                for s in sets
            }
            metrics, _ = eval_metrics(sets, played)
            exact = asyncio.run(enumerate_games(sets[0].env, sets[0].env.policies()[player](), GREEDY))
            metrics.update(exact_metrics(exact))
            where = path / "eval" / f"step_{step:06d}"
            for s in sets:
                save_eval(
                    where / s.label, played[s.label], env="tictactoe", env_args=s.env_args, model=player, step=step
                )
            save_exact(where / "exact", exact, env="tictactoe", env_args={}, model=player, step=step)
            log.write(step, metrics)
    log.close()
    return path


def _train_metrics(progress: float, rng: random.Random) -> dict[str, float]:
    """One training step's metrics (the names `rlvr train` logs), drifting with `progress`."""

    def noisy(start: float, end: float, spread: float = 0.03) -> float:
        return start + (end - start) * progress + rng.gauss(0.0, spread)

    win, loss = noisy(0.3, 0.75), max(noisy(0.5, 0.05), 0.0)
    reward = win + 0.5 * (1 - win - loss)
    metrics = {
        "reward/mean": reward,
        "reward/std": noisy(0.4, 0.25),
        "reward/win_reward": reward,
        "reward/format_reward": min(noisy(0.8, 1.0), 1.0),
        "reward/invalid_move_penalty": -max(noisy(0.3, 0.0), 0.0),
        "reward/win": win,
        "reward/draw": 1 - win - loss,
        "reward/loss": loss,
        "reward/timeout": 0.0,
        "reward/invalid_moves": max(noisy(1.4, 0.02, 0.1), 0.0),
        "reward/turns": noisy(3.6, 4.1, 0.1),
        "outcome/win_pct": 100 * win,
        "outcome/draw_pct": 100 * (1 - win - loss),
        "outcome/loss_pct": 100 * loss,
        "group/zero_std_frac": noisy(0.2, 0.5),
        "group/reward_std_mean": noisy(0.35, 0.2),
        "batch/kept_groups_frac": 1.0,
        "rollout/turns": noisy(3.6, 4.1, 0.1),
        "rollout/completion_tokens": noisy(120, 60, 5),
        "rollout/turn_tokens": noisy(33, 15, 2),
        "rollout/length_cut_frac": max(noisy(0.1, 0.0, 0.01), 0.0),
        "rollout/truncated_frac": 0.0,
        "rollout/error_frac": 0.0,
        "loss/policy": rng.gauss(0.0, 0.02),
        "kl/ref": math.nan if progress == 0.5 else noisy(0.0, 0.02, 0.002),
        "entropy/mean": noisy(0.9, 0.4),
        "ratio/mean": 1.0,
        "clip/frac": abs(noisy(0.02, 0.01, 0.005)),
        "is_weight/mean": 1.0,
        "grad/norm": math.inf if progress == 0.5 else abs(noisy(2.0, 0.8, 0.3)),
        "optim/lr": 3e-5,
        "time/step": noisy(6.0, 4.5, 0.3),
        "throughput/rollouts_per_s": noisy(40, 55, 2),
        "throughput/gen_tokens_per_s": noisy(4500, 5200, 150),
    }
    metrics["loss/total"] = metrics["loss/policy"]
    return metrics
