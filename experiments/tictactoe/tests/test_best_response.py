"""experiments/tictactoe/best_response.py: the exact best response to a training opponent. Checked
against the limit `rlvr_tictactoe.tree` computes its own way, and on the two opponents whose
difference it found: k <= 4 random replies make the best response to p = 0.7 lose to a perfect
player, while p drawn from a range that reaches down to 0.35 keeps it safe at the limit."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest
from rlvr_tictactoe import load_environment
from rlvr_tictactoe.game import EMPTY_BOARD, apply_move, game_value
from rlvr_tictactoe.tree import minimax_rates_vs_random, never_losing_max_win_rate

from rlvr import Policy
from rlvr.cli import main
from rlvr.exact import enumerate_games
from rlvr.results import json_line
from rlvr.types import SamplingArgs

SCRIPT = Path(__file__).resolve().parents[3] / "experiments" / "tictactoe" / "best_response.py"
spec = importlib.util.spec_from_file_location("tictactoe_best_response", SCRIPT)
assert spec is not None and spec.loader is not None
script = importlib.util.module_from_spec(spec)
sys.modules[spec.name] = script  # (its dataclass looks its module up there)
spec.loader.exec_module(script)


@pytest.mark.heavy
def test_the_best_response_to_p_07_alone_is_the_limit_policy_and_beats_a_saved_model(tmp_path: Path) -> None:
    at = script.parse_line("O8.X4.O1")  # where the shipped model plays a corner and an edge wins more
    solver = script.Solver(script.Opponent("p = 0.7", 0.7, 0.7, 0, 0.0), grid=1, watch=frozenset([at]))
    reward = solver.solve()
    win, _, _ = script.rates(solver.policy, 1.0)
    assert win == pytest.approx(never_losing_max_win_rate(), abs=1e-12)
    assert script.rates(solver.policy, 0.0)[2] == 0 and script.lost_games(solver.policy) == []
    assert script.policy_reward(solver, solver.policy) == pytest.approx(reward, abs=1e-12)
    values = solver.watched[at]
    assert sorted(values) == [0, 2, 3, 5, 6, 7] and max(values, key=values.get) in (3, 5)
    assert values[3] == pytest.approx(values[5]) and values[3] - values[0] > 0.05  # the edges' edge
    # a real exhaustive run (the minimax reference player), read back as a policy by history
    out = tmp_path / "exact"
    assert main(["eval", "tictactoe", "-m", "policy:optimal", "--exhaustive", "-q", "-o", str(out)]) == 0
    model = script.read_model_policy(out)
    meta = json.loads((out / "metadata.json").read_text())["exact"]["rates_pct"]
    assert 100 * script.rates(model, 1.0)[0] == pytest.approx(meta["random"]["win"], abs=1e-9)
    assert script.rates(model, 0.0)[2] == 0 and script.lost_games(model) == []
    assert script.policy_reward(solver, model) < reward - 0.01  # minimax gives up wins the best response takes
    # the same run cut short (its last game lost, and the torn half of the one before): refused in a line
    lines = (out / "results.jsonl").read_bytes().splitlines(keepends=True)
    cut = tmp_path / "cut"
    cut.mkdir()
    (cut / "results.jsonl").write_bytes(b"".join(lines[:-2]) + lines[-2][: len(lines[-2]) // 2])
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--model", str(cut), "--p", "0.7"], capture_output=True, text=True
    )
    assert done.returncode == 2 and "not a whole exhaustive run" in done.stderr and "Traceback" not in done.stderr


@pytest.mark.heavy
def test_a_model_that_times_out_is_read_and_its_timeouts_count_as_losses(tmp_path: Path) -> None:
    """A weak model's exhaustive run has games that end with every reply rejected: read as no move
    there, scored as the rubric scores a timeout (a loss), not a crash on a move of None."""
    stubborn = Policy(lambda messages, rng: "<move>4</move>")  # times out once cell 4 is taken
    result = asyncio.run(enumerate_games(load_environment(), stubborn, SamplingArgs(temperature=0.0), concurrency=64))
    (tmp_path / "results.jsonl").write_bytes(b"".join(json_line(g.to_dict()) for g in result.games))
    model = script.read_model_policy(tmp_path)
    assert set(model.values()) == {4, None}
    win, draw, loss = script.rates(model, 1.0)
    rates = result.rates("random")
    assert win == 0 and draw == 0 and loss == pytest.approx(rates.get("loss", 0) + rates["timeout"], abs=1e-12)
    assert script.rates({(): None} | {(c,): None for c in range(9)}, 0.0) == (0.0, 0.0, 1.0)
    solver = script.Solver(script.Opponent("p = 0", 0.0, 0.0, 0, 0.0), grid=1)
    solver.solve()
    assert script.policy_reward(solver, model) == 0.0  # every game a timeout: reward 0


@pytest.mark.parametrize("bad", ["O8.X4", "O8.O4.X1", "Y4.O1", "O8.X44.O1", "O8.X8.O1"])
def test_a_decision_is_a_line_that_ends_with_os_move(bad: str) -> None:
    with pytest.raises(ValueError):
        script.parse_line(bad)
    assert script.parse_line("X4.O0") == (4, 0) and script.parse_line("O8.X4.O1") == (8, 4, 1)


@pytest.mark.heavy
def test_random_replies_make_the_best_response_to_p_07_beatable_and_a_range_of_p_does_not() -> None:
    unsafe = script.report(script.Opponent("replies, p = 0.7", 0.7, 0.7, 4, 1.0), grid=1)
    assert unsafe["random_win"] > 100 * never_losing_max_win_rate() + 0.5  # it wins more by risking losses
    assert unsafe["optimal_loss"] > 20 and len(unsafe["lost_games"]) == 4
    for line in unsafe["lost_games"]:  # each is a whole game X loses: O completes a line at the end
        board, marks = EMPTY_BOARD, line.split(".")
        for move in marks:
            board = apply_move(board, int(move[1]), move[0])
        assert marks[0][0] == "O" and marks[-1][0] == "O" and game_value(board, "X") == -1
    safe = script.report(script.Opponent("replies, p in [0.35, 0.7]", 0.35, 0.7, 4, 1.0), grid=2)
    assert safe["random_win"] == pytest.approx(100 * never_losing_max_win_rate(), abs=1e-9)
    assert safe["optimal_loss"] == 0 and safe["lost_games"] == []


def test_rates_of_the_minimax_choice_match_the_tree_module() -> None:
    """`rates` of a policy against the random opponent, on a policy the tree module also scores:
    X's first best move everywhere (`minimax_rates_vs_random` averages the uniform tie-break, so
    only the loss, 0 either way, and the sum are compared), then the win rate bounded by the limit."""
    from rlvr_tictactoe.game import best_moves, legal_moves
    from rlvr_tictactoe.tasks import game_outcome

    policy: dict[tuple[int, ...], int] = {}

    def fill(board, history, x_to_move):
        if game_outcome(board) is not None:
            return
        if x_to_move:
            policy[history] = cell = best_moves(board, "X")[0]
            fill(apply_move(board, cell, "X"), (*history, cell), False)
        else:
            for c in legal_moves(board):
                fill(apply_move(board, c, "O"), (*history, c), True)

    fill(EMPTY_BOARD, (), True)
    fill(EMPTY_BOARD, (), False)
    win, draw, loss = script.rates(policy, 1.0)
    assert loss == 0 and win + draw == pytest.approx(1.0)
    assert minimax_rates_vs_random()[2] == 0 and win <= never_losing_max_win_rate() + 1e-12
    assert script.rates(policy, 0.0)[2] == 0 and script.lost_games(policy) == []


@pytest.mark.parametrize(
    ("argv", "reason"),
    [
        (["--p", "0.7", "0.2"], "--p takes P or LOW HIGH"),
        (["--p", "nan"], "--p takes P or LOW HIGH"),
        (["--p", "0.5", "--k", "99"], "--k in 0..5"),
        (["--at", "O8.X4.O1." + "\udcff" * 3], "a line is moves like"),
        (["--model", "no/such/run"], "is not a results directory"),
    ],
)
def test_the_command_line_refuses_bad_input(argv: list[str], reason: str) -> None:
    done = subprocess.run([sys.executable, str(SCRIPT), *argv], capture_output=True, text=True)
    assert done.returncode == 2 and reason in done.stderr and "Traceback" not in done.stderr
