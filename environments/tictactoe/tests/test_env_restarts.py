"""The trainer's hooks that replay a tic-tac-toe game's turns: restarts (restart_frac), the
other replies a restart may be given (restart_explore), and the turn scores (turn_credit)."""

from __future__ import annotations

import asyncio

from exact_players import win_cells
from rlvr_tictactoe import load_environment
from rlvr_tictactoe.env import read_move
from rlvr_tictactoe.game import parse_board, teacher_replies
from rlvr_tictactoe.rewards import is_formatted

from rlvr import Policy, Task
from rlvr.engine import run_rollouts


def play(env, policy, tasks):
    return asyncio.run(run_rollouts(env, policy, tasks, concurrency=64))


def scripted(fn) -> Policy:
    """A policy from a function of the board on the last message."""
    return Policy(lambda messages, rng: fn(parse_board(messages[-1]["content"]), rng), name="scripted")


def first_free(board, rng) -> str:
    return f"<think>first free</think><move>{board.index(' ')}</move>"


# ---- restarts (the trainer's restart_frac) ---------------------------------------------------


def test_a_restart_replays_the_game_from_before_each_later_move():
    """Playing a restart with the same deterministic player ends in the same game: the prompt
    holds the real conversation up to there and the board and seed give the same replies."""
    env = load_environment(num_tasks=64, seed=2, min_random_move_prob=0.5, max_random_move_prob=1.0)
    tasks = env.tasks("train")[:24]
    games = play(env, scripted(first_free), tasks)
    by_id, checked = {t.id: t for t in tasks}, 0
    for game in games:
        task, moves = by_id[game.task_id], game.info["moves"]
        restarts = env.restart_tasks(task, game)
        assert len(restarts) == (len(moves) + 1) // 2 - 1  # one before each of X's moves but the first
        for again, restart in zip(play(env, scripted(first_free), restarts), restarts, strict=True):
            played = int(restart.id.rsplit("@", 1)[1])
            assert list(restart.prompt) == game.messages[1 : len(restart.prompt) + 1]  # the system prompt aside
            assert again.info["moves"] == moves[played:] and again.reward == game.reward
            checked += 1
    assert checked >= 40


def test_other_replies_at_a_restart_are_the_teachers_moves_in_the_rewarded_format():
    """What `restart_explore` gives: each reply is rewarded as formatted, read as a free cell of
    the restart's board, and the game played on from it is an ordinary game."""
    env = load_environment(num_tasks=16, seed=3, min_random_move_prob=0.5, max_random_move_prob=1.0)
    tasks = env.tasks("train")[:8]
    checked = 0
    for game, task in zip(play(env, scripted(first_free), tasks), tasks, strict=True):
        for restart in env.restart_tasks(task, game):
            board = tuple(restart.info["board"])
            replies = env.other_replies(restart)
            cells = [read_move(r, board) for r in replies]
            assert replies and all(is_formatted(r) for r in replies) and all(why is None for _, why in cells)
            assert sorted(c for c, _ in cells) == sorted(cell for cell, _ in teacher_replies(board, "X"))
            checked += 1
    assert checked >= 8
    assert env.other_replies(Task(id="won", info={"board": "XO XO X  "})) == []  # X has the left column
    for odd in ("XO", "ZZZZZZZZZ", "\ud800" * 9):  # too short, unknown marks, lone surrogates: none
        assert env.other_replies(Task(id="odd", info={"board": odd})) == []
    assert env.other_replies(Task(id="none", info={})) == []


def test_restart_points_skip_rejected_turns_and_refuse_a_record_that_does_not_match():
    env = load_environment(num_tasks=8, seed=0, opponent="optimal", model_starts="always")
    task, calls = env.tasks("train")[0], []

    def rejected_once(board, rng) -> str:
        calls.append(1)
        return "<move>9</move>" if len(calls) == 1 else first_free(board, rng)

    game = play(env, scripted(rejected_once), [task])[0]
    assert len(game.turns) == (len(game.info["moves"]) + 1) // 2 + 1 and game.error is None  # one turn rejected
    restarts = env.restart_tasks(task, game)
    assert len(restarts) == (len(game.info["moves"]) + 1) // 2 - 1 >= 2
    first = restarts[0]
    assert first.info["board"].count("X") == 1 and first.info["board"].count("O") == 1
    # the task's turn, the rejected reply and its error, the move and the opponent's reply
    assert len(first.prompt) == 5 and "Invalid move" in first.prompt[2]["content"]
    forged = type(game)(**{**game.__dict__, "info": {**game.info, "moves": [8, *game.info["moves"][1:]]}})
    assert env.restart_tasks(task, forged) == []
    moves = game.info["moves"]
    for bad in (moves[0], 9, "4", None):  # O's recorded reply on a taken cell, off the board, not a cell
        forged = type(game)(**{**game.__dict__, "info": {**game.info, "moves": [moves[0], bad, *moves[2:]]}})
        assert env.restart_tasks(task, forged) == []
    assert env.restart_tasks(env.tree_roots(0)[0], game) == []  # a line of exact evaluation


# ---- turn scores (the trainer's turn_credit) -------------------------------------------------


def test_turn_scores_mark_exactly_the_turns_that_leave_a_win_on_the_board():
    """A first-free-cell player, every third reply rejected (hostile text): a turn scores -1 exactly when the
    board it was shown (read back from the conversation) had a cell completing an X line (`win_cells`,
    counted from the lines) and the turn took another cell; rejected turns and the rest score 0,
    one score a turn, and the scores add up to the game's `missed_wins` metric."""

    calls: list[int] = []
    hostile = ["<move>9</move>", "\ud800<move>\ud800</move>", "<think>" + "<move>4" * 20_000, "<move>nan</move>"]

    def sloppy(board, rng) -> str:  # every third reply rejected: off the board, a lone surrogate, unclosed, NaN
        calls.append(1)
        return hostile[len(calls) // 3 % len(hostile)] if len(calls) % 3 == 0 else first_free(board, rng)

    env = load_environment(opponent="random", eval_tasks=60)
    tasks = env.tasks("eval")
    missed = rejected = 0
    for game, task in zip(play(env, scripted(sloppy), tasks), tasks, strict=True):
        scores = env.turn_rewards(task, game)
        assert scores is not None and len(scores) == len(game.turns)
        shown = [m["content"] for m, reply in zip(game.messages, game.messages[1:]) if reply["role"] == "assistant"]
        for score, before, turn in zip(scores, shown, game.turns, strict=True):
            board = parse_board(before)
            cell, _ = read_move(str(turn.completion.message()["content"]), board)
            wins = win_cells(board)
            assert score == (-1.0 if cell is not None and wins and cell not in wins else 0.0)
            rejected += cell is None
        assert -sum(scores) == game.rewards["missed_wins"]
        missed += game.rewards["missed_wins"]
    assert missed > 0 and rejected > 0

    def greedy(board, rng) -> str:
        cell = min(win_cells(board), default=board.index(" "))
        return f"<think>a win if there is one</think><move>{cell}</move>"

    games = play(env, scripted(greedy), tasks)
    assert all(env.turn_rewards(t, g) == [0.0] * len(g.turns) for g, t in zip(games, tasks, strict=True))
    game, task = games[0], tasks[0]
    forged = type(game)(**{**game.__dict__, "info": {**game.info, "moves": [9, *game.info["moves"][1:]]}})
    assert env.turn_rewards(task, forged) is None  # a record that does not match its turns: no scores
