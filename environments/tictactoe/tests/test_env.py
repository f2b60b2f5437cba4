"""The tic-tac-toe environment through rlvr's core: dataset, seeding, rules, rubric, eval."""

from __future__ import annotations

import asyncio
import math
import re
from collections import Counter

import pytest
from exact_players import win_cells
from rlvr_tictactoe import GameState, load_environment
from rlvr_tictactoe.env import make_task, read_move
from rlvr_tictactoe.game import (
    EMPTY_BOARD,
    LINES,
    apply_move,
    best_moves,
    game_value,
    legal_moves,
    parse_board,
    winner,
)
from rlvr_tictactoe.rewards import PARSER, format_reward, is_formatted
from rlvr_tictactoe.tasks import opening_task

from rlvr import Policy, Task, check_env
from rlvr.engine import run_rollouts
from rlvr.registry import load_environment as load_by_name
from rlvr.sampler import StratifiedSampler


def user(text: str) -> dict[str, str]:
    return {"role": "user", "content": text}


def said(text: str) -> list[dict[str, str]]:
    return [{"role": "assistant", "content": text}]


def play(env, policy, tasks, rollouts: int = 1):
    return asyncio.run(run_rollouts(env, policy, tasks, rollouts_per_task=rollouts, concurrency=64))


def scripted(fn) -> Policy:
    """A policy from a function of the board on the last message."""
    return Policy(lambda messages, rng: fn(parse_board(messages[-1]["content"]), rng), name="scripted")


def first_free(board, rng) -> str:
    return f"<think>first free</think><move>{board.index(' ')}</move>"


# ---- dataset ---------------------------------------------------------------------------------


def test_same_arguments_give_the_same_dataset_and_other_seeds_another():
    def dump(env):
        return [t.to_dict() for t in env.tasks("train") + env.tasks("eval")]

    a, b = load_environment(num_tasks=200, seed=5), load_environment(num_tasks=200, seed=5)
    assert dump(a) == dump(b)
    c = load_environment(num_tasks=200, seed=6)
    assert [t.seed for t in a.tasks("train")] != [t.seed for t in c.tasks("train")]
    assert [t.info for t in a.tasks("train")] != [t.info for t in c.tasks("train")]
    d = load_environment(num_tasks=200, seed=5, eval_seed=9)
    assert dump(d)[:200] == dump(a)[:200] and dump(d)[200:] != dump(a)[200:]


def test_train_and_eval_seed_streams_are_disjoint():
    env = load_environment(num_tasks=1000, eval_tasks=1000, seed=3, eval_seed=3)
    train = {t.seed for t in env.tasks("train")}
    evals = {t.seed for t in env.tasks("eval")}
    assert len(train) == 1000 and len(evals) == 1000 and not train & evals
    assert {s % 2 for s in train} == {0} and {s % 2 for s in evals} == {1}


def test_tasks_carry_their_bucket_p_and_a_balanced_start():
    env = load_environment(num_tasks=800, min_random_move_prob=0.2, max_random_move_prob=0.6, num_buckets=4)
    tasks = env.tasks("train")
    assert Counter(t.info["bucket"] for t in tasks) == {0: 200, 1: 200, 2: 200, 3: 200}
    for t in tasks:
        lo = 0.2 + 0.1 * t.info["bucket"]
        assert lo - 1e-12 <= t.info["random_move_prob"] <= lo + 0.1 + 1e-12
    starts = sum(t.info["model_starts"] for t in tasks)
    assert 340 <= starts <= 460  # a fair coin: 400 +- 4 sigma
    for t in tasks:
        board = parse_board(t.prompt[0]["content"])
        assert "".join(board) == t.info["board"]
        assert board.count("O") == (0 if t.info["model_starts"] else 1) and "X" not in board


def test_opponent_and_start_arguments():
    assert {t.info["random_move_prob"] for t in load_environment(opponent="optimal").tasks()} == {0.0}
    rand = load_environment(opponent="random", num_buckets=8)
    assert {t.info["random_move_prob"] for t in rand.tasks()} == {1.0} and rand.num_buckets == 1
    assert all(t.info["model_starts"] for t in load_environment(model_starts="always").tasks())
    assert not any(t.info["model_starts"] for t in load_environment(model_starts="never").tasks())
    for bad in (
        {"opponent": "perfect"},
        {"min_random_move_prob": 0.8, "max_random_move_prob": 0.2},
        {"min_random_move_prob": "0.1"},  # (a string from a hand-written -a: was a TypeError)
        {"min_random_move_prob": float("nan")},
        {"min_random_move_prob": True, "max_random_move_prob": 1.0},  # (was taken as p = 1)
        {"model_starts": "sometimes"},
        {"num_tasks": 0},
        {"num_buckets": 9, "num_tasks": 8},
    ):
        with pytest.raises(ValueError):
            load_environment(**bad)


def test_stratified_batches_from_the_env():
    env = load_environment(num_tasks=300, min_random_move_prob=0.0, max_random_move_prob=0.75, num_buckets=3)
    sampler = StratifiedSampler.for_env(env, seed=1)
    assert sampler.ranges == [(0.0, 0.25), (0.25, 0.5), (0.5, 0.75)]
    for _ in range(50):
        batch = next(sampler)
        assert [t.info["bucket"] for t in batch] == [0, 1, 2]
        for (lo, hi), t in zip(sampler.ranges, batch):
            assert lo <= t.info["random_move_prob"] <= hi


# ---- seeding of the opponent -----------------------------------------------------------------


def reply_to(env, task: Task, board, move: int) -> str:
    state = env.setup_state(task)
    state.board = tuple(board)
    return asyncio.run(env.env_response(said(f"<think>t</think><move>{move}</move>"), state))[0]["content"]


def test_same_board_and_seed_give_the_same_reply_through_the_env():
    env = load_environment(opponent="random", model_starts="always")
    board = apply_move(EMPTY_BOARD, 0, "X")
    board = apply_move(board, 4, "O")
    replies = {}
    for task in env.tasks("eval")[:40]:
        first = reply_to(env, task, board, 8)
        assert all(reply_to(env, task, board, 8) == first for _ in range(3))
        replies[task.seed] = first
    assert len(set(replies.values())) > 3  # other seeds, other (random) replies


def test_trap_opponent_opens_in_a_corner_and_sets_the_opposite_corner_trap():
    env = load_environment(opponent="optimal", model_starts="never", trap_prob=1.0)
    openings = Counter(task.info["board"].index("O") for task in env.tasks("eval"))
    assert set(openings) == {0, 2, 6, 8}  # a corner opening leaves X the most losing replies
    corners = [t for t in env.tasks("eval") if t.info["board"].index("O") == 0]
    replies = {int(re.search(r"O took (\d)", reply_to(env, t, t.info["board"], 4))[1]) for t in corners}
    assert replies == {5, 7, 8}  # the trap moves after a corner and the centre (game.trap_moves)
    for bad in (2, -0.5, float("nan"), True, "1"):
        with pytest.raises(ValueError, match="trap_prob"):
            load_environment(trap_prob=bad)
    uniform = load_environment(opponent="optimal", model_starts="never")
    assert len({task.info["board"] for task in uniform.tasks("eval")}) == 9


def test_opening_plies_start_training_games_from_random_positions_x_can_hold():
    plain, env = load_environment(), load_environment(opening_plies=4)
    assert env.tasks("eval") == plain.tasks("eval")  # evaluation starts from the empty board
    changed = [t for t in env.tasks("train") if "opening" in t.info]
    assert 250 < len(changed) < 750 and {len(t.info["opening"]) for t in changed} == {2, 3, 4}
    for task in changed:
        board = parse_board(task.prompt[0]["content"])
        assert "".join(board) == task.info["board"] and board.count("X") == board.count("O") - (
            not task.info["model_starts"]
        )
        assert winner(board) is None and game_value(board, "X") >= 0, task.info
        assert task.prompt[0]["content"].startswith(f"You took {task.info['opening'][-2]}; O took")
    rollouts = play(env, scripted(first_free), changed[:30])
    assert all(r.error is None and r.stop_reason == "game_over" for r in rollouts)
    assert sum(r.rewards["win"] + r.rewards["draw"] + r.rewards["loss"] for r in rollouts) == 30
    with pytest.raises(ValueError, match="opening_plies"):
        load_environment(opening_plies=9)


def test_random_replies_open_random_lines_that_a_perfect_opponent_then_punishes():
    plain = load_environment(opponent="optimal", trap_prob=1.0)
    env = load_environment(opponent="optimal", trap_prob=1.0, random_replies=4)
    assert env.tasks("eval") == plain.tasks("eval")  # evaluation plays the plain opponent
    ks = Counter(t.info["random_replies"] for t in env.tasks("train"))
    assert set(ks) == {0, 1, 2, 3, 4} and min(ks.values()) > 150, ks  # k uniform over 0..4 (1000 tasks)
    tasks = env.tasks("train")[:200]
    rollouts = play(env, scripted(lambda board, rng: f"<move>{rng.choice(legal_moves(board))}</move>"), tasks)
    early = late = off_best = 0
    for task, rollout in zip(tasks, rollouts, strict=True):
        assert rollout.error is None and rollout.stop_reason == "game_over"
        board, replies = EMPTY_BOARD, 0
        for m in rollout.messages:  # replay: each O reply from the board it was made on
            if m["role"] == "assistant":
                board = apply_move(board, read_move(m["content"], board)[0], "X")
            elif o := re.search(r"O (?:took|moved first and took) (\d)", m["content"]):
                before, cell, replies = board, int(o.group(1)), replies + 1
                if before.count("O") < task.info["random_replies"]:
                    early += 1
                    off_best += cell not in best_moves(before, "O")
                else:
                    late += 1
                    assert cell in best_moves(before, "O"), (task.info, rollout.messages)
                board = apply_move(before, cell, "O")
        assert replies >= 1
    assert early > 100 and late > 100 and off_best > 20, (early, late, off_best)
    for bad in (-1, 6, True, 2.0):
        with pytest.raises(ValueError, match="random_replies"):
            load_environment(random_replies=bad)


def test_probe_random_replies_sets_the_k_of_greedy_probes_only():
    """`probe_random_replies`: the trainer's greedy probes (`Probed.probe_task`) meet k
    random replies whatever their task drew; training tasks, evaluation lines and the default
    (None: the task's own k) are unchanged."""
    plain = load_environment(opponent="optimal", trap_prob=1.0, random_replies=4)
    env = load_environment(opponent="optimal", trap_prob=1.0, random_replies=4, probe_random_replies=4)
    assert env.tasks("train") == plain.tasks("train") and env.tasks("eval") == plain.tasks("eval")
    tasks = [t for t in env.tasks("train") if t.info["random_replies"] < 4][:40]
    probes = [env.probe_task(t, seed=1000 + i) for i, t in enumerate(tasks)]
    assert {p.info["random_replies"] for p in probes} == {4}
    assert [p.seed for p in probes] == list(range(1000, 1040)) and [p.id for p in probes] == [t.id for t in tasks]
    assert [plain.probe_task(t, 7).info for t in tasks] == [t.info for t in tasks]
    # played: every O reply made with fewer than 4 O marks on the board is random (some are not
    # best moves), every later one is a best move
    rollouts = play(env, scripted(lambda board, rng: f"<move>{rng.choice(legal_moves(board))}</move>"), probes)
    off_best = 0
    for rollout in rollouts:
        assert rollout.error is None
        board = EMPTY_BOARD
        for m in rollout.messages:
            if m["role"] == "assistant":
                board = apply_move(board, read_move(m["content"], board)[0], "X")
            elif o := re.search(r"O (?:took|moved first and took) (\d)", m["content"]):
                cell = int(o.group(1))
                if board.count("O") >= 4:
                    assert cell in best_moves(board, "O")
                elif board.count("O") >= 1:  # (the opening reply is the task's, drawn with its own k)
                    off_best += cell not in best_moves(board, "O")
                board = apply_move(board, cell, "O")
    assert off_best > 10, off_best
    # an env without random replies in training: its tasks carry no k, its probes get one
    bare = load_environment(opponent="optimal", probe_random_replies=3)
    assert "random_replies" not in bare.tasks("train")[0].info
    assert bare.probe_task(bare.tasks("train")[0], 5).info["random_replies"] == 3
    line = env.tree_roots(seed=0)[0]  # an exact evaluation's line is never a probe's
    assert env.probe_task(line, 1).info == line.info
    for bad in (-1, 6, True, 2.0, "4"):
        with pytest.raises(ValueError, match="probe_random_replies"):
            load_environment(probe_random_replies=bad)


def test_probe_random_share_gives_the_fixed_k_to_that_share_of_probes_by_seed():
    """`probe_random_share`: each probe's seed decides whether it gets `probe_random_replies`,
    the same way every time; the others keep their task's own k (so they still meet the traps
    a k = 4 probe never does)."""
    env = load_environment(
        opponent="optimal", trap_prob=1.0, random_replies=4, probe_random_replies=4, probe_random_share=0.5
    )
    tasks = [t for t in env.tasks("train") if t.info["random_replies"] < 4][:400]
    probes = [env.probe_task(t, seed=5000 + i) for i, t in enumerate(tasks)]
    fixed = [p.info["random_replies"] == 4 for p in probes]
    assert 160 <= sum(fixed) <= 240, sum(fixed)  # binomial(400, 0.5): sd 10
    assert [p.info for p, f in zip(probes, fixed) if not f] == [t.info for t, f in zip(tasks, fixed) if not f]
    again = [env.probe_task(t, seed=5000 + i).info["random_replies"] == 4 for i, t in enumerate(tasks)]
    assert again == fixed
    for share, expected in ((0.0, 0), (1.0, len(tasks))):
        edge = load_environment(opponent="optimal", random_replies=4, probe_random_replies=4, probe_random_share=share)
        assert (
            sum(edge.probe_task(t, seed=5000 + i).info["random_replies"] == 4 for i, t in enumerate(tasks)) == expected
        )
    for bad in (-0.1, 1.5, float("nan"), "0.5", None, True):
        with pytest.raises(ValueError, match="probe_random_share"):
            load_environment(probe_random_replies=4, probe_random_share=bad)
    with pytest.raises(ValueError, match="probe_random_replies, which is not set"):
        load_environment(probe_random_share=0.5)


def test_opening_history_shows_the_conversation_a_real_game_has_at_that_position():
    env = load_environment(opening_plies=7, opening_history=True)
    started = [t for t in env.tasks("train") if "opening" in t.info]
    assert 400 < len(started) < 900 and {len(t.info["opening"]) for t in started} == {2, 3, 4, 5, 6, 7}
    for task in started[:60]:  # replay the opening through the env: the same messages, in order
        opening, starts = task.info["opening"], task.info["model_starts"]
        xs, os_ = (opening[0::2], opening[1::2]) if starts else (opening[1::2], opening[2::2])
        replies = [m["content"] for m in task.prompt if m["role"] == "assistant"]
        assert [read_move(r, EMPTY_BOARD)[0] for r in replies] == xs
        assert all(is_formatted(r) for r in replies)  # the teacher's own replies, reasons included
        root = opening_task("root", task.seed, 0.0, None if starts else opening[0])
        line = Task(id="line", prompt=root.prompt, info={**root.info, "line": os_, "line_weights": {}}, seed=task.seed)
        script = Policy(
            lambda messages, rng: ([*replies, "<move>9</move>"])[sum(m["role"] == "assistant" for m in messages)]
        )
        [rollout] = play(env, script, [line])
        assert rollout.messages[1 : 1 + len(task.prompt)] == list(task.prompt), task.info
        assert "".join(parse_board(task.prompt[-1]["content"])) == task.info["board"]
        assert game_value(task.info["board"], "X") >= 0 and winner(task.info["board"]) is None
    with pytest.raises(ValueError, match="opening_history"):
        load_environment(opening_history="yes")


def test_rollouts_of_a_group_share_opponent_replies():
    env = load_environment(opponent="mix", model_starts="always")
    tasks = env.tasks("eval")[:20]
    rollouts = play(env, scripted(first_free), tasks, rollouts=3)
    for task in tasks:
        group = [r.messages for r in rollouts if r.task_id == task.id]
        assert group[0] == group[1] == group[2]  # same moves -> same boards -> same replies


# ---- rules -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, error",
    [
        ("4", "no <move>"),
        ("<think>I play <move>4</move></think>", "no <move>"),
        ("<move>four</move>", "not a cell number"),
        ("<move>-1</move>", "not a cell number"),
        ("<move>9</move>", "off the board"),
        ("<move>0</move>", "already taken by O"),
    ],
)
def test_invalid_moves_are_rejected_and_the_game_continues(text, error):
    env = load_environment(opponent="optimal")
    task = env.tasks()[0]
    state = env.setup_state(task)
    state.board = apply_move(EMPTY_BOARD, 0, "O")
    [msg] = asyncio.run(env.env_response(said(text), state))
    first, _, rest = msg["content"].partition("\n")
    assert first.startswith("Invalid move: ") and error in first and "Try again" in first
    assert parse_board(rest) == state.board and "Available positions: 1, 2, 3" in rest
    assert state.invalid_moves == 1 and state.outcome is None and state.board.count(" ") == 8


def test_read_move_takes_the_last_top_level_move():
    assert read_move("<move>1</move><move>2</move>", EMPTY_BOARD) == (2, None)
    assert read_move("<think>open <move>5</move>", EMPTY_BOARD) == (5, None)  # unclosed think


@pytest.mark.parametrize(
    "text, ok",
    [
        ("<think>centre</think><move>4</move>", True),
        ("  <think>centre</think>\n\n<move> 4 </move>\n", True),
        ("<move>4</move>", False),  # missing think: played, but no format credit
        ("<think></think><move>4</move>", False),  # empty think
        ("<think>a</think><move>4</move><move>5</move>", False),  # two move tags
        ("<think>I play <move>4</move></think><move>4</move>", False),  # tag inside think
        ("<think>a</think><move>4</move> good luck", False),  # trailing garbage
        ("Sure! <think>a</think><move>4</move>", False),  # leading garbage
        ("<think>a<move>4</move>", False),  # unclosed think
        ("<think>a</think><move>4", False),  # unclosed move
        ("<move>4</move><think>a</think>", False),  # wrong order
        ("<think>a</think><move>cell 4</move>", False),  # not a bare cell number
        ("<think>a</think><move>12</move>", False),
    ],
)
def test_format_edge_cases(text, ok):
    assert is_formatted(text) is ok
    assert PARSER.is_formatted(text) is (ok or text.endswith(("cell 4</move>", "12</move>")))
    assert format_reward(said(text) + [user("board")] + said("<think>b</think><move>0</move>")) == (1.0 if ok else 0.5)


def test_a_game_against_the_scripted_player_ends_with_the_right_outcome():
    env = load_environment(opponent="optimal", model_starts="always")
    [r] = play(env, scripted(first_free), env.tasks()[:1])
    assert r.stop_reason == "game_over" and not r.truncated
    assert r.rewards["loss"] == 1.0 and r.rewards["win_reward"] == 0.0  # first-free loses to minimax
    last = r.completion[-1]["content"]
    assert "you lose. Game over." in last and "Available" not in last
    assert r.reward == pytest.approx(0.2)  # 0 + 0.2 * format 1.0 + 0


# ---- max_turns -------------------------------------------------------------------------------


def test_max_turns_truncation_scores_as_timeout():
    env = load_environment(max_turns=3, opponent="optimal")
    garbage = Policy(lambda messages, rng: "I would rather not say.", name="garbage")
    rollouts = play(env, garbage, env.tasks()[:4])
    for r in rollouts:
        assert r.stop_reason == "max_turns_reached" and r.truncated
        assert r.rewards["timeout"] == 1.0 and r.rewards["invalid_moves"] == 3.0
        assert r.rewards["win_reward"] == r.rewards["format_reward"] == 0.0
        assert r.reward == pytest.approx(-0.1)


def greedy(board, rng) -> str:
    """Complete a line of X when possible, else the first free cell of 0, 4, 8, 2, 6, ..."""
    for cell in (i for i, c in enumerate(board) if c == " "):
        after = apply_move(board, cell, "X")
        if any(
            after[a] == after[b] == after[c] == "X"
            for a, b, c in ((0, 1, 2), (3, 4, 5), (6, 7, 8), (0, 3, 6), (1, 4, 7), (2, 5, 8), (0, 4, 8), (2, 4, 6))
        ):
            return f"<think>win</think><move>{cell}</move>"
    cell = next(c for c in (0, 4, 8, 2, 6, 1, 3, 5, 7) if board[c] == " ")
    return f"<think>plan</think><move>{cell}</move>"


def test_winning_on_the_final_allowed_turn_counts_as_a_win():
    env = load_environment(max_turns=3, opponent="random", model_starts="always", eval_tasks=60)
    rollouts = play(env, scripted(greedy), env.tasks())
    final_wins = [r for r in rollouts if r.metrics["turns"] == 3 and r.rewards["win"] == 1.0]
    assert len(final_wins) >= 5
    for r in final_wins:
        assert r.stop_reason == "game_over" and not r.truncated and r.rewards["win_reward"] == 1.0
    unfinished = [r for r in rollouts if r.rewards["timeout"] == 1.0]
    assert unfinished and all(r.stop_reason == "max_turns_reached" for r in unfinished)


# ---- whole-environment checks ----------------------------------------------------------------


def test_check_env_passes_and_the_registry_finds_the_env():
    env = load_by_name("tictactoe", num_tasks=16, opponent="mix")
    assert env.name == "tictactoe"
    check_env(env)
    state = env.setup_state(env.tasks()[0])
    assert isinstance(state, GameState)


def test_reference_players_offline():
    def wdl(name: str, opponent: str) -> Counter:
        env = load_environment(opponent=opponent, eval_tasks=150)
        rollouts = play(env, env.policies()[name](), env.tasks())
        assert all(r.rewards["format_reward"] == 1.0 and r.rewards["invalid_moves"] == 0 for r in rollouts)
        return Counter(k for r in rollouts for k in ("win", "draw", "loss") if r.rewards[k])

    assert wdl("optimal", "optimal") == {"draw": 150}
    assert wdl("optimal", "random")["loss"] == 0
    assert wdl("teacher", "random")["win"] > 120
    assert wdl("random", "optimal")["loss"] > 100


def test_cli_eval_optimal_vs_optimal_shows_no_losses(tmp_path, capsys):
    from rlvr.cli import main

    out = tmp_path / "run"
    code = main(
        [
            "eval",
            "tictactoe",
            "-m",
            "policy:optimal",
            "-a",
            '{"opponent": "optimal"}',
            "-n",
            "50",
            "-r",
            "1",
            "-o",
            str(out),
            "-q",
        ]
    )
    text = capsys.readouterr().out
    assert code == 0
    assert re.search(r"loss %\s*│\s*0\.0\s", text) and re.search(r"draw %\s*│\s*100\.0\s", text)
    assert len((out / "results.jsonl").read_text().splitlines()) == 50


def test_summary_columns():
    env = load_environment(opponent="random", eval_tasks=40)
    rollouts = play(env, env.policies()["random"](), env.tasks())
    s = env.summarize(rollouts)
    assert list(s) == ["win %", "draw %", "loss %", "timeout %", "format %", "invalid %", "mean reward"]
    assert s["win %"] + s["draw %"] + s["loss %"] + s["timeout %"] == pytest.approx(100.0)
    assert s["mean reward"] == pytest.approx(sum(r.reward for r in rollouts) / 40)


def test_make_task_is_a_pure_function():
    a = make_task("train", 7, 1, 0.0, 1.0, 4, "random")
    assert a == make_task("train", 7, 1, 0.0, 1.0, 4, "random")
    assert a.id == "train-7" and a.info["bucket"] == 3 and 0.75 <= a.info["random_move_prob"] <= 1.0


def test_sampler_with_more_buckets_than_the_dataset_strata():
    env = load_environment(num_tasks=1000, min_random_move_prob=0.2, max_random_move_prob=0.7)
    sampler = StratifiedSampler.for_env(env, seed=2, num_buckets=32, tasks_per_bucket=2)
    batch = next(sampler)
    assert len(batch) == 64
    for i, t in enumerate(batch):
        lo, hi = sampler.ranges[i // 2]
        assert lo <= t.info["random_move_prob"] <= hi
    assert StratifiedSampler.for_env(load_environment(opponent="optimal"), num_buckets=8).num_buckets == 1


def test_optimal_vs_random_matches_the_exact_win_rate():
    """Through the env (50/50 starts, p = 1 opponent), the optimal player's win rate agrees
    with the exact value from enumerating every game (87.26%), within 4 standard errors."""
    from functools import cache

    from rlvr_tictactoe.game import best_moves, legal_moves, other, winner

    @cache
    def p_win(board, mover) -> float:
        if winner(board) or " " not in board:
            return float(winner(board) == "X")
        moves = best_moves(board, "X") if mover == "X" else legal_moves(board)
        return sum(p_win(apply_move(board, m, mover), other(mover)) for m in moves) / len(moves)

    exact = (p_win(EMPTY_BOARD, "X") + p_win(EMPTY_BOARD, "O")) / 2
    assert exact == pytest.approx(0.8726, abs=1e-4)
    env = load_environment(opponent="random", eval_tasks=1000)
    rollouts = play(env, env.policies()["optimal"](), env.tasks())
    wins = sum(r.rewards["win"] for r in rollouts) / len(rollouts)
    assert abs(wins - exact) < 4 * (exact * (1 - exact) / len(rollouts)) ** 0.5


def test_loss_reward_option_changes_only_a_lost_games_win_reward():
    env = load_environment(opponent="optimal", eval_tasks=40, loss_reward=-1.0)
    rollouts = play(env, scripted(first_free), env.tasks("eval"))
    lost = [r for r in rollouts if r.rewards["loss"] == 1.0]
    assert lost and all(r.rewards["win_reward"] == -1.0 for r in lost)
    assert env.rubric.names == load_environment().rubric.names  # same metric names as the reference
    for bad in (float("nan"), 1.0, "x"):
        with pytest.raises(ValueError, match="loss_reward"):
            load_environment(loss_reward=bad)


def _assert_costs(plain, costly, metric: str, option: str, value: float) -> None:
    """The same games scored without and with the env option `option` (a reward term of that name):
    it costs `value` exactly where `metric` counted something, and the option refuses bad values."""
    for a, b in zip(plain, costly, strict=True):
        assert b.rewards[option] == (-value if a.rewards[metric] else 0.0)
        assert math.isclose(b.reward, a.reward + b.rewards[option])
    for bad in (float("nan"), -0.1, 1.5, "x", True):
        with pytest.raises(ValueError, match=option):
            load_environment(**{option: bad})


def test_false_claims_are_counted_always_and_cost_only_with_claim_penalty():
    """A player that always claims "no immediate threat" misstates the board exactly on its
    turns where O can complete a line; the count is a metric everywhere, a reward term only
    with `claim_penalty`."""

    def calm(board, rng) -> str:
        return f"<think>There is no immediate threat, so I play it.</think><move>{board.index(' ')}</move>"

    def threatened(board) -> bool:
        return any([board[i] for i in line].count("O") == 2 and " " in [board[i] for i in line] for line in LINES)

    seen: list[int] = []

    def counting(board, rng) -> str:
        seen.append(threatened(board))
        return calm(board, rng)

    plain = load_environment(opponent="optimal", eval_tasks=40)
    rollouts = play(plain, scripted(counting), plain.tasks("eval"))
    assert sum(r.rewards["false_claims"] for r in rollouts) == sum(seen) > 0
    assert "claim_penalty" not in plain.rubric.names  # the reference rubric is unchanged
    costly = load_environment(opponent="optimal", eval_tasks=40, claim_penalty=0.25)
    again = play(costly, scripted(calm), costly.tasks("eval"))
    _assert_costs(rollouts, again, "false_claims", "claim_penalty", 0.25)


def test_missed_wins_are_counted_always_and_cost_only_with_missed_win_penalty():
    """A player that takes the first free cell misses exactly its turns where X could complete a
    line elsewhere (`win_cells`: counted from the lines, not through `winning_cells`); one that
    takes a win when there is one misses none. A metric everywhere, a reward term only with the option."""

    seen: list[bool] = []

    def first_free(board, rng) -> str:
        cell = board.index(" ")
        seen.append(bool(win_cells(board)) and cell not in win_cells(board))
        return f"<think>first free cell</think><move>{cell}</move>"

    def greedy(board, rng) -> str:
        cell = min(win_cells(board), default=board.index(" "))
        return f"<think>a win if there is one</think><move>{cell}</move>"

    plain = load_environment(opponent="random", eval_tasks=60)
    rollouts = play(plain, scripted(first_free), plain.tasks("eval"))
    assert sum(r.rewards["missed_wins"] for r in rollouts) == sum(seen) > 0
    assert all(r.rewards["missed_wins"] == 0 for r in play(plain, scripted(greedy), plain.tasks("eval")))
    assert "missed_win_penalty" not in plain.rubric.names  # the reference rubric is unchanged
    costly = load_environment(opponent="random", eval_tasks=60, missed_win_penalty=0.3)
    again = play(costly, scripted(first_free), costly.tasks("eval"))
    _assert_costs(rollouts, again, "missed_wins", "missed_win_penalty", 0.3)
