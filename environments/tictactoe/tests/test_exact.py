"""Exact evaluation over the whole game tree, checked against an independent walk of the bare
game (game.py alone: no env, no messages, no engine)."""

from __future__ import annotations

import asyncio
import csv
import importlib.util
import json
import math
import re
from pathlib import Path

import pytest
from rlvr_tictactoe import load_environment, tree
from rlvr_tictactoe.game import EMPTY_BOARD, apply_move, best_moves, game_value, legal_moves, parse_board, winner

from rlvr import Policy
from rlvr.cli import main
from rlvr.engine import run_rollouts
from rlvr.errors import UsageError
from rlvr.exact import ExactResult, enumerate_games
from rlvr.results import json_line
from rlvr.types import SamplingArgs

GREEDY = SamplingArgs(temperature=0.0)


def as_policy(choose) -> Policy:
    """A deterministic player `choose(board) -> cell` as a chat client in the rewarded format."""

    def play(messages, rng):
        cell = choose(parse_board(messages[-1]["content"]))
        return f"<think>scripted</think>\n<move>{cell}</move>"

    return Policy(play, name="scripted")


def first_best(board) -> int:
    return best_moves(board, "X")[0]


def lowest_free(board) -> int:
    return legal_moves(board)[0]


BLUNDER = apply_move(EMPTY_BOARD, 0, "O")
"""O took a corner; X must take the centre, and a side (cell 1) loses to best play."""


def blunders_once(board) -> int:
    return 1 if tuple(board) == BLUNDER else first_best(board)


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


def exact(choose=None, client=None, **env_args) -> ExactResult:
    env = load_environment(**env_args)
    return asyncio.run(enumerate_games(env, client or as_policy(choose), GREEDY, concurrency=64))


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


def gap_script():
    spec = importlib.util.spec_from_file_location("gaps", Path(__file__).parents[3] / "scripts" / "tictactoe_regret.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    return script


def saved(games, folder: Path) -> Path:
    folder.mkdir()
    (folder / "results.jsonl").write_bytes(b"".join(json_line(g.to_dict()) for g in games))
    return folder


def test_the_gap_script_values_positions_as_training_games_score_them():
    """tictactoe_regret.py's training view: `value` is what a training game scores (win 1, draw
    0.5) when X replies best to the training opponent, checked against games the env itself
    deals, plays and scores; `training_view` weighs a decision by its lines' chances."""
    script = gap_script()
    assert script.value(EMPTY_BOARD, True, 0, 0.0, 0.0) == 0.5  # a perfect opponent: a draw
    p, trap = 0.7, 1.0

    def best_reply(board) -> int:
        return max(legal_moves(board), key=lambda m: script.value(apply_move(board, m, "X"), False, 0, p, trap))

    env = load_environment(min_random_move_prob=p, max_random_move_prob=p, trap_prob=trap, num_tasks=2000)
    games = asyncio.run(run_rollouts(env, as_policy(best_reply), env.tasks("train")))
    scores = [g.rewards["win"] + 0.5 * g.rewards["draw"] for g in games]
    mean = sum(scores) / len(scores)
    sd = math.sqrt(sum((x - mean) ** 2 for x in scores) / len(scores) / len(scores))
    expected = 0.5 * script.value(EMPTY_BOARD, True, 0, p, trap) + 0.5 * script.value(EMPTY_BOARD, False, 0, p, trap)
    assert abs(mean - expected) < 4 * sd, (mean, expected)  # (the tasks are seeded: no flake)
    # a decision's reach is its line's chance, averaged over k; its gap is the k-weighted one
    wins, gaps = tree.win_rate_gaps(lambda line, board: first_best(board))
    gap = next(g for g in gaps if g.line)
    at, gain = script.training_view(gap, [0, 1], p, trap)
    assert math.isclose(at, sum(tree.line_chance(gap.line, k, p, trap) for k in (0, 1)) / 2)
    assert 0.0 < gain <= 1.0


def test_the_gap_script_finds_what_unsure_restarts_would_restart():
    """`unsure_view`: only decisions below the threshold (not those without a recorded
    probability); a policy that replies best to the training opponent has no gap anywhere, and
    a worse opening shows exactly the value it gives up."""
    script, p, trap = gap_script(), 0.7, 1.0

    def best(board) -> int:
        return max(legal_moves(board), key=lambda m: script.value(apply_move(board, m, "X"), False, 0, p, trap))

    policy: dict = {}
    tree.win_rate_gaps(lambda line, board: policy.setdefault(line, best(board)))
    odds = dict.fromkeys(policy, 0.5)
    odds[(("O", 4),)], odds[(("O", 0),)] = 0.95, math.nan  # sure, and not recorded
    rows = script.unsure_view(policy, odds, 0.9, [0], p, trap)
    assert {row[0] for row in rows} == set(policy) - {(("O", 4),), (("O", 0),)}
    assert all(abs(gain) < 1e-12 for *_, gain in rows)
    assert [row[3] for row in rows] == sorted((row[3] for row in rows), reverse=True)
    policy[()] = 1  # an edge opening
    (root,) = [row for row in script.unsure_view(policy, odds, 0.9, [0], p, trap) if row[0] == ()]
    after = [script.value(apply_move(EMPTY_BOARD, m, "X"), False, 0, p, trap) for m in range(9)]
    assert root[1:4] == (1, 0.5, 0.5) and math.isclose(root[4], max(after) - after[1]) and root[4] > 0


def test_the_gap_script_sorts_each_decision_by_what_was_on_the_board(capsys):
    script = gap_script()

    def kind(line: str, move: int, best: list[int]) -> str:
        steps = tuple((m[0], int(m[1])) for m in line.split())
        return script.decision_kind(tree.Gap(0.01, 0.5, steps, move, best))

    # X holds 4 5 6 (3 wins), O holds 8 2 1 (0 blocks 0-1-2)
    assert kind("X4 O8 X6 O2 X5 O1", 0, [3]) == script.KINDS[0]  # blocked where it could win
    assert kind("X4 O8 X6 O2 X5 O1", 7, [3]) == script.KINDS[1]
    assert kind("O0 X4 O1", 5, [2]) == script.KINDS[2]  # O threatens 2
    assert kind("O8 X4 O3", 0, [1, 7]) == script.KINDS[3]  # a corner where only an edge is best
    assert kind("O8 X4 O3", 5, [1, 7]) == script.KINDS[4]  # an edge, not the best one
    assert kind("", 4, [0, 2, 6, 8]) == script.KINDS[3]  # the centre as X's opening
    assert kind("O4", 0, [2, 6, 8]) == script.KINDS[4]  # a corner, where the best are corners too
    # the minimax player's shortfall, every decision of one kind, the kinds adding up to it
    _, gaps = tree.win_rate_gaps(lambda line, board: first_best(board))
    script.print_kinds(gaps)
    rows = [r.split(" | ") for r in capsys.readouterr().out.splitlines() if r.startswith("| ") and r[2:6] != "kind"]
    assert [r[0][2:] for r in rows] == list(script.KINDS)
    assert sum(int(r[1]) for r in rows) == len(gaps)
    assert math.isclose(sum(float(r[2]) for r in rows), 100 * sum(g.weighted for g in gaps), abs_tol=0.03)
    for r in rows:  # where: at most three openings, the most decisions first, none counted twice
        where = [(w.rsplit(": ", 1)[0], int(w.rsplit(": ", 1)[1])) for w in r[3][:-2].split(", ") if w]
        assert len(where) <= 3 and len({w for w, _ in where}) == len(where) and sum(n for _, n in where) <= int(r[1])
        assert [n for _, n in where] == sorted((n for _, n in where), reverse=True)
    # where, counted: two decisions after X4 O8, one after O0 X4, one at X's opening
    some = [
        tree.Gap(0.01, 0.5, tuple((m[0], int(m[1])) for m in line.split()), move, best)
        for line, move, best in [("X4 O8 X6 O2 X5 O1", 0, [3]), ("X4 O8", 0, [2]), ("O0 X4 O1", 5, [2]), ("", 4, [0])]
    ]
    assert script.openings(some) == "X4 O8: 2, O0 X4: 1, (X opens): 1"
    assert script.openings(some, top=1) == "X4 O8: 2" and script.openings([]) == ""


def test_the_board_symmetries_are_the_eight_of_the_square():
    script = gap_script()
    assert len(set(script.SYMMETRIES)) == 8 and all(sorted(m) == list(range(9)) for m in script.SYMMETRIES)
    assert all(m[4] == 4 for m in script.SYMMETRIES)  # the centre stays
    knight = ((4,), (1, 8))  # O on a corner and an edge a knight's move away, X in the centre
    images = {tuple(tuple(sorted(m[c] for c in cells)) for cells in knight) for m in script.SYMMETRIES}
    assert len(images) == 8 and {script.canonical(b) for b in images} == {script.canonical(knight)}
    assert script.canonical(((4,), (0, 8))) != script.canonical(knight)  # two corners: another position
    assert script.marks((("O", 8), ("X", 4), ("O", 1))) == knight


def test_the_gap_script_reads_a_saved_exhaustive_run(tmp_path, capsys, monkeypatch):
    script, out = gap_script(), tmp_path / "exact"
    assert main(["eval", "tictactoe", "-m", "policy:optimal", "--exhaustive", "-q", "-o", str(out)]) == 0
    meta = json.loads((out / "metadata.json").read_text())
    policy = script.read_policy(out / "results.jsonl")
    wins, gaps = tree.win_rate_gaps(lambda line, board: policy[line])
    assert math.isclose(100 * wins, meta["exact"]["rates_pct"]["random"]["win"], abs_tol=1e-9)
    assert math.isclose(sum(g.weighted for g in gaps), tree.never_losing_max_win_rate() - wins, abs_tol=1e-12)

    def run(path) -> int:
        monkeypatch.setattr("sys.argv", ["tictactoe_regret.py", str(path), "--top", "3"])
        return script.main()

    capsys.readouterr()
    assert run(out) == 0 and "limit 95.56%" in capsys.readouterr().out
    rows = script.symmetry_view(gaps, policy)  # every decision in one class; the classes add up
    assert sum(r[1] for r in rows) == len(gaps) and len(rows) < len(gaps)
    assert math.isclose(sum(r[0] for r in rows), sum(g.weighted for g in gaps), abs_tol=1e-12)
    assert all(0 < wrong <= seen <= 8 for _, _, wrong, seen, _ in rows)
    monkeypatch.setattr("sys.argv", ["tictactoe_regret.py", str(out), "--by-symmetry"])
    assert (
        script.main() == 0 and f"{len(gaps)} decisions, {len(rows)} positions up to symmetry" in capsys.readouterr().out
    )
    monkeypatch.setattr("sys.argv", ["tictactoe_regret.py", str(out), "--by-kind", "--top", "0"])
    assert script.main() == 0 and "by what was on the board" in capsys.readouterr().out
    monkeypatch.setattr("sys.argv", ["tictactoe_regret.py", str(out), "--train-p", "0.7", "--top", "2"])
    assert script.main() == 0
    printed = capsys.readouterr().out  # policy players record no log-probabilities: "nan"
    assert "| reward gap |" in printed and "| nan |" in printed and "a step of 256 games meets them" in printed
    # recorded log-probabilities: a real one read back, hostile ones (no probability) shown as nan
    lines = (out / "results.jsonl").read_text().splitlines()
    games = [json.loads(x) for x in lines]
    for game, logprobs in zip(games, [[-0.5]] * (len(games) - 2) + [[1000.0], [1e308, 1e308]], strict=True):
        for turn in game["turns"]:  # (the hostile ones last: their lines are read last)
            turn["completion"]["logprobs"] = logprobs
    (out / "results.jsonl").write_text("".join(json.dumps(g) + "\n" for g in games))
    policy, odds, texts = script.read_records(out)
    assert all(math.isnan(x) or math.isclose(x, math.exp(-0.5)) for x in odds.values())
    assert any(math.isclose(x, math.exp(-0.5)) for x in odds.values()) and any(math.isnan(x) for x in odds.values())
    assert script.main() == 0
    # --claims: every reply now blocks a threat on 0-1-2; true only where O holds the other two
    for game in games:
        for turn in game["turns"]:
            cell = turn["completion"]["text"].rsplit("<move>", 1)[1][0]
            turn["completion"]["text"] = (
                f"<think>O threatens to complete 0-1-2, so I block at {cell}.</think>\n<move>{cell}</move>"
            )
    (out / "results.jsonl").write_text("".join(json.dumps(g) + "\n" for g in games))
    policy, _, texts = script.read_records(out)
    true = 0
    for line, cell in policy.items():
        board = script.board_after(line)
        true += cell in (0, 1, 2) and board[cell] == " " and all(board[c] == "O" for c in {0, 1, 2} - {cell})
    assert 0 < true < len(policy) and set(texts) == set(policy)  # (one turn a move: every reply's text kept)
    monkeypatch.setattr("sys.argv", ["tictactoe_regret.py", str(out), "--claims"])
    capsys.readouterr()
    assert script.main() == 0
    printed = capsys.readouterr().out
    assert (
        f"over all {len(policy)} decisions: {len(policy) - true} false, {true} true, 0 with no claim checked (or no single reply recorded)"
        in printed
    )
    # hostile replies: a table cell each (no pipe, no newline, cut), a lone surrogate printable
    for game in games:
        for turn in game["turns"]:
            cell = turn["completion"]["text"].rsplit("<move>", 1)[1][0]
            turn["completion"]["text"] = f"<think>\ud800\n{'a|b' * 5_000}</think>\n<move>{cell}</move>"
    (out / "results.jsonl").write_text("".join(json.dumps(g) + "\n" for g in games))
    assert script.main() == 0
    printed = capsys.readouterr().out
    rows = [x for x in printed.splitlines() if x.startswith("| ") and "a/b" in x]
    assert rows and all(len(x) < 200 and x.count("|") == 6 and "| ? a/b" in x for x in rows)
    assert f"0 false, 0 true, {len(policy)} with no claim checked" in printed
    monkeypatch.setattr("sys.argv", ["tictactoe_regret.py", str(out), "--train-p", "0.7", "--unsure", "0.9"])
    capsys.readouterr()
    assert script.main() == 0
    printed = capsys.readouterr().out  # every recorded reply had probability exp(-0.5) < 0.9
    assert "have a greedy reply below 0.9" in printed and "a greedy probe game meets them" in printed
    for bad in (["--unsure", "0.5"], ["--train-p", "0.7", "--unsure", "0"], ["--train-p", "0.7", "--unsure", "nan"]):
        monkeypatch.setattr("sys.argv", ["tictactoe_regret.py", str(out), *bad])
        with pytest.raises(SystemExit):
            script.main()
    for bad in (["--train-p", "nan"], ["--train-p", "1.5"], ["--trap-prob", "-1", "--train-p", "0"], ["--games", "0"]):
        monkeypatch.setattr("sys.argv", ["tictactoe_regret.py", str(out), *bad])
        with pytest.raises(SystemExit):
            script.main()

    # a rejected first move in every game (then first_best): the lines are the accepted moves
    def stubborn_once(messages, rng):
        first = not any(m["role"] == "assistant" for m in messages)
        return f"<move>{9 if first else first_best(parse_board(messages[-1]['content']))}</move>"

    rejected = asyncio.run(enumerate_games(load_environment(), Policy(stubborn_once), GREEDY, concurrency=64))
    assert all(g.info["exact"]["rejected_moves"] > 0 for g in rejected.games)
    policy = script.read_policy(saved(rejected.games, tmp_path / "rejected"))
    assert tree.win_rate_gaps(lambda line, board: policy[line]) == tree.win_rate_gaps(lambda line, b: first_best(b))
    # a killed run: the torn last line is dropped, and a decision it alone held is named, no traceback
    torn = tmp_path / "torn"
    torn.mkdir()
    text = (out / "results.jsonl").read_bytes()
    (torn / "results.jsonl").write_bytes(text[: len(text) - 40])
    assert run(torn) in (0, 2) and "Traceback" not in capsys.readouterr().err
    # a player that times out (every reply rejected once cell 4 is taken): decisions with no move,
    # each giving up all the wins its position held, so the gaps add up to the whole limit
    stubborn = exact(lambda board: 4)
    assert stubborn.rates("random").get("win", 0) == 0 and stubborn.rates("random")["timeout"] > 0.5
    policy = script.read_policy(saved(stubborn.games, tmp_path / "timeouts"))
    # no move: after X4 and each of O's 8 replies, after O4, and after O's 8 other openings, X4 and 7 replies
    assert list(policy.values()).count(None) == 8 + 1 + 8 * 7 and set(policy.values()) == {4, None}
    wins, gaps = tree.win_rate_gaps(lambda line, board: policy[line])
    assert wins == 0 and math.isclose(sum(g.weighted for g in gaps), tree.never_losing_max_win_rate(), abs_tol=1e-12)
    monkeypatch.setattr(
        "sys.argv", ["tictactoe_regret.py", str(tmp_path / "timeouts"), "--by-kind", "--train-p", "0.7"]
    )
    capsys.readouterr()
    assert script.main() == 0
    printed = capsys.readouterr().out
    stuck = sum(g.move is None for g in gaps)
    assert stuck > 0 and f"| no move accepted (every reply rejected: a timeout) | {stuck} |" in printed
    assert "| none (timeout) |" in printed
    # no reply ever accepted: X's opening (a record of no moves, "X-first") and each of O's 9 openings
    policy = script.read_policy(saved(exact(lambda board: 9).games, tmp_path / "never"))
    assert policy == {(): None} | {(("O", c),): None for c in range(9)}
    wins, gaps = tree.win_rate_gaps(lambda line, board: policy[line])
    assert wins == 0 and math.isclose(sum(g.weighted for g in gaps), tree.never_losing_max_win_rate(), abs_tol=1e-12)
    # two players' games in one file: a line answered two ways is refused, not silently overwritten
    mixed = tmp_path / "mixed"
    mixed.mkdir()
    both = (tmp_path / "timeouts" / "results.jsonl").read_bytes() + (tmp_path / "never" / "results.jsonl").read_bytes()
    (mixed / "results.jsonl").write_bytes(both)
    assert run(mixed) == 2 and "two runs in one file" in capsys.readouterr().err
    # a decision no saved game holds (a game left out: an unfinished run) is named, not guessed
    games = [json.loads(x) for x in (out / "results.jsonl").read_text().splitlines()]
    ends_on_x = next(i for i, g in enumerate(games) if g["info"]["exact"]["moves"].rsplit(".", 1)[-1][0] == "X")
    short = tmp_path / "short"
    short.mkdir()
    (short / "results.jsonl").write_text("".join(json.dumps(g) + "\n" for i, g in enumerate(games) if i != ends_on_x))
    assert run(short) == 2 and "has no model move after" in capsys.readouterr().err
    # an ordinary eval has no exact records
    plain = tmp_path / "plain"
    assert main(["eval", "tictactoe", "-m", "policy:optimal", "-n", "2", "-r", "1", "-q", "-o", str(plain)]) == 0
    capsys.readouterr()
    assert run(plain) == 2 and "no exact record" in capsys.readouterr().err
    # hostile move records (a lone surrogate, a cell off the board, an unclosed step, a huge one)
    games = [json.loads(x) for x in (out / "results.jsonl").read_text().splitlines()]
    for i, moves in enumerate(["X4.O\ud800", "X4.O12", "X4.O", "X4." + "O1" * 100_000]):
        games[0]["info"]["exact"]["moves"] = moves
        folder = tmp_path / f"hostile{i}"
        folder.mkdir()
        (folder / "results.jsonl").write_text("".join(json.dumps(g) + "\n" for g in games))
        assert run(folder) == 2
        err = capsys.readouterr().err
        assert "has no readable moves" in err and len(err) < 400, err[:400]


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
    hot = ["eval", "tictactoe", "-m", "policy:optimal", "--exhaustive", "-T", "0.7", "-o", str(tmp_path / "x")]
    assert main(hot) == 1
    assert "temperature 0" in capsys.readouterr().err and not (tmp_path / "x").exists()
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


def test_the_curves_script_skips_torn_and_nan_lines_and_never_adds_a_point_twice(tmp_path) -> None:
    """scripts/tictactoe_curves.py `add`: rows without an exact evaluation, a torn last line (a
    run killed mid-write) and NaN are skipped; a second phase continues the line from its first
    step, and a point the CSV already has is not added again."""
    spec = importlib.util.spec_from_file_location(
        "curves", Path(__file__).parents[3] / "scripts" / "tictactoe_curves.py"
    )
    assert spec is not None and spec.loader is not None
    curves = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(curves)
    header = "step," + ",".join(curves.SOURCE.values())
    run = tmp_path / "run"
    run.mkdir()
    lines = [header, "0,2,0,91,0.1,99,1", "10,,,,,,", "20,nan,0,91,0,99,1", "40,1,0,92.5,0,100,0", "60,0,0"]
    (run / "metrics.csv").write_text("\n".join(lines))
    table = tmp_path / "curves.csv"
    assert curves.add(table, run, "0", "o", "v") == 2
    assert curves.add(table, run, "0", "o", "v") == 0
    assert curves.add(table, run, "0", "o", "v", 40) == 1  # its step 0 is step 40, already there
    with table.open() as f:
        rows = list(csv.DictReader(f))
    assert [(r["step"], r["lost_games"]) for r in rows] == [("0", "2"), ("40", "1"), ("80", "1")]
    # plot's choice of lines and panels: a label's part, and seeds by the start of their name
    curves.add(table, run, "weak", "o", "v, lr 4e-5")
    curves.add(table, run, "weak1", "o", "v, lr 4e-5")
    assert {r["seed"] for r in curves.select(table, "lr 4e-5")} == {"weak", "weak1"}
    assert {r["seed"] for r in curves.select(table, "", "weak")} == {"weak", "weak1"}
    assert {r["seed"] for r in curves.select(table, "", "0")} == {"0"}
    assert curves.select(table, "lr 4e-5", "0") == []
    with pytest.raises(SystemExit, match="no line"):
        curves.plot(table, tmp_path / "none.png", "lr 4e-5", "0")


def test_the_line_odds_script_gives_each_line_its_chance_under_the_training_opponent(tmp_path, capsys):
    """scripts/tictactoe_line_odds.py: over every game of a deterministic player the chances sum
    to 1, for several training opponents; the chance of the lost lines matches how often the
    player loses in training games the env itself deals and plays."""
    spec = importlib.util.spec_from_file_location(
        "odds", Path(__file__).parents[3] / "scripts" / "tictactoe_line_odds.py"
    )
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    result = exact(blunders_once)
    lines = [g.info["exact"]["moves"] for g in result.games]
    lost = [x for x, o in zip(lines, result.outcomes, strict=True) if o == "loss"]
    assert lost and all(x.startswith("O0.X1.") for x in lost)  # the one blunder: X1 after O0
    for ks, p, trap in (([0, 1, 2, 3, 4], 0.0, 1.0), ([4], 0.0, 1.0), ([0, 1, 2], 0.3, 0.5)):
        assert math.isclose(sum(script.line_odds(x, ks, p, trap) for x in lines), 1.0, abs_tol=1e-12), (ks, p, trap)
    chance = sum(script.line_odds(x, [0, 1, 2, 3, 4], 0.0, 1.0) for x in lost)
    env = load_environment(opponent="optimal", trap_prob=1.0, random_replies=4, num_tasks=1200)
    games = asyncio.run(run_rollouts(env, as_policy(blunders_once), env.tasks("train")))
    share = sum(g.rewards["loss"] == 1.0 for g in games) / len(games)
    sd = math.sqrt(chance * (1 - chance) / len(games))
    assert abs(share - chance) < 4 * sd, (share, chance)  # (the tasks are seeded: no flake)
    # the script on an exhaustive folder: each lost line, the total, and the fixed-k probes
    folder = tmp_path / "exact"
    folder.mkdir()
    (folder / "metadata.json").write_text(json.dumps({"exact": {"beaten": lost, "games": len(lines)}}))
    assert script.main([str(folder), "--probe-k", "4", "--probes", "64"]) == 0
    printed = capsys.readouterr().out
    assert f"{len(lost)} lost lines of {len(lines)} games" in printed
    assert f"a greedy probe loses {100 * chance:.4f}% of games" in printed
    assert f"64 probes a step, {script.every(chance, 64)}" in printed
    # a weak player loses several a step: a count, not "one every 0 steps"
    assert script.every(0.0459, 64) == "2.9 lost a step" and script.every(0.001, 64) == "one lost every 16 steps"
    assert script.every(0.0, 64) == "none lost"
    # a plain eval, a torn metadata.json (a killed write), lines that are not games: one line, exit 2
    for name, text in (
        ("plain", '{"status": "complete"}'),
        ("torn", '{"exact": {"beaten": ["O0.X1'),
        ("surrogate", json.dumps({"exact": {"beaten": ["O0.X\ud800"], "games": 1}})),
        ("taken", json.dumps({"exact": {"beaten": ["O0.X0"], "games": 1}})),
        ("huge", json.dumps({"exact": {"beaten": ["O0." * 100_000], "games": 1}})),
    ):
        (tmp_path / name).mkdir()
        (tmp_path / name / "metadata.json").write_text(text)
        assert script.main([str(tmp_path / name)]) == 2, name
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "not a complete" in err and len(err) < 2_000, err
    assert script.main([str(tmp_path / "missing")]) == 2 and "not a complete" in capsys.readouterr().err
    for bad in (["--p", "nan"], ["--trap-prob", "2"], ["--probe-k", "6"], ["--probes", "0"]):
        with pytest.raises(SystemExit):
            script.main([str(folder), *bad])
