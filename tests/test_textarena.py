"""The TextArena bridge, against the real textarena (no mocks): its games played through the
engine by the reference players, the game's own handling of an illegal move, self-play, and
its errors in one line."""

from __future__ import annotations

import asyncio
import statistics
import sys
import time

import pytest

pytest.importorskip("textarena")

from rlvr import check_env
from rlvr.clients.policy import Policy
from rlvr.engine import run_rollouts
from rlvr.envs.textarena import load_environment
from rlvr.errors import UsageError
from rlvr.registry import load_environment as load_by_name
from rlvr.types import Messages, Rollout


def _play(game: str, player: str, opponent: str = "random", n: int = 8, **args: object) -> list[Rollout]:
    env = load_environment(game=game, num_tasks=n, opponent=opponent, **args)  # type: ignore[arg-type]
    rollouts = asyncio.run(run_rollouts(env, env.policies()[player](), env.tasks()))
    assert len(rollouts) == n and [r.error for r in rollouts] == [None] * n
    assert {r.stop_reason for r in rollouts} == {"game_over"}
    return rollouts


def test_guess_the_number_bisect_always_wins_and_random_rarely() -> None:
    assert [r.reward for r in _play("GuessTheNumber-v0", "bisect")] == [1.0] * 8
    assert statistics.fmean(r.reward for r in _play("GuessTheNumber-v0", "random")) < 1.0


def test_tictactoe_optimal_never_loses_to_random_and_draws_itself() -> None:
    assert min(r.reward for r in _play("TicTacToe-v0", "optimal")) >= 0.5
    assert {r.reward for r in _play("TicTacToe-v0", "optimal", opponent="optimal")} == {0.5}
    assert {r.rewards["game_reward"] for r in _play("TicTacToe-v0", "optimal", opponent="optimal")} == {0.0}


def test_kuhn_poker_never_fold_plays_whole_games_from_either_seat() -> None:
    for seat in (0, 1):
        rollouts = _play("KuhnPoker-v0", "never_fold", opponent="random", seat=seat)
        assert {r.rewards["game_reward"] for r in rollouts} <= {-1.0, 0.0, 1.0}
        assert all(r.turns for r in rollouts)
    against_random = _play("KuhnPoker-v0", "never_fold", n=24)
    assert statistics.fmean(r.rewards["game_reward"] for r in against_random) > 0.2


def test_the_same_arguments_give_the_same_tasks_and_games() -> None:
    first = _play("KuhnPoker-v0", "never_fold", n=4)
    again = _play("KuhnPoker-v0", "never_fold", n=4)
    assert [r.messages for r in first] == [r.messages for r in again]
    assert len({str(r.messages[1]["content"]) for r in first}) > 1  # the deal depends on the seed


def test_an_illegal_move_gets_the_games_own_warning_then_loses() -> None:
    env = load_environment(game="TicTacToe-v0", num_tasks=1)
    stubborn = Policy(lambda messages, rng: "[4]", name="stubborn")  # legal once, then taken
    (rollout,) = asyncio.run(run_rollouts(env, stubborn, env.tasks()))
    warning = str(rollout.messages[-3]["content"])
    assert "attempted an invalid move" in warning and "cell 4 is already occupied" in warning
    assert rollout.reward == 0.0 and rollout.rewards["invalid_moves"] == 2.0
    assert rollout.rewards["game_reward"] == -1.0 and "Result: loss" in str(rollout.messages[-1]["content"])


def test_self_play_answers_the_other_seat_with_the_same_client() -> None:
    seen: list[str] = []

    def player(messages: Messages, rng: object) -> str:
        seen.append(str(messages[1]["content"]).splitlines()[0])
        return env.policies()["optimal"]().fn(messages, rng)  # type: ignore[attr-defined]

    env = load_environment(game="TicTacToe-v0", num_tasks=3, opponent="self")
    rollouts = asyncio.run(run_rollouts(env, Policy(player, name="both"), env.tasks()))
    assert [r.reward for r in rollouts] == [0.5] * 3  # optimal against itself: draws
    assert {"You are Player 0 in Tic Tac Toe.", "You are Player 1 in Tic Tac Toe."} == set(seen)


def test_a_second_model_plays_the_opponent_seat() -> None:
    env = load_environment(game="TicTacToe-v0", num_tasks=2, opponent_model="policy:optimal")
    rollouts = asyncio.run(run_rollouts(env, env.policies()["random"](), env.tasks()))
    assert max(r.reward for r in rollouts) <= 0.5  # random never beats the optimal player


def test_check_env_entry_point_and_errors() -> None:
    check_env(load_environment(game="GuessTheNumber-v0", num_tasks=3))
    env = load_by_name("textarena", game="KuhnPoker-v0", num_tasks=2, opponent="never_fold")
    assert set(env.policies()) == {"random", "never_fold"}
    for args, words in [
        ({"game": "TicTacToe-v1"}, "did you mean 'TicTacToe-v0'"),
        ({"game": "TicTacToe-v0", "seat": 2}, "seat must be one of 0..1"),
        ({"game": "TicTacToe-v0", "opponent": "bisect"}, "no opponent 'bisect'"),
        ({"num_tasks": 0}, "num_tasks must be >= 1"),
    ]:
        with pytest.raises(UsageError, match=words):
            load_environment(**args)  # type: ignore[arg-type]


def _counting(fn: object, cap: int = 2000) -> Policy:
    """A player that raises past `cap` calls, so that a loop fails the test instead of hanging it."""
    calls = [0]

    def player(messages: Messages, rng: object) -> str:
        calls[0] += 1
        if calls[0] > cap:
            raise RuntimeError(f"more than {cap} moves asked of one player")
        return fn(messages, rng)  # type: ignore[operator]

    return Policy(player, name="counting")


def test_other_seats_share_the_episodes_budget_of_moves() -> None:
    # Santorini does not end on a refused move: the random player's opponent seat kept trying.
    env = load_environment(game="SantoriniBaseFixed-v0", num_tasks=2, opponent="self", max_turns=6)
    random_player = env.policies()["random"]().fn  # type: ignore[attr-defined]
    rollouts = asyncio.run(run_rollouts(env, _counting(random_player), env.tasks()))
    assert [r.error for r in rollouts] == [None, None]
    for r in rollouts:
        assert r.stop_reason in {"game_over", "others_out_of_moves", "max_turns_reached"}
        assert len(r.turns) <= 6 and r.reward in {0.0, 0.5, 1.0}
    assert "others_out_of_moves" in {r.stop_reason for r in rollouts}
    assert all(r.reward == 0.0 for r in rollouts if r.stop_reason == "others_out_of_moves")


def test_player_counts_come_from_the_game() -> None:
    quantum = load_environment(game="QuantumTicTacToe-v0", num_tasks=1)
    assert quantum.num_players == 2  # it plays two whatever it is asked; one seat had no player
    (rollout,) = asyncio.run(run_rollouts(quantum, quantum.policies()["random"](), quantum.tasks()))
    assert rollout.error is None and rollout.stop_reason == "game_over"
    assert load_environment(game="PublicGoodsGame-v0", num_tasks=1).num_players == 3  # its own default
    assert load_environment(game="TicTacToe-v0", num_tasks=1).num_players == 2
    assert load_environment(game="GuessTheNumber-v0", num_tasks=1).num_players == 1
    with pytest.raises(UsageError, match="PublicGoodsGame-v0' cannot be played by 1 players: it is a game of several"):
        load_environment(game="PublicGoodsGame-v0", num_players=1)


def test_a_reason_given_as_the_reward_scores_as_the_games_loss() -> None:
    # Countdown, Cryptarithm, Slitherlink, ThreeCardMonte hand their reason over as the reward
    for game in ("Countdown-v0", "ThreeCardMonte-v0"):
        env = load_environment(game=game, num_tasks=1)
        (rollout,) = asyncio.run(run_rollouts(env, Policy(lambda m, r: "[nonsense move]", name="bad"), env.tasks()))
        assert rollout.error is None and rollout.stop_reason == "game_over"
        assert rollout.reward == 0.0 and rollout.rewards["game_reward"] == -1.0
        assert "not a number: scored as its loss" in str(rollout.messages[-1]["content"])


def test_a_game_step_that_never_returns_fails_its_rollout_at_the_deadline() -> None:
    # Every seat is eliminated for refused moves, and PublicGoodsGame's turn rotation spins for
    # ever inside TextArena's synchronous step (the games are seeded: so does every run)
    env = load_environment(game="PublicGoodsGame-v0", num_tasks=1, opponent="random", step_timeout_s=1.0)
    t0 = time.monotonic()
    (rollout,) = asyncio.run(run_rollouts(env, env.policies()["random"](), env.tasks()))
    assert time.monotonic() - t0 < 20
    assert rollout.stop_reason == "error" and "GameTimeout" in str(rollout.error)
    assert "step did not return within 1 s (its thread was stopped)" in str(rollout.error)
    assert _play("TicTacToe-v0", "random", n=2)  # the stopped game left nothing behind


def test_games_that_cannot_load_here_say_why() -> None:
    with pytest.raises(UsageError, match="imports the package 'gym', which textarena does not install"):
        load_environment(game="BabyAiText-v0")
    with pytest.raises(UsageError, match="CharacterConclave calls State.add_observation without"):
        load_environment(game="CharacterConclave-v0")  # it loads, but its every move raises
    if sys.version_info < (3, 12):
        with pytest.raises(UsageError, match="does not compile on Python 3.11 .*only Python 3.12 or later parses"):
            load_environment(game="Checkers-v0")


def test_random_falls_back_to_a_move_the_rules_quote_or_a_message() -> None:
    assert all(r.turns for r in _play("Sudoku-v0", "random", n=2))  # the rules quote '[row col num]'
    talk = _play("TruthAndDeception-v0", "random", n=2)  # free-text turns, then '[Fact 1]' or '[Fact 2]'
    assert [r.rewards["invalid_moves"] for r in talk] == [0.0, 0.0]


def test_a_stuck_game_fails_only_its_own_rollout() -> None:
    # A game's deadline starts when its call holds the game lock: tic-tac-toe steps (1 s each)
    # that wait behind PublicGoodsGame's spinning step (2 s) must not fail for it
    stuck = load_environment(game="PublicGoodsGame-v0", num_tasks=1, opponent="random", step_timeout_s=2.0)
    fine = load_environment(game="TicTacToe-v0", num_tasks=40, step_timeout_s=1.0)

    async def both() -> tuple[list[Rollout], list[Rollout]]:
        spun = asyncio.create_task(run_rollouts(stuck, stuck.policies()["random"](), stuck.tasks()))
        await asyncio.sleep(0.5)  # PublicGoodsGame spins after its first moves, well within this
        played = await run_rollouts(fine, fine.policies()["random"](), fine.tasks(), concurrency=40)
        return await spun, played

    (spun,), played = asyncio.run(both())
    assert "GameTimeout" in str(spun.error)
    assert [r.error for r in played] == [None] * 40
