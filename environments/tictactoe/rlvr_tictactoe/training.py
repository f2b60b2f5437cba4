"""What the trainer reads from a tic-tac-toe game (`rlvr.train.protocols`): restart points
(`Restartable`), a score per turn (`TurnScored`), the teacher's replies to give (`Explorable`)
and the task a greedy probe plays (`Probed`). `TicTacToeEnv` offers each through a method of
that name."""

from __future__ import annotations

import dataclasses
import random

from rlvr import Rollout, Task
from rlvr_tictactoe import players
from rlvr_tictactoe.game import game_outcome, missed_win, teacher_replies
from rlvr_tictactoe.moves import replay


def probe_task(task: Task, seed: int, random_replies: int | None, share: float) -> Task:
    """A greedy probe (the trainer's `restart_greedy`) of a training task: with
    `random_replies` (the env's `probe_random_replies`) set, its opponent's first k = that many
    moves are random (the task's own k otherwise), in a share `share` (`probe_random_share`)
    of the probes, chosen by each probe's seed. Why: the lines a greedy policy still lost at
    the end of a run of greedy probes mostly need four given random replies, which only the k = 4
    tasks (one in five) can play; but a probe at k = 4 never meets a trap the opponent sets
    earlier, hence half the probes at 4 random replies (docs/RESULTS.md, `RECIPE=unbeatable`;
    `experiments/tictactoe/line_odds.py`)."""
    task = dataclasses.replace(task, seed=seed)
    if random_replies is None or "line" in task.info:
        return task
    if random.Random(f"probe:{seed}").random() >= share:  # (str seeds: stable)
        return task
    return dataclasses.replace(task, info={**task.info, "random_replies": random_replies})


def restart_tasks(task: Task, rollout: Rollout) -> list[Task]:
    """The game of `rollout` again from before each of the model's moves after its first,
    where the game was still open: the conversation up to there as the prompt, the board
    in the task (its seed, hence the opponent's replies on a board, unchanged). A record
    that does not match the turns (`replay`) or a line of exact evaluation gives none."""
    replayed = replay(task, rollout) if "line" not in task.info else None
    prompt, out = list(task.prompt), []
    for turn, (_, cell, board, played) in zip(rollout.turns, replayed or []):
        prompt += [turn.completion.message(), *turn.env_messages]
        if cell is None:
            continue
        if game_outcome(board) is not None:
            break
        info = {**task.info, "board": "".join(board)}
        out.append(Task(id=f"{task.id}@{played}", prompt=tuple(prompt), info=info, seed=task.seed))
    return out


def turn_rewards(task: Task, rollout: Rollout) -> list[float] | None:
    """-1 for each model turn whose accepted move left a win on the board for another cell
    (the metric `missed_wins`, `game.missed_win`), 0 for every other turn; the trainer's
    `turn_credit` adds them, normalised within the group, to those turns' advantages alone.
    Why: a missed win rarely costs the game at once (a later move may still win, or the
    draw scores 0.7 beside a win's 1.2), and the episode's advantage is shared by all its
    turns, so the decision that gave up the win is barely told apart from the rest. Taking
    a win at once is always a best move, so the score never points away from the best
    play. None when the record does not match the turns (`replay`)."""
    replayed = replay(task, rollout)
    if replayed is None:
        return None
    scores = [-1.0 if cell is not None and missed_win(before, cell) else 0.0 for before, cell, _, _ in replayed]
    return scores + [0.0] * (len(rollout.turns) - len(scores))


def other_replies(task: Task) -> list[str]:
    """The replies the trainer's `restart_explore` may give at a restart: every move the
    teacher might make on the task's board (`game.teacher_replies`: a win, else a block,
    else any free cell), in its words and the rewarded format. The teacher's moves, not
    the best ones: which is better is left to the games. None on a finished board."""
    board = tuple(task.info.get("board") or ())
    if len(board) != 9 or game_outcome(board) is not None:
        return []
    return [players.reply(cell, why) for cell, why in teacher_replies(board, "X")]
