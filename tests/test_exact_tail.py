"""The tail of an exact walk, sampled (`rlvr.exact_tail`, `--tail-games`).

The scripted player of `test_exact_sampled` lists only part of its distribution here (its 3%
rejected reply unlisted), while `chat` draws from all of it: the walk plays the listed part
exactly, and the tail games must bring each number's interval around the closed-form truth,
narrower than the whole unplayed mass on the upper side.
"""

from __future__ import annotations

import pytest
from test_exact_sampled import Distribution, sampled_player, truth, walk

from rlvr.exact_bounds import Bounds
from rlvr.exact_sampled import Settings
from rlvr.exact_tail import Tail, exits, tighten
from rlvr.types import Completion

NUMBERS = ("win", "draw", "loss", "rejected")


class Partial(Distribution):
    """Lists only the replies of probability >= `cut`; `chat` draws from the whole distribution."""

    def __init__(self, cut: float = 0.05, listed_only: bool = False) -> None:
        self.cut, self.listed_only, self.draws = cut, listed_only, 0

    async def reply_distribution(self, messages, sampling, tools=None):
        return [(t, p) for t, p in await super().reply_distribution(messages, sampling, tools) if p >= self.cut]

    async def chat(self, messages, sampling, tools=None):
        self.draws += 1
        if self.listed_only:  # a model whose unlisted replies never come
            return Completion(text=(await self.reply_distribution(messages, sampling, tools))[0][0])
        return await sampled_player().chat(messages, sampling, tools)


def _table(result):
    return result.sampled_summary()["bounds_pct"]


def test_tail_games_bound_the_unlisted_mass_around_the_truth() -> None:
    plain = walk(Partial(), Settings(min_reach=0.0))
    tailed = walk(Partial(), Settings(min_reach=0.0, tail_games=400, seed=3))
    for opponent in ("random", "optimal"):
        expected = truth(opponent)
        missing = sum(plain.bounds().missing(opponent).values())
        assert 0.01 < missing < 0.05  # the 3% reply at the first decisions, unlisted
        tail = tailed.tails[opponent]
        assert tail.games == 400 and tail.unknown == 0 and tail.tries >= 400
        assert tail.mass == pytest.approx(missing, rel=1e-9)
        old, new = _table(plain)[opponent], _table(tailed)[opponent]
        for name in NUMBERS:
            truth_pct = 100 * expected.get(name, 0.0)
            est, lo, hi = new[name]
            assert lo - 1e-9 <= truth_pct <= hi + 1e-9, (opponent, name, new[name], truth_pct)
            assert hi - lo < 0.5 * (old[name][2] - old[name][1]), (name, old[name], new[name])
        # every tail game starts with the unlisted (rejected) reply: all of them have one
        assert tail.hits["rejected"] == 400
        assert new["rejected"][1] == pytest.approx(100 * expected["rejected"], abs=0.05)


def test_tail_bounds_cover_the_truth_over_seeds() -> None:
    """Few tail games, many seeds: the intervals hold at their level (a miss in 8 runs of 4
    numbers x 2 opponents at delta 0.05 would be rare)."""
    misses = 0
    for seed in range(8):
        result = walk(Partial(), Settings(min_reach=0.0, tail_games=24, seed=seed))
        table = _table(result)
        for opponent in ("random", "optimal"):
            expected = truth(opponent)
            for name in NUMBERS:
                _, lo, hi = table[opponent][name]
                misses += not lo - 1e-9 <= 100 * expected.get(name, 0.0) <= hi + 1e-9
    assert misses <= 1


def test_pruned_replies_are_played_as_they_are() -> None:
    """With min_reach above the 3% reply's reach, it is listed but not played: the tail plays it
    without drawing `chat` (the full distribution is listed, so nothing is unlisted)."""
    client = Partial(cut=0.0)
    result = walk(client, Settings(min_reach=0.02, tail_games=200, seed=1))
    tail = result.tails["optimal"]
    assert tail.mass > 0.005 and tail.tries == 0 and tail.unknown == 0
    assert all(part[2] is not None for part in exits(result.decisions, "optimal"))
    draws = client.draws  # only the games after the pruned replies draw (one draw a decision)
    assert draws > 0
    for name in NUMBERS:
        _, lo, hi = _table(result)["optimal"][name]
        assert lo - 1e-9 <= 100 * truth("optimal").get(name, 0.0) <= hi + 1e-9


def test_a_tail_whose_replies_never_come_keeps_the_worst_case() -> None:
    result = walk(Partial(listed_only=True), Settings(min_reach=0.0, tail_games=8, seed=0))
    tail = result.tails["random"]
    assert tail.unknown == 8 and tail.tries == 8 * 4096
    plain = walk(Partial(), Settings(min_reach=0.0))
    for name in NUMBERS:
        lo, hi = _table(result)["random"][name][1:], _table(plain)["random"][name][1:]
        assert lo[1] == pytest.approx(hi[1], abs=1e-9)  # no better than the whole mass on top


def test_tighten_adds_the_share_with_its_kl_bound() -> None:
    table = {"o": {"loss": (0.01, 0.01, 0.06), "covered": (0.95, 0.95, 0.95)}}
    tail = Tail(0.05, games=100, hits={"loss": 0})
    out = tighten(table, {"o": tail}, 0.05)
    est, lo, hi = out["o"]["loss"]
    assert est == pytest.approx(0.01) and lo == pytest.approx(0.01)
    assert hi == pytest.approx(0.01 + 0.05 * (1 - (0.05 / 2) ** (1 / 100)), rel=1e-6)  # the zero-count bound
    assert out["o"]["covered"] == table["o"]["covered"]


def test_exits_sum_to_the_missing_mass() -> None:
    result = walk(Partial(), Settings(min_reach=3e-3))
    bounds: Bounds = result.bounds()
    for opponent in ("random", "optimal"):
        mass = sum(p[0] for p in exits(result.decisions, opponent))
        assert mass == pytest.approx(sum(bounds.missing(opponent).values()), rel=1e-9)
        covered = bounds.table([opponent], ["win", "draw", "loss"])[opponent]["covered"][0]
        assert mass == pytest.approx(1 - covered, abs=1e-9)


def test_the_report_says_how_the_tail_was_bounded() -> None:
    from rlvr.report.exact_sampled import sampled_section

    result = walk(Partial(), Settings(min_reach=0.0, tail_games=16, seed=2))
    page = "".join(sampled_section({"exact": {"sampled": result.sampled_summary()}}))
    assert "bounded by games drawn from it" in page and "Tail vs optimal: 16 games drawn" in page
    plain = "".join(sampled_section({"exact": {"sampled": walk(Partial(), Settings()).sampled_summary()}}))
    assert "counted on the upper side of every bound" in plain and "Tail vs" not in plain


def test_each_tail_game_is_reported_as_it_ends() -> None:
    import asyncio

    from rlvr_tictactoe.env import load_environment

    from rlvr.exact_sampled import enumerate_sampled
    from rlvr.types import SamplingArgs

    seen: list[tuple[str, int]] = []
    env = load_environment(num_tasks=8, eval_tasks=8)
    settings = Settings(min_reach=0.0, tail_games=5)
    asyncio.run(
        enumerate_sampled(
            env, Partial(), SamplingArgs(temperature=1.0), settings, on_tail=lambda o, t: seen.append((o, t.games))
        )
    )
    assert sorted(seen) == sorted((o, k) for o in ("optimal", "random") for k in range(1, 6))


def test_the_same_seed_draws_the_same_tail_whatever_order_the_decisions_came_in() -> None:
    """The walk numbers its decisions as their replies come (a local model's batches decide
    that): the tail's draw must not depend on it."""
    import asyncio
    import random

    from test_exact_sampled import load_environment

    from rlvr.exact_tail import sample_tail
    from rlvr.types import SamplingArgs

    result = walk(Partial(), Settings(min_reach=3e-3))
    shuffled = list(result.decisions)
    random.Random(1).shuffle(shuffled)

    def tail(decisions):
        env, sampling = load_environment(num_tasks=8, eval_tasks=8), SamplingArgs(temperature=1.0)
        outcomes = ["win", "draw", "loss"]
        return asyncio.run(
            sample_tail(env, Partial(), sampling, decisions, result.contexts, ("optimal",), outcomes, 64, seed=4)
        )["optimal"]

    a, b = tail(result.decisions), tail(shuffled)
    assert a.to_dict() == b.to_dict() and a.games == 64


def test_a_resumed_tail_takes_the_games_an_earlier_run_played_from_the_same_exits(tmp_path) -> None:
    """Each tail game is written as it ends; a second run given those records draws nothing for
    the games they hold, plays the rest (and any whose exit differs, or that was not had), and
    ends with the same tail."""
    import asyncio

    from test_exact_sampled import load_environment

    from rlvr.exact_tail import TailRecords, sample_tail
    from rlvr.types import SamplingArgs

    result = walk(Partial(), Settings(min_reach=3e-3))

    def tail(records, client):
        env, sampling = load_environment(num_tasks=8, eval_tasks=8), SamplingArgs(temperature=1.0)
        return asyncio.run(
            sample_tail(
                env, client, sampling, result.decisions, result.contexts, ("optimal", "random"), NUMBERS, 32,
                seed=2, records=records,
            )
        )  # fmt: skip

    written: list[dict] = []
    first = tail(TailRecords(write=written.append), Partial())
    assert len(written) == 64 and all(r["leaf"] is not None for r in written)
    client = Partial()
    again = tail(TailRecords({(r["opponent"], r["game"]): r for r in written}), client)
    assert client.draws == 0 and again == first
    kept = {(r["opponent"], r["game"]): r for r in written[:40]}
    kept[written[0]["opponent"], written[0]["game"]] = {**written[0], "exit": "elsewhere"}
    kept[written[1]["opponent"], written[1]["game"]] = {**written[1], "leaf": None}
    more: list[dict] = []
    client = Partial()
    assert tail(TailRecords(kept, more.append), client) == first
    assert len(more) == 64 - 40 + 2 and client.draws > 0


def test_tail_records_survive_a_line_cut_by_a_kill(tmp_path) -> None:
    from rlvr.commands.exact_sampled import tail_records

    path = tmp_path / "tail.jsonl"
    path.write_text('{"opponent": "optimal", "game": 0, "exit": "a", "leaf": {"outcome": "draw"}, "tries": 1}\n{"oppo')
    with tail_records(path, resume=True, games=4) as kept:
        assert list(kept.done) == [("optimal", 0)]
        kept.write({"opponent": "optimal", "game": 1, "exit": "b", "leaf": None, "tries": 0})
    with tail_records(path, resume=True, games=4) as kept:
        assert sorted(kept.done) == [("optimal", 0), ("optimal", 1)]
    with tail_records(path, resume=False, games=4) as kept:
        assert kept.done == {}
    with tail_records(path, resume=False, games=0) as kept:
        assert kept is None and not path.exists()


@pytest.mark.heavy  # two walks of the shipped model (~30 s on a busy CPU; make test-heavy)
def test_a_killed_tail_resumes_with_the_games_it_had_played(tmp_path) -> None:
    """`rlvr eval --exhaustive -T 1 --tail-games N` writes each tail game to tail.jsonl as it
    ends. A run killed in its tail (here: the file cut to three games and half a line, the run
    left interrupted) resumes with those three as they were written: one of them edited to a
    loss shows up as a lost tail game, which the shipped model's own draw does not give."""
    import json

    from rlvr.cli import main

    out = tmp_path / "run"
    args = ["eval", "tictactoe", "--exhaustive", "-T", "1", "--min-reach", "0.05", "--tail-games", "4", "-q"]
    assert main([*args, "-o", str(out)]) == 0
    lines = (out / "tail.jsonl").read_text().splitlines()
    assert len(lines) == 8
    first = json.loads((out / "metadata.json").read_text())["exact"]["sampled"]["tail"]
    records = [json.loads(line) for line in lines]
    kept = [r for r in records if r["opponent"] == "optimal"][:3]
    assert all(r["leaf"]["outcome"] != "loss" for r in kept) and first["optimal"]["hits"]["loss"] == 0
    kept[0]["leaf"]["outcome"] = "loss"
    (out / "tail.jsonl").write_text("".join(json.dumps(r) + "\n" for r in kept) + '{"opponent": "rand')
    meta = json.loads((out / "metadata.json").read_text())
    (out / "metadata.json").write_text(json.dumps({**meta, "status": "interrupted"}))
    assert main([*args, "-o", str(out), "--resume"]) == 0
    again = json.loads((out / "metadata.json").read_text())["exact"]["sampled"]["tail"]
    assert again["optimal"]["hits"]["loss"] == 1 and again["optimal"]["games"] == 4
    mass = again["random"].pop("mass")  # (float sums over batched forwards: the same to rounding)
    assert mass == pytest.approx(first["random"].pop("mass"), rel=1e-9)
    assert again["random"] == first["random"]  # played again, the same games (seeded)
    written = [line for line in (out / "tail.jsonl").read_text().splitlines() if line.endswith("}")]
    assert len(written) == 3 + 5
