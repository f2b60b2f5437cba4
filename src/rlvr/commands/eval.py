"""`rlvr eval ENV -m MODEL`: run an environment against a model, save and summarise the results.

Each finished rollout is appended to RUN_DIR/results.jsonl at once; `--resume` continues an
interrupted run without losing or repeating rollouts, and extends a finished one: a larger -n
or -r plays only the missing (task, rollout) pairs. Without -o, `--resume` picks the newest
unfinished run of ENV and MODEL under runs/eval (else the newest). A change that would make
the old rollouts incomparable (model, env args, sampling, split) is refused.

Sampling: the environment's own, under `[tool.rlvr.eval]` of its pyproject.toml (defaults for
-n, -r, -c, --split and sampling keys), under -S JSON, under -t and -T.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import math
import re
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rlvr.commands import eval_endpoints
from rlvr.commands.eval_endpoints import LimitHits, base_urls, print_endpoints
from rlvr.commands.sampling import (
    add_sampling_args,
    json_object,
    parse_sampling_args,
    reply_limit,
    tasks_and_sampling,
    temperature_line,
)
from rlvr.errors import RlvrError, UsageError

if TYPE_CHECKING:
    from rlvr.clients.base import ChatClient


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "eval",
        help="evaluate a model in an environment",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("env", help="environment name (see `rlvr list`)")
    add_model_args(p)
    own = "or the env's [tool.rlvr.eval]"
    p.add_argument("-n", "--num-tasks", type=int, default=None, help=f"tasks to evaluate (default 5 {own}; -1 = all)")
    p.add_argument("-r", "--rollouts", type=int, default=None, help=f"rollouts per task (default 3 {own})")
    p.add_argument("-c", "--concurrency", type=int, default=None, help=f"rollouts in flight at once (default 32 {own})")
    add_sampling_args(p)
    p.add_argument("-a", "--env-args", default="{}", metavar="JSON", help="environment arguments as a JSON object")
    eval_endpoints.add_env_server_args(p)
    p.add_argument(
        "-o", "--output", default=None, metavar="DIR", help="results directory (default runs/eval/ENV--MODEL--TIME)"
    )
    p.add_argument(
        "--resume",
        action="store_true",
        help="continue or extend (larger -n or -r) the run in --output; without -o, the newest unfinished run of "
        "ENV and MODEL under runs/eval, else the newest",
    )
    p.add_argument("--split", choices=["eval", "train"], default=None, help=f"which task split (default eval {own})")
    p.add_argument(
        "--exhaustive",
        action="store_true",
        help="exact evaluation: play every line of the env's game tree at temperature 0 (envs with a game "
        "tree, e.g. tictactoe); with -T > 0, the policy as it samples (--samples K draws a decision, with "
        "bounds); -n, -r and --split do not apply",
    )
    # -- sampled exact evaluation (rlvr.exact_sampled): its flags --
    from rlvr.commands import exact_sampled

    exact_sampled.add_arguments(p)
    # -- end sampled exact evaluation --
    p.add_argument(
        "--save-dataset",
        default=None,
        metavar="DIR",
        help="also write the rollouts as a Hugging Face dataset (save_to_disk; the hf extra)",
    )
    p.add_argument(
        "--push-to-hub",
        default=None,
        metavar="REPO",
        help="also upload that dataset to the Hub (private; needs a token)",
    )
    p.add_argument(
        "-q",
        "--quiet",
        action="store_true",
        help="no progress (a bar on a terminal, else a line every tenth of the run or 30 s), "
        "no third-party loading bars",
    )
    p.set_defaults(run=run)


def add_model_args(p: argparse.ArgumentParser) -> None:
    """The model-selection flags shared by eval, gen and play."""
    p.add_argument(
        "-m",
        "--model",
        default=None,
        help="policy:NAME (reference player), a local model directory, or an API model name "
        "(default: the environment's own default model)",
    )
    p.add_argument(
        "-b",
        "--base-url",
        action="append",
        default=None,
        metavar="URL",
        help="OpenAI-compatible endpoint, e.g. http://localhost:8000/v1; repeat it (or name a file of URLs, one a "
        "line) to spread the requests over several servers of the same model",
    )
    p.add_argument(
        "-k", "--api-key-var", default=None, help="environment variable holding the API key (default OPENAI_API_KEY)"
    )
    p.add_argument(
        "--timeout", type=float, default=120.0, help="seconds per model request before a retry (default 120)"
    )
    p.add_argument("--max-retries", type=int, default=5, help="retries per request on 429/5xx/timeouts (default 5)")


def parse_env_args(text: str) -> dict[str, Any]:
    return json_object("-a", text, '{"seed": 1}')


def check_positive(name: str, value: int | float | None) -> None:
    if value is not None and value <= 0:
        raise UsageError(f"{name} must be positive, got {value}")


def check_run_args(args: argparse.Namespace) -> None:
    """The flags shared by eval and gen: -n, -r, -c, -t, -T, and -S (parsed into `sampling_json`)."""
    args.sampling_json = parse_sampling_args(args.sampling_args)
    if args.num_tasks is not None and args.num_tasks != -1 and args.num_tasks <= 0:
        raise UsageError(f"-n must be a positive number of tasks, or -1 for all of them; got {args.num_tasks}")
    check_positive("-r", args.rollouts)
    check_positive("-c", args.concurrency)
    check_positive("-t", args.max_tokens)
    if args.temperature is not None and not (math.isfinite(args.temperature) and args.temperature >= 0):
        raise UsageError(f"-T must be a finite number >= 0, got {args.temperature}")


def run_header(env_name: str, model: str, tasks: int, rollouts: int, sampling: Any) -> str:
    """The line a run opens with: what plays, how much, and the limits it samples under.

    >>> from rlvr.types import SamplingArgs
    >>> run_header("reverse_text", "m", 5, 3, SamplingArgs(max_tokens=512, temperature=0.7))
    'reverse_text / m: 5 tasks x 3 rollouts, max 512 tokens a turn, temperature 0.7'
    """
    limit = "no token limit but the endpoint's" if sampling.max_tokens is None else f"max {sampling.max_tokens} tokens"
    return f"{env_name} / {model}: {tasks} tasks x {rollouts} rollouts, {limit} a turn, temperature {sampling.temperature:g}"


def latest_run(root: Path, env: str, model: str) -> Path:
    """The run of `env` and `model` (slug) under `root` that `--resume` without -o continues:
    the newest unfinished one, else the newest (names end with their start time)."""
    from rlvr.results import RunDir

    runs = sorted(root.glob(f"{env}--{model}--*"), reverse=True)
    status = {}
    for run in runs:
        try:
            status[run] = RunDir.open(run).metadata.get("status")
        except RlvrError:
            continue  # not a results folder
    if not status:
        raise UsageError(
            f"no earlier run of {env} / {model} under {root} to resume; "
            "run without --resume to start one, or name its folder with -o"
        )
    return next((run for run in status if status[run] != "complete"), next(iter(status)))


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text.rstrip("/").rsplit("/", 1)[-1])[:60]


def load_env_and_client(args: argparse.Namespace, concurrency: int) -> tuple[Any, ChatClient, str]:
    """The environment, the client and the model name, from the shared flags."""
    from rlvr.registry import load_environment

    env = load_environment(args.env, **parse_env_args(args.env_args))
    client, model = client_for(args, env, concurrency)
    return env, client, model


def client_for(args: argparse.Namespace, env: Any, concurrency: int) -> tuple[ChatClient, str]:
    """The client and the model name for `env`, from the shared model flags."""
    from rlvr.clients.base import RemoteClient
    from rlvr.clients.resolve import make_client

    args.base_url = base_urls(args.base_url)
    model = args.model or env.default_model()
    if model is None:
        names = ", ".join(f"policy:{n}" for n in env.policies()) or "an API model or a local model directory"
        raise UsageError(f"environment {args.env!r} has no default model; pass -m (e.g. {names})")
    client = make_client(
        model,
        env,
        base_url=args.base_url,
        api_key_var=args.api_key_var,
        timeout_s=args.timeout,
        max_retries=args.max_retries,
        concurrency=concurrency,
    )
    if isinstance(client, RemoteClient):  # an unreachable endpoint fails here, before anything is written
        asyncio.run(client.check())
    return client, model


def run(args: argparse.Namespace) -> int:
    from rlvr.commands.env_defaults import apply_env_defaults
    from rlvr.results import RunDir
    from rlvr.summary import Summary, print_summary

    apply_env_defaults(args)
    check_run_args(args)
    if args.save_dataset or args.push_to_hub:
        from rlvr.hf import require

        require(args.push_to_hub)
    if args.exhaustive and args.temperature is None:
        args.temperature = 0.0
    env, client, model = load_env_and_client(args, args.concurrency)
    env = eval_endpoints.with_env_servers(args, env)
    tasks, sampling = tasks_and_sampling(args, env, client)
    out = Path(args.output or f"runs/eval/{args.env}--{_slug(model)}--{time.strftime('%Y%m%d-%H%M%S')}")
    if args.resume and args.output is None:
        out = latest_run(Path("runs/eval"), args.env, _slug(model))
        print(f"resuming {out}", flush=True)
    if args.exhaustive:
        from rlvr.commands import exact

        return exact.run(args, out, env, client, model, sampling)
    weights = dict(zip(env.rubric.names, env.rubric.weights))
    metadata = _metadata(args, env, model, len(tasks), sampling, weights)
    # nothing grows with the number of rollouts but the keys done (to resume) and what the
    # environment's own summary needs (see `Outcomes`)
    summary, outcomes, hits, done = Summary(args.rollouts, weights), Outcomes(env), LimitHits(), set()

    def count(rollout: Any) -> None:
        summary.add(rollout)
        outcomes.add(rollout)
        hits.add(rollout)

    def count_earlier(rollout: Any) -> None:
        count(rollout)
        done.add(rollout.key)

    run_dir = RunDir.start(out, metadata, resume=args.resume, each=count_earlier)
    earlier = summary.rollouts
    total = len(tasks) * args.rollouts
    print(run_header(args.env, model, len(tasks), args.rollouts, sampling), flush=True)
    print(temperature_line(args, sampling), flush=True)
    start = time.monotonic()
    _run_with_progress(env, client, tasks, args, sampling, run_dir, done, total, count, quiet=args.quiet)
    elapsed = time.monotonic() - start
    run_dir.close(
        status="complete",
        rollouts=summary.rollouts,
        errors=summary.errors,
        seconds=round(elapsed, 3),
        **({"endpoints": client.endpoints.stats()} if isinstance(args.base_url, list) else {}),  # type: ignore[attr-defined]
        **eval_endpoints.env_server_stats(env),
    )
    print_summary(summary, title=f"{args.env} / {model}", extra=outcomes.summarize(), elapsed_s=elapsed)
    print(hits.line(*reply_limit(args, env, client)))
    print_endpoints(client)
    print(
        f"saved {summary.rollouts} rollouts to {run_dir.results_path}"
        + (f" ({earlier} from the earlier run)" if earlier else "")
    )
    if args.save_dataset or args.push_to_hub:
        _export(args, run_dir, env, model)
    if summary.rollouts and summary.errors == summary.rollouts:
        print(
            f"rlvr eval: error: all {summary.rollouts} rollouts failed; the first: {outcomes.first_error}",
            file=sys.stderr,
        )
        return 1
    return 0 if summary.rollouts else 1


def _metadata(
    args: argparse.Namespace, env: Any, model: str, num_tasks: int, sampling: Any, weights: dict[str, float]
) -> dict[str, Any]:
    """The run's metadata.json: what was evaluated, against what, how."""
    return {
        "command": "eval",
        "env": args.env,
        "env_args": env.env_args,
        "model": model,
        "base_url": args.base_url,
        "num_tasks": num_tasks,
        "rollouts_per_task": args.rollouts,
        "sampling": {k: v for k, v in vars(sampling).items() if k != "seed"},
        "split": args.split,
        "reward_weights": weights,
    }


def _export(args: argparse.Namespace, run_dir: Any, env: Any, model: str) -> None:
    """`--save-dataset` / `--push-to-hub`, read back from the results: the run kept none in memory."""
    from rlvr.hf import export

    print(
        export(
            run_dir.read(),
            task=args.env,
            reward_names=env.rubric.names,
            model=model,
            save_dir=args.save_dataset,
            push_to=args.push_to_hub,
        )
    )


class Outcomes:
    """What the environment's own `summarize` (win %, goal %, ...) gets: a light copy of each
    rollout (no prompt, no turns: a few hundred bytes), kept only when the environment has
    such a summary; and the first error seen."""

    def __init__(self, env: Any) -> None:
        from rlvr.envs.multiturn import MultiTurnEnv

        self.env = env
        own = type(env).summarize is not MultiTurnEnv.summarize or "summarize" in vars(env)
        self.kept: list[Any] | None = [] if own else None
        self.first_error: str | None = None

    def add(self, rollout: Any) -> None:
        if self.first_error is None and rollout.error is not None:
            self.first_error = rollout.error
        if self.kept is not None:
            self.kept.append(dataclasses.replace(rollout, prompt=[], turns=[], error=rollout.error_kind))

    def summarize(self) -> dict[str, float] | None:
        return self.env.summarize(self.kept) if self.kept is not None else None


def _run_with_progress(
    env: Any,
    client: ChatClient,
    tasks: list[Any],
    args: argparse.Namespace,
    sampling: Any,
    run_dir: Any,
    done: set[tuple[str, int]],
    total: int,
    count: Callable[[Any], None],
    *,
    quiet: bool,
) -> None:
    from rlvr.commands.turns import CountingClient
    from rlvr.engine import run_rollouts
    from rlvr.progress import Progress

    scored, reward_sum = 0, 0.0
    counted = CountingClient(client)
    with Progress("rollouts", total, completed=len(done), quiet=quiet, activity=counted.activity) as progress:

        def on_rollout(rollout: Any) -> None:
            nonlocal scored, reward_sum
            run_dir.append(rollout)
            count(rollout)
            if rollout.error is None:
                scored, reward_sum = scored + 1, reward_sum + rollout.reward
            mean = reward_sum / scored if scored else float("nan")
            progress.advance(status=f"reward {mean:.3f}")

        async def play() -> None:
            try:
                await run_rollouts(
                    env,
                    counted.player(),
                    tasks,
                    rollouts_per_task=args.rollouts,
                    concurrency=args.concurrency,
                    sampling=sampling,
                    skip=done,
                    on_rollout=on_rollout,
                    collect=False,
                )
            finally:
                await client.aclose()
                await env.aclose()

        try:
            asyncio.run(play())
        except BaseException:
            run_dir.close(status="interrupted")
            raise
