"""Given replies in restarts (`rlvr train --restart-explore`): where the restarts sit, and how
hard a given reply pulls on the weights.

    python experiments/tictactoe/given.py grads models/tictactoe-tiny --games 40 --points 30
    python experiments/tictactoe/given.py where models/tictactoe-tiny --points-mode random --steps 12 -o runs/where

`grads`: plays GAMES training games (the opponent of `--p`, traps, random replies as in plan
`given`), takes POINTS of their restart points (`restart_tasks`), and at each one measures the
log-probability of a reply and the norm of its gradient over every weight, for the model's own
reply sampled at T 1 and for each of the env's `other_replies` there (the model's own move left
out). A given reply's update is its gradient times its advantage: the ratio of the two medians
says how much more one given sequence moves the weights than one sampled sequence.

`where`: trains STEPS steps of plan `given`'s recipe scaled to a CPU (64 games a step, 16 greedy
probes, k given replies a restart) and counts, per move of X at which a restart begins (the
model turns in its prompt, plus one), its games with a given first move and with the model's own,
and their mean rewards. Prints one table each; numbers in docs/RESULTS.md, plan `given`.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import random
import statistics
import sys
from collections import defaultdict
from typing import Any

ENV_ARGS = {"min_random_move_prob": 0.7, "max_random_move_prob": 0.7, "trap_prob": 1.0, "opening_plies": 0}


def env_args(p: float) -> dict[str, Any]:
    return {**ENV_ARGS, "min_random_move_prob": p, "max_random_move_prob": p, "random_replies": 4}


async def grads(args: argparse.Namespace) -> None:
    import torch
    from rlvr_tictactoe.env import load_environment, read_move

    from rlvr import SamplingArgs
    from rlvr.clients.local import LocalModel
    from rlvr.engine import run_rollouts

    env = load_environment(**env_args(args.p))
    lm = LocalModel(args.model)
    params = list(lm.model.parameters())
    tasks = env.tasks("train")[: args.games]
    sampling = SamplingArgs(temperature=1.0, max_tokens=48)
    games = await run_rollouts(env, lm, tasks, sampling=sampling, concurrency=max(len(tasks), 1))
    by_id = {t.id: t for t in tasks}
    points = [p for g in games if g.error is None for p in env.restart_tasks(by_id[g.task_id], g)]
    random.Random(args.seed).shuffle(points)
    found: dict[str, list[tuple[float, float]]] = {"own": [], "given": []}
    for task in points[: args.points]:
        messages, board = env.initial_prompt(task), tuple(task.info["board"])
        own = await lm.chat(messages, sampling.replace(seed=args.seed))
        own_cell = read_move(own.text, board)[0]
        replies = [("own", own.text)]
        replies += [("given", t) for t in env.other_replies(task) if read_move(t, board)[0] != own_cell]
        for kind, text in replies:
            c = await lm.give(messages, text)  # the ids it is trained as
            ids = torch.tensor([[*c.prompt_token_ids, *c.token_ids]], device=lm.device)
            lm.model.zero_grad()
            logits = lm.model(ids).logits[0, len(c.prompt_token_ids) - 1 : -1].float()
            logp = torch.log_softmax(logits, -1).gather(1, ids[0, len(c.prompt_token_ids) :, None]).sum()
            logp.backward()
            norm = math.sqrt(sum(float(p.grad.float().pow(2).sum()) for p in params if p.grad is not None))
            found[kind].append((float(logp.detach()), norm))
    await lm.aclose()
    print(f"{min(len(points), args.points)} restart points of {len(games)} games (p = {args.p})")
    print("| reply | n | median log p | median gradient norm | 10th-90th percentile |")
    print("|---|---|---|---|---|")
    for kind, rows in found.items():
        if not rows:
            print(f"| {kind} | 0 | | | |")
            continue
        norms = sorted(n for _, n in rows)
        low, high = norms[int(0.1 * (len(norms) - 1))], norms[int(0.9 * (len(norms) - 1))]
        median_lp = statistics.median(lp for lp, _ in rows)
        print(f"| {kind} | {len(rows)} | {median_lp:.2f} | {statistics.median(norms):.3g} | {low:.3g}-{high:.3g} |")


def where(args: argparse.Namespace) -> None:
    from rlvr.train import grpo
    from rlvr.train import restarts as restarts_module
    from rlvr.train.config import TrainConfig

    tally: dict[int, dict[str, list[float]]] = defaultdict(lambda: {"given": [], "own": []})
    metrics = restarts_module.Restarts.metrics

    def counted(self: Any, rollouts: Any) -> dict[str, float]:
        for r in rollouts:
            if r.task_id in self.played and r.error is None:
                move = 1 + sum(1 for m in r.prompt if m.get("role") == "assistant")
                tally[move]["given" if r.key in self.given else "own"].append(r.reward)
        return metrics(self, rollouts)

    restarts_module.Restarts.metrics = counted  # (this process only: a measurement, not the trainer)
    cfg = TrainConfig(
        env="tictactoe",
        model=args.model,
        output_dir=args.output_dir,
        steps=args.steps,
        batch_size=args.batch_size,
        group_size=8,
        loss="cispo",
        max_tokens=48,
        lr=1e-5,
        env_args=env_args(args.p),
        restart_frac=0.5,
        restart_below=1.0,
        restart_points=args.points_mode,
        restart_greedy=16,
        restart_explore=args.explore,
        eval_every=None,
        save_every=None,
        micro_batch_size=32,
    )
    grpo.train(cfg, quiet=True, plots=False)
    print(f"restarts by X's move ({args.points_mode}, k = {args.explore}, {args.steps} steps):")
    print("| X's move | restarts | given games, mean reward | own games, mean reward |")
    print("|---|---|---|---|")
    for move, kinds in sorted(tally.items()):
        n = (len(kinds["given"]) + len(kinds["own"])) // 8
        cells = [f"{len(v)}, {sum(v) / len(v):.3f}" if v else "0" for v in (kinds["given"], kinds["own"])]
        print(f"| {move} | {n} | {cells[0]} | {cells[1]} |")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="what", required=True)
    g = sub.add_parser("grads", help="log p and gradient norm of own and given replies at restart points")
    g.add_argument("model")
    g.add_argument("--games", type=int, default=40)
    g.add_argument("--points", type=int, default=30)
    w = sub.add_parser("where", help="a short training run: restarts by X's move, given vs own rewards")
    w.add_argument("model")
    w.add_argument("--points-mode", choices=["random", "all", "backtrack"], default="backtrack")
    w.add_argument("--explore", type=int, default=2)
    w.add_argument("--steps", type=int, default=12)
    w.add_argument("--batch-size", type=int, default=64)
    w.add_argument("-o", "--output-dir", required=True)
    for p in (g, w):
        p.add_argument("--p", type=float, default=0.7, help="the training opponent's random-move probability")
        p.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if args.what == "grads":
        asyncio.run(grads(args))
    else:
        where(args)


if __name__ == "__main__":
    sys.exit(main())
