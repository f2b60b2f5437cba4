"""Exact evaluation over the whole game tree, checked against an independent walk of the bare
game (game.py alone: no env, no messages, no engine)."""

from __future__ import annotations

import asyncio
import json
import math
import re

import pytest
from exact_players import GREEDY, as_policy, blunders_once, exact, first_best, lowest_free
from rlvr_tictactoe import load_environment, tree
from rlvr_tictactoe.game import EMPTY_BOARD, apply_move, game_value, legal_moves, winner

from rlvr.cli import main
from rlvr.errors import UsageError
from rlvr.exact import enumerate_games
from rlvr.types import SamplingArgs


def walk(choose):
    """The same tree from game.py alone: (rates per opponent, set of lost move sequences)."""
    rates = {name: {} for name in tree.OPPONENT_P}
    lost = set()

    def leaf(board, weights, seq):
        w = winner(board)
        outcome = "draw" if w is None else ("win" if w == "X" else "loss")
        for name, weight in weights.items():
            rates[name][outcome] = rates[name].get(outcome, 0.0) + weight
        if outcome == "loss":
            lost.add(seq)

    def x_turn(board, weights, seq):
        cell = choose(board)
        board = apply_move(board, cell, "X")
        seq = f"{seq}.X{cell}" if seq else f"X{cell}"
        if winner(board) or " " not in board:
            return leaf(board, weights, seq)
        for reply in legal_moves(board):
            w = {n: weights[n] * tree.reply_probability(board, reply, p) for n, p in tree.OPPONENT_P.items()}
            after = apply_move(board, reply, "O")
            if winner(after) or " " not in after:
                leaf(after, w, f"{seq}.O{reply}")
            else:
                x_turn(after, w, f"{seq}.O{reply}")

    x_turn(EMPTY_BOARD, tree.root_weights(None), "")
    for c in range(9):
        x_turn(apply_move(EMPTY_BOARD, c, "O"), tree.root_weights(c), f"O{c}")
    return rates, lost


@pytest.mark.parametrize("choose", [first_best, lowest_free, blunders_once], ids=["optimal", "weak", "one-blunder"])
def test_exact_rates_equal_an_independent_walk_of_the_game(choose):
    result = exact(choose)
    rates, lost = walk(choose)
    for opponent in tree.OPPONENT_P:
        assert math.isclose(result.total_weight(opponent), 1.0, abs_tol=1e-12)  # every line counted once
        got = result.rates(opponent)
        assert set(got) <= {"win", "draw", "loss"}
        for outcome in ("win", "draw", "loss"):
            assert math.isclose(got.get(outcome, 0.0), rates[opponent].get(outcome, 0.0), abs_tol=1e-12)
    assert {g.info["exact"]["moves"] for g in result.beaten} == lost
    assert result.unbeatable == (not lost)
    assert len({g.task_id for g in result.games}) == len(result.games)


def test_the_optimal_player_is_unbeatable_and_a_blunder_loses_exactly_through_its_position():
    assert exact(first_best).unbeatable
    blunder = exact(blunders_once)
    assert not blunder.unbeatable
    # every lost game went through the blunder: O opened on 0, X answered 1
    assert blunder.beaten and all(g.info["exact"]["moves"].startswith("O0.X1.") for g in blunder.beaten)
    assert blunder.rates("optimal")["loss"] > 0  # a best-playing O exploits it on every line
    assert math.isclose(blunder.rates("optimal")["loss"], 0.5 / 9, abs_tol=1e-12)
    # ... and they are one decision: the position, the move, the only move that holds there
    assert blunder.mistakes == {"O0: X1 (holds: 4)": len(blunder.beaten)}
    assert blunder.summary()["mistakes"] == blunder.mistakes and exact(first_best).mistakes == {}
    from io import StringIO

    from rich.console import Console

    from rlvr.exact import print_exact

    printed = StringIO()
    print_exact(blunder, title="t", console=Console(file=printed, width=200))
    n = len(blunder.beaten)
    assert f"no: {n} games beat it, through 1 decision(s)" in printed.getvalue()
    assert f"decision O0: X1 (holds: 4): {n} game(s)" in printed.getvalue()


def test_each_lost_game_names_the_first_move_that_lost_a_position_x_could_hold():
    assert tree.mistake("X4.O0.X8.O2.X1.O7.X6.O3.X5") is None  # a draw: no move lost anything
    for line, want in (
        ("O0.X4.O8.X2.O6.X3.O7", "O0.X4.O8: X2 (holds: 1, 3, 5, 7)"),  # the opposite-corner trap
        ("O6.X4.O3.X5.O0", "O6.X4.O3: X5 (holds: 0)"),  # a missed block
        ("O4.X1.O0.X8.O2.X6.O3.X5.O7", "O4: X1 (holds: 0, 2, 6, 8)"),  # lost at once; X's later moves are not named
        ("X0.O1.X4.O8.X2.O6.X5.O7", "X0.O1.X4.O8.X2.O6: X5 (holds: 7)"),  # a missed block late in the game
    ):
        assert tree.mistake(line) == want, line


def test_the_reference_player_is_unbeatable():
    env = load_environment()
    result = asyncio.run(enumerate_games(env, env.policies()["optimal"](), GREEDY))
    assert result.unbeatable and result.rates("optimal").get("loss", 0.0) == 0.0
    # its tie-break is one draw of the uniform one, so its rate sits near the uniform average
    assert abs(result.rates("random")["win"] - tree.minimax_rates_vs_random()[0]) < 0.05


def test_rejected_moves_are_counted_and_a_player_that_never_moves_times_out():
    def stubborn(board):  # insists on the centre, even when it is taken
        return 4

    result = exact(stubborn)
    assert not result.unbeatable
    assert "timeout" in result.outcomes and all(o in ("win", "draw", "loss", "timeout") for o in result.outcomes)
    timed_out = [g for g in result.games if g.info["exact"]["outcome"] == "timeout"]
    assert timed_out and all(g.info["exact"]["rejected_moves"] > 0 for g in timed_out)
    assert all(g.stop_reason == "max_turns_reached" for g in timed_out)
    # a player that never makes a legal move: every game times out, the model-first one before
    # its first move ("X-first"); no decision lost those games, so each counts as its own
    never = exact(lambda board: 9)
    assert set(never.outcomes) == {"timeout"} and "X-first" in {g.info["exact"]["moves"] for g in never.games}
    assert all("mistake" not in g.info["exact"] for g in never.games)
    assert never.mistakes == {g.task_id: 1 for g in never.beaten}


def test_a_sampling_temperature_is_refused():
    with pytest.raises(UsageError, match="temperature 0"):
        asyncio.run(enumerate_games(load_environment(), as_policy(first_best), SamplingArgs(temperature=1.0)))


def test_limits_of_the_game():
    assert round(100 * tree.never_losing_max_win_rate(), 2) == 95.56
    win, draw, loss = tree.minimax_rates_vs_random()
    assert (round(100 * win, 2), round(100 * draw, 2), loss) == (87.26, 12.74, 0.0)


def best_vs_random(board) -> int:
    """The never-losing move that wins most often against the random opponent (the 95.56% player)."""
    safe = [c for c in legal_moves(board) if game_value(apply_move(board, c, "X"), "O") <= 0]
    return max(safe, key=lambda c: tree._safe_win(apply_move(board, c, "X"), False))


def test_the_limit_player_never_loses_and_wins_the_limit_whichever_tie_it_takes():
    limit = tree.never_losing_max_win_rate()
    env = load_environment()
    result = asyncio.run(enumerate_games(env, env.policies()["limit"](), GREEDY))
    assert result.unbeatable and result.summary()["rejected_move_games"] == 0
    assert math.isclose(result.rates("random")["win"], limit, abs_tol=1e-12)
    assert math.isclose(result.rates("optimal")["draw"], 1.0, abs_tol=1e-12)
    # every move limit_moves offers is a best one: the first, the last, and another player's pick
    for pick in (lambda board: tree.limit_moves(board)[0], lambda board: tree.limit_moves(board)[-1]):
        wins, gaps = tree.win_rate_gaps(lambda line, board, pick=pick: pick(board))
        assert gaps == [] and math.isclose(wins, limit, abs_tol=1e-12)
    seen: list = []
    tree.win_rate_gaps(lambda line, board: seen.append(board) or best_vs_random(board))
    assert all(best_vs_random(board) in tree.limit_moves(board) for board in seen)
    assert tree.limit_moves(apply_move(EMPTY_BOARD, 1, "O")) != legal_moves(apply_move(EMPTY_BOARD, 1, "O"))


def test_win_rate_gaps_locate_the_shortfall_from_the_never_losing_limit():
    limit = tree.never_losing_max_win_rate()
    wins, gaps = tree.win_rate_gaps(lambda line, board: best_vs_random(board))
    assert gaps == [] and math.isclose(wins, limit, abs_tol=1e-12)
    # the minimax player: its exact rate from the real env, and its shortfall split over decisions
    wins, gaps = tree.win_rate_gaps(lambda line, board: first_best(board))
    assert math.isclose(wins, exact(first_best).rates("random")["win"], abs_tol=1e-12)
    assert gaps and all(g.weighted > 0 and g.move not in g.best for g in gaps)
    assert math.isclose(sum(g.weighted for g in gaps), limit - wins, abs_tol=1e-12)
    # the player is shown the line that led to the board (a model's reply depends on it)
    seen = []
    tree.win_rate_gaps(lambda line, board: seen.append((line, board)) or first_best(board))
    for line, board in seen:
        replayed = EMPTY_BOARD
        for mark, cell in line:
            replayed = apply_move(replayed, cell, mark)
        assert replayed == board
    assert {line for line, _ in seen} >= {(), (("O", 0),), (("O", 8), ("X", 4), ("O", 0))}


def test_cli_exhaustive_saves_every_game_and_resume_reprints(tmp_path, capsys):
    out = tmp_path / "exact"
    argv = ["eval", "tictactoe", "-m", "policy:optimal", "--exhaustive", "-q", "-o", str(out)]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert "unbeatable: yes" in printed and "random" in printed
    # one heading line, not wrapped to the table's width (output that is not a terminal)
    assert re.search(
        r"^tictactoe / policy:optimal: exact, \d+ games \(every line of play\), \d+ model calls$", printed, re.M
    ), printed
    meta = json.loads((out / "metadata.json").read_text())
    lines = (out / "results.jsonl").read_text().splitlines()
    assert meta["status"] == "complete" and meta["exact"]["unbeatable"] is True
    assert len(lines) == meta["exact"]["games"] > 100
    assert main([*argv, "--resume"]) == 0
    assert "nothing played" in capsys.readouterr().out
    assert main([*argv[:-3], "-o", str(tmp_path / "loud")]) == 0  # with progress, into a log: no \r
    assert "unbeatable: yes" in (loud := capsys.readouterr().out) and "\r" not in loud
    assert main(["eval", "reverse_text", "-m", "policy:oracle", "--exhaustive", "-o", str(tmp_path / "y")]) == 1
    assert "no exact evaluation" in capsys.readouterr().err and not (tmp_path / "y").exists()


def test_the_report_shows_each_lost_game_as_a_board():
    from rlvr.report import render_report

    result = exact(blunders_once)
    metadata = {"env": "tictactoe", "model": "scripted", "exact": {**result.summary(), "failures": list(tree.FAILURES)}}
    page = render_report(metadata, result.games)
    assert f"Games that beat the policy ({len(result.beaten)})" in page
    assert page.count('<div class="lost">') == len(result.beaten) > 0
    assert "you lose. Game over." in page and "O | X |" in page  # the final board as the model saw it
    assert "Through 1 decision(s)" in page and "<code>O0: X1 (holds: 4)</code>" in page
