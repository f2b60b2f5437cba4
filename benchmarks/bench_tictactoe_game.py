"""Speed and strength of the pure tic-tac-toe logic (no model, no rlvr core).

Run: PYTHONPATH=environments/tictactoe python benchmarks/bench_tictactoe_game.py
Prints: solve time, opponent move latency (median over every reachable position), games/s
with random players, and the W/D/L of the reference players over 1000 games (first mover
alternates, as the environment's 50/50 start does).
"""

from __future__ import annotations

import random
import statistics
import time
from collections import Counter

from rlvr_tictactoe.game import (
    EMPTY_BOARD,
    _solve,
    apply_move,
    legal_moves,
    move_rng,
    opponent_move,
    optimal_player,
    other,
    play_game,
    random_player,
    teacher_player,
)


def live_states() -> list[tuple[tuple[str, ...], str]]:
    seen: set = set()
    stack = [(EMPTY_BOARD, "X"), (EMPTY_BOARD, "O")]
    while stack:
        state = stack.pop()
        if state not in seen:
            seen.add(state)
            board, mark = state
            stack += [(apply_move(board, c, mark), other(mark)) for c in legal_moves(board)]
    return [s for s in seen if legal_moves(s[0])]


def main() -> None:
    start = time.perf_counter()
    _solve(EMPTY_BOARD, "X"), _solve(EMPTY_BOARD, "O")
    print(f"solve both starts (first use): {(time.perf_counter() - start) * 1e3:.1f} ms")

    states = live_states()
    for label, with_rng in (("opponent_move", False), ("move_rng + opponent_move", True)):
        times = []
        for seed, (board, mark) in enumerate(states * 3):
            rng = random.Random(seed)
            t = time.perf_counter_ns()
            if with_rng:
                rng = move_rng(seed, board)
            opponent_move(board, mark, 0.25, rng)
            times.append(time.perf_counter_ns() - t)
        print(
            f"{label} latency: median {statistics.median(times) / 1e3:.2f} us, "
            f"p99 {sorted(times)[int(len(times) * 0.99)] / 1e3:.2f} us ({len(times)} calls)"
        )

    rng, n = random.Random(0), 100_000
    t = time.perf_counter()
    for i in range(n):
        play_game(random_player, random_player, "XO"[i % 2], rng)
    print(f"random vs random: {n / (time.perf_counter() - t):,.0f} games/s (1 core)")

    players = {"teacher": teacher_player, "optimal": optimal_player, "random": random_player}
    for name, player in players.items():
        line = []
        for opp_name in ("random", "optimal"):
            rng = random.Random(1)
            opponent = players[opp_name]
            results = Counter(play_game(player, opponent, "XO"[i % 2], rng) for i in range(1000))
            line.append(f"vs {opp_name} {results['X']}/{results[None]}/{results['O']}")
        print(f"{name} (as X, W/D/L of 1000): " + ", ".join(line))


if __name__ == "__main__":
    main()
