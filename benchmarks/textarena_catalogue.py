"""The TextArena bridge across TextArena's whole catalogue: does every game load and play?

Run: python benchmarks/textarena_catalogue.py [--games 2] [--ids all] [--only ID ...]

For every game id (`-v0` ids by default; `--ids all` adds their difficulty variants) it
loads `rlvr.envs.textarena.load_environment(game)` and, where it loads, plays `--games` games
twice through rlvr's engine: the `random` reference player against the `random` opponent,
and the same player in every seat (`opponent: "self"`). It prints one line per game and the
counts: games refused at load, by reason; games whose every rollout ended by the game's own
rules (`game_over`; how many of them with a move of the player that the game refused), was cut off at the episode's budget (`max_turns_reached`,
`others_out_of_moves`), or failed (an error record, a step past its deadline); and the wall
time of the slowest game. No game may run past its budget: a game that did would show as a
slow line here (each is timed).

A script rather than a test: it takes minutes on two cores, and its counts are measurements
for docs/environments.md, not a pass/fail check (the tests in tests/test_textarena.py pin the
behaviour each count depends on).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import time

from rlvr.engine import run_rollouts
from rlvr.envs.textarena import load_environment
from rlvr.envs.textarena.games import game_ids
from rlvr.errors import UsageError

ENDED, CUT, FAILED = "plays to its end", "cut off at the budget", "fails"


def play(game: str, games: int, opponent: str) -> tuple[str, str]:
    """One mode of one game: its verdict and a detail (the stop reasons, or the first error)."""
    env = load_environment(game=game, num_tasks=games, opponent=opponent, step_timeout_s=10.0)
    player = env.policies()["random"]()
    rollouts = asyncio.run(run_rollouts(env, player, env.tasks()))
    errors = [r.error for r in rollouts if r.error is not None]
    stops = collections.Counter(str(r.stop_reason) for r in rollouts)
    detail = ", ".join(f"{k} {v}" for k, v in sorted(stops.items()))
    refused = sum(r.rewards.get("invalid_moves", 0.0) > 0 for r in rollouts)
    detail += f"; {refused} of {len(rollouts)} with a refused move"
    if errors:
        return FAILED, str(errors[0]).splitlines()[0][:160]
    if set(stops) == {"game_over"}:
        return ENDED, detail
    return CUT, detail


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--games", type=int, default=2, help="games per game id and mode")
    parser.add_argument("--ids", choices=["v0", "all"], default="v0")
    parser.add_argument("--only", nargs="*", help="these ids only")
    args = parser.parse_args()
    ids = args.only or [g for g in game_ids() if args.ids == "all" or g.endswith("-v0")]
    refused: collections.Counter[str] = collections.Counter()
    verdicts: dict[str, collections.Counter[str]] = {"random": collections.Counter(), "self": collections.Counter()}
    slowest = (0.0, "")
    for game in ids:
        t0 = time.perf_counter()
        try:
            results = {mode: play(game, args.games, mode) for mode in verdicts}
        except UsageError as exc:
            reason = str(exc).split(": ", 1)[-1]
            refused[reason.split(" (")[0].split(":")[0]] += 1
            print(f"{game:<32} refused: {reason}")
            continue
        wall = time.perf_counter() - t0
        slowest = max(slowest, (wall, game))
        for mode, (verdict, _) in results.items():
            verdicts[mode][verdict] += 1
        line = "; ".join(f"{mode}: {verdict} ({detail})" for mode, (verdict, detail) in results.items())
        print(f"{game:<32} {wall:6.1f}s  {line}")
    print(f"\n{len(ids)} ids; {sum(refused.values())} refused at load:")
    for reason, n in refused.most_common():
        print(f"  {n:3d}  {reason}")
    for mode, counts in verdicts.items():
        print(f"opponent {mode}: " + ", ".join(f"{k} {v}" for k, v in counts.most_common()))
    print(f"slowest game: {slowest[1]} {slowest[0]:.1f} s for both modes")


if __name__ == "__main__":
    main()
