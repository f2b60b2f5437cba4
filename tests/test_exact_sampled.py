"""Exact evaluation of a sampling policy (`rlvr.exact_sampled`, `rlvr.exact_bounds`).

The scripted players here have known reply distributions; the expected rates are computed by
a recursion over the game written in this file (the env's rules: the start coin, O's opening,
rejected replies shown again, 8 model turns), not by the tree walk under test.
"""

from __future__ import annotations

import asyncio
import functools
import html
import json
import random
from collections import Counter

import pytest
from rlvr_tictactoe.env import load_environment
from rlvr_tictactoe.game import EMPTY_BOARD, apply_move, best_moves, legal_moves, parse_board
from rlvr_tictactoe.players import reply
from rlvr_tictactoe.tasks import game_outcome

from rlvr import Policy
from rlvr.cli import main
from rlvr.exact import enumerate_games
from rlvr.exact_bounds import Bounds, Decision, kl_lower, kl_upper
from rlvr.exact_sampled import Settings, enumerate_sampled
from rlvr.types import SamplingArgs

MAX_TURNS = 8
REJECT = "<think>no move</think>"


def moves_of(board: tuple[str, ...], retry: bool) -> dict[int | None, float]:
    """The scripted player: on a board with at most one mark, at its first try, the first best
    move 0.9, the first non-best move (else the last best) 0.07, a rejected reply 0.03; a
    rejected reply's retry and every later board: the first best move."""
    best = best_moves(board, "X")
    if sum(c != " " for c in board) > 1 or retry:
        return {best[0]: 1.0}
    worse = [m for m in legal_moves(board) if m not in best]
    return {best[0]: 0.9, (worse or best)[-1 if not worse else 0]: 0.07, None: 0.03}


def text(cell: int | None) -> str:
    return REJECT if cell is None else reply(cell, "scripted")


def read(messages: list) -> tuple[tuple[str, ...], bool]:
    last = str(messages[-1].get("content") or "")
    return parse_board(last), last.startswith("Invalid move")


class Distribution:
    """The scripted player as an exact reply distribution (`ReplyDistribution`)."""

    name = "policy:scripted"

    async def reply_distribution(self, messages, sampling, tools=None):
        return [(text(c), p) for c, p in moves_of(*read(messages)).items()]

    async def chat(self, messages, sampling, tools=None):  # pragma: no cover - never asked
        raise AssertionError("an exact distribution is never sampled")

    async def aclose(self) -> None:
        pass


def sampled_player() -> Policy:
    """The scripted player as a sampling client (its draw seeded by the request)."""

    def play(messages, rng: random.Random) -> str:
        dist = moves_of(*read(messages))
        return text(rng.choices(list(dist), weights=list(dist.values()))[0])

    return Policy(play, name="scripted")


def o_probs(board: tuple[str, ...], opponent: str) -> dict[int, float]:
    moves = legal_moves(board) if opponent == "random" else best_moves(board, "O")
    return {m: 1 / len(moves) for m in moves}


@functools.cache
def brute(board: tuple[str, ...], turns: int, rejected: bool, retry: bool, opponent: str) -> dict[str, float]:
    """P(outcome) and P(a rejected reply) from X to move on `board` after `turns` model turns."""
    if turns == MAX_TURNS:
        return {"timeout": 1.0, "rejected": float(rejected)}
    out: dict[str, float] = {}
    for cell, p in moves_of(board, retry).items():
        if cell is None:
            sub = brute(board, turns + 1, True, True, opponent)
        else:
            after = apply_move(board, cell, "X")
            sub = _after_x(after, turns + 1, rejected, opponent)
        for k, v in sub.items():
            out[k] = out.get(k, 0.0) + p * v
    return out


def _after_x(board: tuple[str, ...], turns: int, rejected: bool, opponent: str) -> dict[str, float]:
    if (o := game_outcome(board)) is not None:
        return {o: 1.0, "rejected": float(rejected)}
    out: dict[str, float] = {}
    for cell, q in o_probs(board, opponent).items():
        after = apply_move(board, cell, "O")
        sub = {game_outcome(after): 1.0, "rejected": float(rejected)} if game_outcome(after) else None
        sub = sub or brute(after, turns, rejected, False, opponent)
        for k, v in sub.items():
            out[k] = out.get(k, 0.0) + q * v
    return out


def truth(opponent: str) -> dict[str, float]:
    """The whole game: the start coin, O's opening by the opponent's rule, then the play."""
    out = {k: 0.5 * v for k, v in brute(EMPTY_BOARD, 0, False, False, opponent).items()}
    for cell, q in o_probs(EMPTY_BOARD, opponent).items():
        for k, v in brute(apply_move(EMPTY_BOARD, cell, "O"), 0, False, False, opponent).items():
            out[k] = out.get(k, 0.0) + 0.5 * q * v
    return out


def walk(client, settings: Settings, temperature: float = 1.0):
    env = load_environment(num_tasks=8, eval_tasks=8)
    return asyncio.run(enumerate_sampled(env, client, SamplingArgs(temperature=temperature), settings))


@functools.cache
def exact_walk():
    """The scripted player's exact distributions walked once (two tests read it)."""
    return walk(Distribution(), Settings(min_reach=0.0))


def test_exact_distribution_gives_the_closed_form_rates():
    result = exact_walk()
    table = result.bounds().table(result.opponents, ["win", "draw", "loss", "timeout"])
    for opponent in ("random", "optimal"):
        expected = truth(opponent)
        assert expected.get("loss", 0) > 0.001 and expected["rejected"] > 0.01  # the test can tell
        rates = result.rates(opponent)
        for outcome in ("win", "draw", "loss", "timeout"):
            assert rates.get(outcome, 0.0) == pytest.approx(expected.get(outcome, 0.0), abs=1e-12)
            est, lo, hi = table[opponent][outcome]
            assert lo == pytest.approx(est, abs=1e-12) and hi == pytest.approx(est, abs=1e-12)  # nothing sampled
        assert table[opponent]["rejected"][0] == pytest.approx(expected["rejected"], abs=1e-12)
        assert table[opponent]["covered"][0] == pytest.approx(1.0, abs=1e-12)


def test_risky_decisions_name_the_rejected_and_losing_replies():
    result = exact_walk()
    risky = result.sampled_summary(risky_threshold=0.001)["risky"]["optimal"]
    kinds = {r["kind"] for r in risky}
    assert kinds == {"rejected", "losing"}
    rejected = [r for r in risky if r["kind"] == "rejected"]
    assert all(r["prob"] == pytest.approx(0.03) for r in rejected)
    assert all(r["replies"][0][0] == REJECT for r in rejected)
    assert len(rejected) == 10  # the empty board and the nine openings, each at its first try
    losing = [r for r in risky if r["kind"] == "losing"]
    assert losing and all(r["prob"] == pytest.approx(0.07) for r in losing)


def test_risky_shares_add_up_to_the_closed_form_rates():
    # Every failure of the scripted player is one reply at a game's first decision, so the
    # games its risky decisions cost add up to the rates: rejected 0.03 whoever the opponent;
    # against optimal, the 0.07 worse move after each opening that has one loses every game.
    result = exact_walk()
    summary = result.sampled_summary(risky_threshold=0.001)
    for opponent in ("random", "optimal"):
        rows = summary["risky"][opponent]
        expected = truth(opponent)
        rejected = sum(r["share"] for r in rows if r["kind"] == "rejected")
        assert rejected == pytest.approx(expected["rejected"], abs=1e-12)
        shares = [r["share"] for r in rows]
        assert shares == sorted(shares, reverse=True)  # the costliest first
    losing = sum(r["share"] for r in summary["risky"]["optimal"] if r["kind"] == "losing")
    assert losing == pytest.approx(truth("optimal")["loss"], abs=1e-12)
    first = summary["risky"]["optimal"][0]  # X starts half the games: the empty board's 3% costs 1.5%
    assert first["kind"] == "rejected" and first["share"] == pytest.approx(0.5 * 0.03, abs=1e-12)


def test_a_deterministic_player_gives_the_greedy_numbers():
    env = load_environment(num_tasks=8, eval_tasks=8)
    greedy = asyncio.run(enumerate_games(env, Policy(_first_best, name="first"), SamplingArgs(temperature=0.0)))
    sampled = walk(Policy(_first_best, name="first"), Settings(samples=3), temperature=0.0)
    assert len(sampled.games) == len(greedy.games)
    assert sampled.model_calls == greedy.model_calls
    for opponent in greedy.opponents:
        assert sampled.rates(opponent) == pytest.approx(greedy.rates(opponent), abs=1e-12)
    assert [g.task_id for g in sampled.games] == [g.task_id for g in greedy.games]


def _first_best(messages, rng) -> str:
    board, _ = read(messages)
    return reply(best_moves(board, "X")[0], "first best")


def test_kl_bounds_cover_a_bernoulli_mean_at_their_level():
    rng = random.Random(0)
    misses, trials, delta = 0, 4000, 0.1
    for _ in range(trials):
        p, k = rng.choice([0.0, 0.01, 0.2, 0.5, 0.97]), rng.choice([1, 8, 64])
        mean = sum(rng.random() < p for _ in range(k)) / k
        misses += not (kl_lower(mean, k, delta) <= p <= kl_upper(mean, k, delta))
    assert misses / trials <= 2 * delta  # each side misses at most delta
    assert kl_upper(0.0, 64, 0.05) < kl_upper(0.0, 8, 0.05)


# A two-level tree of known reply probabilities, for the bounds' coverage: the root decision
# (weight 1) has three replies; reply 0 leads to a second decision with two replies; the others
# end the game. Outcome 1 = "loss".
ROOT = [0.9, 0.08, 0.02]
SECOND = [0.995, 0.005]
ENDS = {(0, 0): "draw", (0, 1): "loss", 1: "draw", 2: "loss"}  # (reply at root, reply at second) or root reply


def synthetic(k: int, rng: random.Random) -> Bounds:
    def draw(probs: list[float]) -> tuple[list[int], list[float]]:
        counts = Counter(rng.choices(range(len(probs)), weights=probs, k=k))
        seen = sorted(counts)
        return seen, [counts[j] / k for j in seen]

    weights = {"o": 1.0}
    root_seen, root_p = draw(ROOT)
    decisions = [Decision(0, "", weights, 1.0, [str(j) for j in root_seen], root_p, samples=k)]
    games = []
    for i, j in enumerate(root_seen):
        if j != 0:
            games.append({"path": [[0, i]], "line_weights": weights, "outcome": ENDS[j]})
            continue
        seen, p = draw(SECOND)
        decisions.append(Decision(1, "", weights, root_p[i], [str(m) for m in seen], p, samples=k))
        games += [
            {"path": [[0, i], [1, a]], "line_weights": weights, "outcome": ENDS[(0, m)]} for a, m in enumerate(seen)
        ]
    return Bounds(decisions, games, delta=0.05)


def test_sampled_bounds_cover_the_truth_and_shrink_with_k():
    true_loss = ROOT[0] * SECOND[1] + ROOT[2]
    rng = random.Random(1)
    widths = {}
    for k in (64, 1024):
        misses = 0
        for _ in range(300):
            bounds = synthetic(k, rng)
            est, lo, hi = bounds.table(["o"], ["draw", "loss"])["o"]["loss"]
            misses += not lo <= true_loss <= hi
            widths.setdefault(k, []).append(hi - lo)
        assert misses <= 300 * 0.05  # the stated confidence, 95% (it is conservative: expect none)
    assert max(widths[1024]) < min(widths[64]) < 1.0


def test_a_sampled_walk_estimates_the_rates_of_its_draws():
    result = walk(sampled_player(), Settings(samples=4, seed=3))
    table = result.bounds().table(result.opponents, ["win", "draw", "loss", "timeout"])
    expected = truth("optimal")
    for name, (est, lo, hi) in table["optimal"].items():
        if name != "covered":
            assert lo <= expected.get(name, 0.0) <= hi
    assert result.samples_drawn == 4 * len(result.decisions)
    assert all(d.samples == 4 and sum(d.probs) == pytest.approx(1.0) for d in result.decisions)


def test_cli_saves_a_sampled_run_and_the_report_draws_its_risky_boards(tmp_path, capsys):
    out = tmp_path / "run"
    args = ["eval", "tictactoe", "-m", "policy:teacher", "--exhaustive", "-T", "1", "--samples", "1", "-q"]
    assert main([*args, "--tail-games", "8", "-o", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "--tail-games: none drawn (the decisions were sampled" in printed
    assert "the costliest first" in printed and "% of games vs" in printed  # what each risky one costs
    meta = json.loads((out / "metadata.json").read_text())
    sampled = meta["exact"]["sampled"]
    assert sampled["samples"] == 1 and sampled["decisions"] == meta["exact"]["model_calls"] > 0
    assert sampled["risky"]["optimal"]  # the teacher falls for fork traps
    assert main(["report", str(out)]) == 0
    page = (out / "report.html").read_text()
    assert "Exact evaluation of the sampling policy" in page and "Risky decisions" in page
    assert "Unbeatable" not in page and "no sampling" not in page  # estimates, not the greedy walk's claims
    board = sampled["risky"]["optimal"][0]["board"]
    assert html.escape(board.splitlines()[-1]) in page  # the board as the model saw it
    assert "% of games vs" in page
    # a run saved before `share` was recorded shows the same costs; a hand-edited one, none
    spoilt = meta["exact"]["sampled"]["risky"]["optimal"][0]["decision"]
    for rows in meta["exact"]["sampled"]["risky"].values():
        for row in rows:
            del row["share"]
            if row["decision"] == spoilt:
                row["reach"] = "n/a"
    (out / "metadata.json").write_text(json.dumps(meta))
    assert main(["report", str(out)]) == 0
    assert (out / "report.html").read_text().count("% of games vs") == page.count("% of games vs") - 1


def test_greedy_exhaustive_is_unchanged_at_temperature_0(tmp_path):
    out = tmp_path / "greedy"
    assert main(["eval", "tictactoe", "-m", "policy:limit", "--exhaustive", "-q", "-o", str(out)]) == 0
    meta = json.loads((out / "metadata.json").read_text())
    assert "sampled" not in meta["exact"] and meta["exact"]["unbeatable"]


def test_resume_of_a_complete_sampled_run_plays_nothing(tmp_path, capsys):
    out = tmp_path / "run"
    args = [
        "eval",
        "tictactoe",
        "-m",
        "policy:limit",
        "--exhaustive",
        "-T",
        "1",
        "--samples",
        "1",
        "-q",
        "-o",
        str(out),
    ]
    assert main(args) == 0
    before = (out / "results.jsonl").read_text()
    capsys.readouterr()
    assert main([*args, "--resume"]) == 0
    assert "nothing played" in capsys.readouterr().out
    assert (out / "results.jsonl").read_text() == before
    assert (
        len((out / "decisions.jsonl").read_text().splitlines())
        == json.loads((out / "metadata.json").read_text())["exact"]["sampled"]["decisions"]
    )


def test_draws_in_proportion_to_reach_tighten_the_bound_for_fewer_draws():
    even = walk(sampled_player(), Settings(samples=32, seed=4))
    by_reach = walk(sampled_player(), Settings(samples=2, per_reach=256, seed=4))
    assert by_reach.samples_drawn < even.samples_drawn
    root = next(d for d in by_reach.decisions if d.reach == 1.0 and max(d.weights.values()) == 0.5)
    assert root.samples == 128  # reached with probability 1/2 (the model starts)
    widths = []
    for result in (even, by_reach):
        est, lo, hi = result.bounds().table(result.opponents, ["win", "draw", "loss", "timeout"])["optimal"]["loss"]
        widths.append(hi - lo)
    assert widths[1] < widths[0]


class BadDistribution(Distribution):
    """A client whose distribution is not one: NaN, or more than all of the mass."""

    def __init__(self, probs):
        self.probs = probs

    async def reply_distribution(self, messages, sampling, tools=None):
        return [(f"<think>x</think>\n<move>{i}</move>", p) for i, p in enumerate(self.probs)]


@pytest.mark.parametrize("probs", [[float("nan"), 0.5], [0.7, 0.6], [-0.1, 0.5]])
def test_a_reply_distribution_that_is_not_one_is_refused(probs):
    result = walk(BadDistribution(probs), Settings(min_reach=0.0))  # each game an error record, as in any walk
    assert result.games and all("ClientError" in (g.error or "") for g in result.games)
    assert all("reply_distribution gave probabilities" in (g.error or "") for g in result.games)


class InFlight:
    """`client`, recording the most requests it held at once."""

    def __init__(self, client) -> None:
        self.client, self.name, self.now, self.most = client, client.name, 0, 0

    async def chat(self, messages, sampling, tools=None):
        self.now += 1
        self.most = max(self.most, self.now)
        try:
            await asyncio.sleep(0.001)  # a model takes time: let the other draws arrive
            return await self.client.chat(messages, sampling, tools)
        finally:
            self.now -= 1

    async def aclose(self) -> None:
        pass


def test_draws_in_flight_stay_within_the_concurrency() -> None:
    client = InFlight(sampled_player())
    result = walk(client, Settings(samples=16, concurrency=4, min_reach=1e-3))
    assert result.games and client.most == 4  # 16 draws a decision, many decisions open: 4 at a time


def test_opponent_lines_that_ended_unplayed_count_on_the_upper_side() -> None:
    """A reply whose opponent lines left only some records (the others ended unplayed further
    down: pruned, or unlisted by an exact distribution), and a root line with no record at all:
    their weight is unknown, so it is on the upper side of every number, not lost."""
    root = Decision(0, "", {"o": 0.7}, 1.0, ["a"], [1.0])
    games = [
        {"path": [[0, 0]], "line_weights": {"o": 0.35}, "outcome": "win"},
        {"path": [[0, 0]], "line_weights": {"o": 0.2}, "outcome": "loss"},
    ]  # 0.15 after the reply and the other root line's 0.3 have no record
    bounds = Bounds([root], games, 0.05)
    assert bounds.value("o", lambda g: g["outcome"] == "win", 0.01) == pytest.approx((0.35, 0.35, 0.8))
    assert bounds.value("o", lambda g: g["outcome"] == "loss", 0.01) == pytest.approx((0.2, 0.2, 0.65))


class FlooredDistribution(Distribution):
    """The scripted distribution, taking the walk's floor (and recording it)."""

    def __init__(self) -> None:
        self.floors: list[float] = []

    async def reply_distribution(self, messages, sampling, tools=None, *, floor=0.0):
        self.floors.append(floor)
        return await super().reply_distribution(messages, sampling, tools)


def test_the_walk_passes_each_decision_its_floor_and_samples_when_told_not_to_enumerate():
    """A client whose `reply_distribution` takes `floor` gets min_reach over the decision's
    reach (policy probability x the opponent's largest line weight); one without it still
    works (the other tests); `enumerate=False` draws from a client that has both."""
    floored = FlooredDistribution()
    result = walk(floored, Settings(min_reach=1e-3))
    want = [1e-3 / (d.reach * max(d.weights.values())) for d in result.decisions]
    assert sorted(floored.floors) == pytest.approx(sorted(want))
    assert min(floored.floors) == pytest.approx(1e-3 / 0.5)  # the empty board: X first, half the games

    class Both(Distribution):
        async def chat(self, messages, sampling, tools=None):
            return await sampled_player().chat(messages, sampling, tools)

    sampled = walk(Both(), Settings(samples=4, enumerate=False, min_reach=1e-3))
    assert sampled.samples_drawn > 0 and all(d.samples == 4 for d in sampled.decisions)
    assert not any(d.samples for d in walk(Both(), Settings(min_reach=1e-3)).decisions)
