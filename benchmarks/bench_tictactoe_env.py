"""Speed of the tic-tac-toe environment through rlvr's engine, with a zero-cost policy.

Run: python benchmarks/bench_tictactoe_env.py [--games 1000] [--concurrency 256]
(pin it with `taskset -c 0,1` to see the 2-core number; the engine itself uses one core).

Prints: dataset build time; games/s and turns/s of whole rollouts (engine + env + rubric +
a policy that answers the first free cell, read from the prompt's last line without parsing
the board, with a unique think text); the share of that time spent in the environment's own code (env_response,
rubric); and the opponent's move latency (move_rng + minimax lookup), as the environment
calls it.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import time

from rlvr_tictactoe import load_environment
from rlvr_tictactoe.game import EMPTY_BOARD, apply_move, legal_moves, move_rng, opponent_move

from rlvr import Policy
from rlvr.engine import run_rollouts


def zero_cost(messages: list[dict], rng: random.Random) -> str:
    free = str(messages[-1]["content"]).rpartition("Available positions: ")[2]
    # A unique think text per reply, as a model's would be (no help from the parse cache).
    return f"<think>{rng.random()}</think><move>{free.split(',', 1)[0]}</move>"


def bench_rollouts(games: int, concurrency: int, opponent: str) -> None:
    env = load_environment(opponent=opponent, eval_tasks=games)
    tasks = env.tasks()
    policy = Policy(zero_cost, name="zero-cost")
    asyncio.run(run_rollouts(env, policy, tasks[:50]))  # warm the minimax cache
    t = time.perf_counter()
    rollouts = asyncio.run(run_rollouts(env, policy, tasks, concurrency=concurrency))
    wall = time.perf_counter() - t
    turns = sum(len(r.turns) for r in rollouts)
    env_s = sum(r.timing.get("env", 0.0) for r in rollouts)
    score_s = sum(r.timing.get("score", 0.0) for r in rollouts)
    assert all(r.error is None for r in rollouts)
    print(
        f"  opponent={opponent:<8} {games} games, {turns} turns in {wall * 1e3:.0f} ms: "
        f"{games / wall:,.0f} games/s, {turns / wall:,.0f} turns/s; "
        f"env_response {env_s / turns * 1e6:.1f} us/turn, rubric {score_s / games * 1e6:.1f} us/game "
        f"({100 * (env_s + score_s) / wall:.0f}% of the wall time)"
    )


def bench_opponent(calls: int) -> None:
    rng = random.Random(0)
    boards = []
    while len(boards) < calls:  # random mid-game positions with O to move
        board = EMPTY_BOARD
        for ply in range(rng.randrange(1, 8, 2)):
            moves = legal_moves(board)
            if not moves:
                break
            board = apply_move(board, rng.choice(moves), "XO"[ply % 2])
        if legal_moves(board) and board.count("X") > board.count("O"):
            boards.append(board)
    times = []
    for i, board in enumerate(boards):
        t = time.perf_counter_ns()
        opponent_move(board, "O", 0.25, move_rng(i, board))
        times.append(time.perf_counter_ns() - t)
    times.sort()
    print(
        f"  opponent move (move_rng + opponent_move): median {statistics.median(times) / 1e3:.1f} us, "
        f"p99 {times[int(0.99 * len(times))] / 1e3:.1f} us over {calls} positions"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--games", type=int, default=1000)
    ap.add_argument("--concurrency", type=int, default=256)
    args = ap.parse_args()
    t = time.perf_counter()
    load_environment(num_tasks=1000, eval_tasks=1000)
    print(
        f"load_environment (1000 train + 1000 eval tasks, cold minimax cache): {(time.perf_counter() - t) * 1e3:.0f} ms"
    )
    print(f"rollouts through the engine (concurrency {args.concurrency}):")
    for opponent in ("optimal", "mix", "random"):
        bench_rollouts(args.games, args.concurrency, opponent)
    bench_opponent(20_000)


if __name__ == "__main__":
    main()
