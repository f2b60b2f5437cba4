"""experiments/tictactoe/regret.py: where a deterministic player gives up wins against the random
opponent, by decision, by kind and by symmetry, from the tree or from a saved exhaustive run."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import math
from pathlib import Path

import pytest
from exact_players import GREEDY, as_policy, exact, first_best
from rlvr_tictactoe import load_environment, tree
from rlvr_tictactoe.game import EMPTY_BOARD, apply_move, legal_moves, parse_board

from rlvr import Policy
from rlvr.cli import main
from rlvr.engine import run_rollouts
from rlvr.exact import enumerate_games
from rlvr.results import json_line


def gap_script():
    spec = importlib.util.spec_from_file_location(
        "gaps", Path(__file__).parents[3] / "experiments" / "tictactoe" / "regret.py"
    )
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    return script


def saved(games, folder: Path) -> Path:
    folder.mkdir()
    (folder / "results.jsonl").write_bytes(b"".join(json_line(g.to_dict()) for g in games))
    return folder


def test_the_gap_script_values_positions_as_training_games_score_them():
    """regret.py's training view: `value` is what a training game scores (win 1, draw
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
        monkeypatch.setattr("sys.argv", ["regret.py", str(path), "--top", "3"])
        return script.main()

    capsys.readouterr()
    assert run(out) == 0 and "limit 95.56%" in capsys.readouterr().out
    rows = script.symmetry_view(gaps, policy)  # every decision in one class; the classes add up
    assert sum(r[1] for r in rows) == len(gaps) and len(rows) < len(gaps)
    assert math.isclose(sum(r[0] for r in rows), sum(g.weighted for g in gaps), abs_tol=1e-12)
    assert all(0 < wrong <= seen <= 8 for _, _, wrong, seen, _ in rows)
    monkeypatch.setattr("sys.argv", ["regret.py", str(out), "--by-symmetry"])
    assert (
        script.main() == 0 and f"{len(gaps)} decisions, {len(rows)} positions up to symmetry" in capsys.readouterr().out
    )
    monkeypatch.setattr("sys.argv", ["regret.py", str(out), "--by-kind", "--top", "0"])
    assert script.main() == 0 and "by what was on the board" in capsys.readouterr().out
    monkeypatch.setattr("sys.argv", ["regret.py", str(out), "--train-p", "0.7", "--top", "2"])
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
    monkeypatch.setattr("sys.argv", ["regret.py", str(out), "--claims"])
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
    monkeypatch.setattr("sys.argv", ["regret.py", str(out), "--train-p", "0.7", "--unsure", "0.9"])
    capsys.readouterr()
    assert script.main() == 0
    printed = capsys.readouterr().out  # every recorded reply had probability exp(-0.5) < 0.9
    assert "have a greedy reply below 0.9" in printed and "a greedy probe game meets them" in printed
    for bad in (["--unsure", "0.5"], ["--train-p", "0.7", "--unsure", "0"], ["--train-p", "0.7", "--unsure", "nan"]):
        monkeypatch.setattr("sys.argv", ["regret.py", str(out), *bad])
        with pytest.raises(SystemExit):
            script.main()
    for bad in (["--train-p", "nan"], ["--train-p", "1.5"], ["--trap-prob", "-1", "--train-p", "0"], ["--games", "0"]):
        monkeypatch.setattr("sys.argv", ["regret.py", str(out), *bad])
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
    monkeypatch.setattr("sys.argv", ["regret.py", str(tmp_path / "timeouts"), "--by-kind", "--train-p", "0.7"])
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
