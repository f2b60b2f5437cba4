"""Tic-tac-toe tasks: the dataset's pure functions (a task's seed, opponent strength, who starts,
and an optional random opening) and the texts of a game's first turn.

A task is a pure function of (split, seed, index) and the arguments; see `rlvr_tictactoe.env`.
"""

from __future__ import annotations

import dataclasses
import hashlib
import random
from typing import Any

from rlvr import Task
from rlvr.sampler import bucket_index, bucket_range
from rlvr_tictactoe import players
from rlvr_tictactoe.game import (
    EMPTY_BOARD,
    Board,
    apply_move,
    game_outcome,
    game_value,
    legal_moves,
    move_rng,
    opponent_move,
    render,
    reply_prob,
    teacher_move,
)


def board_view(status: str, board: Board, *, over: bool = False) -> str:
    """A user turn: the status line, the board and (while the game runs) the free cells."""
    text = f"{status}\n\n{render(board)}"
    if not over:
        text += "\nAvailable positions: " + ", ".join(map(str, legal_moves(board)))
    return text


# ---- tasks --------------------------------------------------------------------------------


def task_seed(split: str, seed: int, index: int) -> int:
    """A 48-bit seed for task `index` of `split`; train seeds are even, eval seeds odd."""
    digest = hashlib.blake2b(f"rlvr-tictactoe/{split}/{seed}/{index}".encode(), digest_size=6).digest()
    return (int.from_bytes(digest, "big") & ~1) | (split == "eval")


def make_task(
    split: str,
    index: int,
    seed: int,
    low: float,
    high: float,
    num_buckets: int,
    model_starts: str,
    trap_prob: float = 0.0,
    opening_plies: int = 0,
    opening_history: bool = False,
    random_replies: int = 0,
) -> Task:
    """Task `index` of a split (see the module docstring). With `opening_plies` > 0 the game
    may start from a position after up to that many random moves (`random_opening`), shown as
    one turn, or with `opening_history` as the whole conversation that led there. With
    `random_replies` > 0 the opponent's first k moves are uniformly random, k drawn from
    0..random_replies (`info["random_replies"]`, read by the env's `opponent_cell`)."""
    tseed = task_seed(split, seed, index)
    rng = random.Random(tseed)
    a, b = bucket_range(index % num_buckets, low, high, num_buckets)
    p = min(max(a + rng.random() * (b - a), low), high)
    starts = {"always": True, "never": False}.get(model_starts, rng.random() < 0.5)
    bucket = bucket_index(p, low, high, num_buckets)
    # k for `reply_prob`, from its own RNG: the tasks of random_replies = 0 stay as they were
    k = random.Random(tseed ^ 0xFAC7).randint(0, random_replies) if random_replies > 0 else 0

    def with_k(task: Task) -> Task:
        return dataclasses.replace(task, info={**task.info, "random_replies": k}) if random_replies > 0 else task

    if opening_plies > 0:  # its own RNG: the tasks of opening_plies = 0 stay as they were
        opening = random_opening(random.Random(tseed ^ 0x5EED), starts, opening_plies, teacher_x=opening_history)
        if len(opening) > 1:
            build = history_task if opening_history else position_task
            return with_k(build(f"{split}-{index}", tseed, p, opening, starts, bucket))
    first_p = reply_prob(EMPTY_BOARD, p, k)
    first = None if starts else opponent_move(EMPTY_BOARD, "O", first_p, move_rng(tseed, EMPTY_BOARD), trap_prob)
    return with_k(opening_task(f"{split}-{index}", tseed, p, first, bucket=bucket))


def random_opening(rng: random.Random, model_starts: bool, max_plies: int, *, teacher_x: bool = False) -> list[Move]:
    """Random moves from the empty board, X first when the model starts, else O: a count drawn
    from 0..max_plies (rounded down to leave X to move), redrawn until the game is not over and
    X is not lost against perfect play (a lost start teaches nothing). O's moves are uniform;
    X's too, or with `teacher_x` the teacher's (`teacher_move`, its reason kept), so that the
    conversation leading there reads like the model's own games."""
    while True:
        plies = rng.randint(0, max_plies)
        plies -= (plies % 2) != (0 if model_starts else 1)
        if plies <= 0:
            return []
        board, mark, moves = EMPTY_BOARD, "X" if model_starts else "O", list[Move]()
        for _ in range(plies):
            if game_outcome(board) is not None:  # over before the opening ends: redrawn below
                break
            move = teacher_move(board, mark, rng) if teacher_x and mark == "X" else (rng.choice(legal_moves(board)), "")
            board, mark, moves = apply_move(board, move[0], mark), "O" if mark == "X" else "X", [*moves, move]
        if game_outcome(board) is None and game_value(board, "X") >= 0:
            return moves


Move = tuple[int, str]
"""A move of an opening: the cell, and for X the reason its reply gives ("" when none)."""


def position_task(task_id: str, seed: int, p: float, moves: list[Move], model_starts: bool, bucket: int) -> Task:
    """A game that starts after `moves` (X's then O's last), shown as one ordinary turn."""
    board, mark = EMPTY_BOARD, "X" if model_starts else "O"
    for cell, _ in moves:
        board, mark = apply_move(board, cell, mark), "O" if mark == "X" else "X"
    status = f"You took {moves[-2][0]}; O took {moves[-1][0]}. Your move."
    prompt = ({"role": "user", "content": board_view(status, board)},)
    return _started_task(task_id, seed, p, moves, model_starts, bucket, prompt, board)


def history_task(task_id: str, seed: int, p: float, moves: list[Move], model_starts: bool, bucket: int) -> Task:
    """A game that starts after `moves`, shown as the conversation the env would have had with
    a player who made X's moves with their reasons: the messages a real game shows at that point."""
    first = None if model_starts else moves[0][0]
    board, status = _opening_view(first)
    prompt: list[dict[str, str]] = [_user(board_view(status, board))]
    rest = moves if model_starts else moves[1:]
    for (x, reason), (o, _) in zip(rest[::2], rest[1::2], strict=True):
        board = apply_move(apply_move(board, x, "X"), o, "O")
        prompt += [{"role": "assistant", "content": players.reply(x, reason)}]
        prompt += [_user(board_view(f"You took {x}; O took {o}. Your move.", board))]
    return _started_task(task_id, seed, p, moves, model_starts, bucket, tuple(prompt), board)


def _started_task(
    task_id: str,
    seed: int,
    p: float,
    moves: list[Move],
    model_starts: bool,
    bucket: int,
    prompt: tuple[dict[str, Any], ...],
    board: Board,
) -> Task:
    info = {"random_move_prob": p, "bucket": bucket, "model_starts": model_starts, "board": "".join(board)}
    info["opening"] = [cell for cell, _ in moves]
    return Task(id=task_id, prompt=prompt, info=info, seed=seed)


def _opening_view(first: int | None) -> tuple[Board, str]:
    """The board and status line of a game's first turn (O took `first`, or the model starts)."""
    if first is None:
        return EMPTY_BOARD, "New game. You are X and you move first."
    return apply_move(EMPTY_BOARD, first, "O"), f"New game. You are X; O moved first and took {first}. Your move."


def opening_task(task_id: str, seed: int, p: float, first: int | None, bucket: int = 0) -> Task:
    """A game's task: the model moves first (`first` None), or O has already taken `first`."""
    board, status = _opening_view(first)
    info = {"random_move_prob": p, "bucket": bucket, "model_starts": first is None, "board": "".join(board)}
    prompt = ({"role": "user", "content": board_view(status, board)},)
    return Task(id=task_id, prompt=prompt, info=info, seed=seed)


def _user(content: str) -> dict[str, str]:
    return {"role": "user", "content": content}
