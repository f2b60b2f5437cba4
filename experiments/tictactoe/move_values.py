"""What each move at one position is worth when the model itself plays the rest of the game.

`experiments/tictactoe/regret.py` values a move by the best reply afterwards. RL scores a move by
the games the model goes on to play at its training temperature, and a move that wins more
with perfect follow-up can win less when the follow-up is sampled. This script measures that:
it walks the model greedily to a position (the opponent's moves given), then plays GAMES games
from there for each candidate move (the move forced in the teacher's words, the rest sampled
from the model at each temperature) against the training opponent (random with probability
p, else a best move, a trap when it can), and the same with the model choosing the move
itself. The forced reply gives the teacher's reason for that move on that board (a win, a
block, or no threat), as the trainer's `restart_explore` does. Every arm uses the same opponent
seeds, so two arms' games differ only by what X played. Score: the env's `win_reward` (a win 1, a draw 0.5, a loss or a timeout 0), without its format terms;
W / D / L counts leave timeouts out.

    python experiments/tictactoe/move_values.py models/tictactoe-tiny --line O8.X4.O1 --moves 0,3,5 \\
        --temperature 1 0 --games 400 --p 0.7 --trap-prob 1

Prints a table per temperature: each arm's mean score, its standard error, W/D/L counts, and
the paired difference to the model's greedy move (same seeds, so the standard error of the
difference is of the paired differences).
"""

from __future__ import annotations

import argparse
import asyncio
import math
import sys
import time
from collections.abc import Sequence
from typing import Any

from rlvr_tictactoe import players, tree
from rlvr_tictactoe.env import load_environment, read_move
from rlvr_tictactoe.game import teacher_replies
from rlvr_tictactoe.tasks import opening_task

from rlvr import SamplingArgs, Task
from rlvr.clients.resolve import make_client
from rlvr.engine import run_rollouts
from rlvr.types import Completion


def parse_line(text: str) -> tuple[int | None, list[int], list[int]]:
    """'O8.X4.O1' -> (opening 8, X's moves [4], O's replies [1]); 'X4.O0' -> (None, [4], [0])."""
    steps = [s for s in text.replace(" ", ".").split(".") if s]
    if not steps or any(len(s) != 2 or s[0] not in "XO" or s[1] not in "012345678" for s in steps):
        raise SystemExit(f"--line: moves like O8.X4.O1 (cells 0-8), got {text!r}")
    marks, cells = [s[0] for s in steps], [int(s[1]) for s in steps]
    if len(set(cells)) < len(cells):
        raise SystemExit(f"--line takes a cell twice: {text!r}")
    if any(a == b for a, b in zip(marks, marks[1:])) or marks[-1] != "O":
        raise SystemExit(f"--line must alternate and end with O's move (X to play next), got {text!r}")
    opening = cells[0] if marks[0] == "O" else None
    rest = list(zip(marks, cells))[1 if opening is not None else 0 :]
    return opening, [c for m, c in rest if m == "X"], [c for m, c in rest if m == "O"]


def move_text(board: Sequence[str], cell: int) -> str:
    """The reply for `cell` in the teacher's words (`game.teacher_replies`, as the trainer's
    `restart_explore` gives it); a move the teacher never makes there says only "I play N."."""
    why = dict(teacher_replies(board, "X")).get(cell, f"I play {cell}.")
    return players.reply(cell, why)


class Forced:
    """A client whose reply at the position (a conversation of `at` messages) is fixed."""

    def __init__(self, client: Any, at: int, text: str) -> None:
        self.client, self.at, self.text, self.name = client, at, text, client.name

    async def chat(self, messages: Any, sampling: SamplingArgs, tools: Any = None) -> Completion:
        if len(messages) == self.at:
            return Completion(text=self.text)
        return await self.client.chat(messages, sampling, tools)

    async def aclose(self) -> None:
        pass


async def main(args: argparse.Namespace) -> None:
    opening, x_moves, o_replies = parse_line(args.line)
    if args.games < 2:
        raise SystemExit("--games must be at least 2 (a standard error needs two games)")
    p = args.p
    env = load_environment(min_random_move_prob=p, max_random_move_prob=p, trap_prob=args.trap_prob, max_turns=8)
    client = make_client(args.model, env, concurrency=args.concurrency, device=args.device)
    greedy = SamplingArgs(temperature=0.0, max_tokens=48)
    # walk to the position: the model's greedy replies, the line's O moves
    base = opening_task("walk", 0, p, opening)
    task = tree.line_task(base, opening=opening, moves=[], line=o_replies, weights={})
    state = env.setup_state(task)
    messages = env.initial_prompt(task)
    for want in x_moves:
        reply = (await client.chat(messages, greedy)).message()
        cell, _ = read_move(str(reply["content"]), state.board)
        if cell != want:
            raise SystemExit(f"the model plays {cell} greedily where the line has X{want}: {reply['content']!r}")
        messages = [*messages, reply]
        messages += await env.env_response(messages, state)
    board = state.board
    print(f"position after {args.line}: {''.join(c if c != ' ' else '.' for c in board)} (X to move)")
    own = (await client.chat(messages, greedy)).text
    own_cell, _ = read_move(own, board)
    print(f"the model's greedy reply: {own!r}")
    free = [c for c in range(9) if board[c] == " "]
    try:
        moves = [int(m) for m in args.moves.split(",")] if args.moves else free
    except ValueError:
        raise SystemExit(f"--moves: cells separated by commas, got {args.moves!r}") from None
    if taken := [m for m in moves if m not in free]:
        raise SystemExit(f"--moves: {taken} not free on this board (free: {free})")
    if own_cell is not None and own_cell not in moves:
        moves.insert(0, own_cell)
    info = {"random_move_prob": p, "bucket": 0, "model_starts": opening is None, "board": "".join(board)}
    tasks = [Task(id=f"g{i}", prompt=tuple(messages), info=info, seed=args.seed + i) for i in range(args.games)]
    for temperature in args.temperature:
        sampling = SamplingArgs(temperature=temperature, max_tokens=48)
        results: dict[str, list[float]] = {}
        counts: dict[str, dict[str, int]] = {}
        for arm in ["model", *map(str, moves)]:
            started = time.monotonic()
            arm_client = client if arm == "model" else Forced(client, len(messages), move_text(board, int(arm)))
            rollouts = await run_rollouts(env, arm_client, tasks, concurrency=args.concurrency, sampling=sampling)
            results[arm] = [r.rewards["win_reward"] for r in rollouts]  # (the env's: win 1, draw 0.5)
            counts[arm] = {k: round(sum(r.rewards[k] for r in rollouts)) for k in ("win", "draw", "loss")}
            if arm == "model":  # what it chose at the position, sampled at this temperature
                firsts = [read_move(r.turns[0].completion.text, board)[0] for r in rollouts if r.turns]
                chosen = {c: firsts.count(c) for c in sorted(set(firsts), key=lambda c: -firsts.count(c))}
                print(f"T = {temperature}: the model's own moves at the position: {chosen}")
            print(
                f"  T {temperature}, arm {arm}: {len(rollouts)} games in {time.monotonic() - started:.0f} s",
                file=sys.stderr,
            )
        ref = str(own_cell) if own_cell is not None else "model"
        print(f"\nT = {temperature}, p = {p}, trap_prob = {args.trap_prob}, {args.games} games an arm (seeds shared):")
        print("| X plays | score | se | W / D / L | minus the greedy move's (paired) | se |")
        print("|---|---|---|---|---|---|")
        for arm, values in results.items():
            n = len(values)
            mean = sum(values) / n
            se = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1) / n)
            diff = [a - b for a, b in zip(values, results[ref])]
            dm = sum(diff) / n
            dse = math.sqrt(sum((d - dm) ** 2 for d in diff) / (n - 1) / n)
            c = counts[arm]
            label = "its own choice" if arm == "model" else f"X{arm}" + (" (greedy)" if arm == ref else "")
            print(
                f"| {label} | {mean:.3f} | {se:.3f} | {c['win']} / {c['draw']} / {c['loss']} | {dm:+.3f} | {dse:.3f} |"
            )
    await client.aclose()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model", help="a model folder (e.g. models/tictactoe-tiny)")
    parser.add_argument("--line", required=True, help="the moves to the position, e.g. O8.X4.O1 (X to play next)")
    parser.add_argument("--moves", default="", help="candidate cells, comma-separated (default: every free cell)")
    parser.add_argument(
        "--temperature", type=float, nargs="+", default=[1.0], help="the model's temperature afterwards"
    )
    parser.add_argument("--games", type=int, default=400, help="games per arm and temperature")
    parser.add_argument("--p", type=float, default=0.7, help="the opponent's random-move probability")
    parser.add_argument("--trap-prob", type=float, default=1.0, help="the env's trap_prob")
    parser.add_argument("--seed", type=int, default=0, help="the first opponent seed")
    parser.add_argument("--device", default=None, help="cpu, cuda, ... (default: CUDA when available)")
    parser.add_argument("--concurrency", type=int, default=128, help="games played at once")
    asyncio.run(main(parser.parse_args()))
