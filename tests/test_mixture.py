"""Mixtures of environments (`rlvr.mixture.EnvGroup`, the `mix` env): each member plays and
scores its own tasks exactly as it does alone; summaries, batches, eval, gen and train."""

from __future__ import annotations

import asyncio
import csv
import json
import math

import pytest

pytest.importorskip("rlvr_tictactoe")
pytest.importorskip("reverse_text")

from rlvr.check import check_env
from rlvr.cli import main
from rlvr.engine import run_rollouts
from rlvr.errors import UsageError
from rlvr.mixture import EnvGroup
from rlvr.registry import load_environment
from rlvr.sampler import StratifiedSampler, bucket_index
from rlvr.train.protocols import Explorable, Restartable, TurnScored

TTT = {"num_tasks": 12, "eval_tasks": 6, "num_buckets": 3}
REV = {"num_tasks": 5, "eval_tasks": 4}


def members() -> tuple:
    return load_environment("tictactoe", **TTT), load_environment("reverse_text", **REV)


def play(env, client, tasks, rollouts=2):
    async def go():
        try:
            return await run_rollouts(env, client, tasks, rollouts_per_task=rollouts)
        finally:
            await env.aclose()

    return asyncio.run(go())


def test_each_member_scores_its_rollouts_exactly_as_it_does_alone() -> None:
    ttt, rev = members()
    mix = EnvGroup(list(members()))
    tasks = mix.tasks("eval")
    assert [t.id for t in tasks[:4]] == [
        "tictactoe/eval-0",
        "reverse_text/eval-0",
        "tictactoe/eval-1",
        "reverse_text/eval-1",
    ]
    mixed = play(mix, mix.policies()["random+echo"](), tasks)
    alone = {
        (f"tictactoe/{r.task_id}", r.rollout_index): r for r in play(ttt, ttt.policies()["random"](), ttt.tasks("eval"))
    }
    alone |= {
        (f"reverse_text/{r.task_id}", r.rollout_index): r
        for r in play(rev, rev.policies()["echo"](), rev.tasks("eval"))
    }
    assert len(mixed) == len(alone) == 2 * (6 + 4)
    for r in mixed:
        own = alone[(r.task_id, r.rollout_index)]
        assert (r.rewards, r.reward, r.seed, r.stop_reason) == (own.rewards, own.reward, own.seed, own.stop_reason)
        assert [t.completion.text for t in r.turns] == [t.completion.text for t in own.turns]
        assert r.prompt == own.prompt and r.info == own.info
    assert {r.task_id.split("/")[0] for r in mixed} == {"tictactoe", "reverse_text"}
    assert {r.stop_reason for r in mixed} <= {"game_over", "max_turns_reached", "answered"}
    wins = [r.rewards["win_reward"] for r in mixed if r.task_id.startswith("tictactoe/")]
    assert len(set(wins)) > 1  # the random player's moves vary with the seeds: the comparison means something


def test_a_member_samples_with_its_own_settings_unless_the_caller_changed_them() -> None:
    ttt, rev = members()
    mix = EnvGroup({"t": ttt, "r": rev})
    client = object()
    assert mix.member_play(ttt, client, mix.sampling) == (client, ttt.sampling)  # type: ignore[arg-type]
    _, hot = mix.member_play(rev, client, mix.sampling.replace(temperature=0.3, logprobs=True))  # type: ignore[arg-type]
    assert hot == rev.sampling.replace(temperature=0.3, logprobs=True)
    assert ttt.sampling.max_tokens != mix.sampling.max_tokens  # 256 vs 512: the member's own is kept
    mix.max_turns = 2  # what `rlvr train --max-turns` does
    assert ttt.max_turns == rev.max_turns == 2


def test_summary_breaks_down_per_member_with_each_members_own_summary() -> None:
    ttt, rev = members()
    mix = EnvGroup([ttt, rev])
    rollouts = play(mix, mix.policies()["random+oracle"](), mix.tasks("eval"))
    numbers = mix.summarize(rollouts)
    own = ttt.summarize([r for r in rollouts if r.task_id.startswith("tictactoe/")])
    assert own and all(numbers[f"tictactoe/{k}"] == v for k, v in own.items())
    assert numbers["tictactoe/rollouts"] == 12 and numbers["reverse_text/rollouts"] == 8
    assert numbers["reverse_text/lcs_reward"] == 1.0 and numbers["reverse_text/reward"] == 1.0  # the oracle
    ttt_rewards = [r.reward for r in rollouts if r.task_id.startswith("tictactoe/")]
    assert numbers["tictactoe/reward"] == pytest.approx(sum(ttt_rewards) / len(ttt_rewards))
    assert "reverse_text/win %" not in numbers


def test_sampler_stratifies_by_member_then_by_each_members_difficulty() -> None:
    ttt, rev = members()
    mix = EnvGroup([ttt, rev])
    assert mix.num_buckets == 3 + 1
    sampler = StratifiedSampler.for_env(mix, seed=0, tasks_per_bucket=2)
    low, high = ttt.difficulty_range
    for _ in range(4):
        batch = next(sampler)
        assert [t.id.split("/")[0] for t in batch] == ["tictactoe"] * 6 + ["reverse_text"] * 2
        buckets = [bucket_index(ttt.difficulty(mix.member(t)[1]), low, high, 3) for t in batch[:6]]
        assert buckets == [0, 0, 1, 1, 2, 2]


def test_check_env_passes_and_bad_mixtures_are_refused() -> None:
    mix = EnvGroup(list(members()))
    check_env(mix, num_tasks=4)
    with pytest.raises(UsageError, match="unique"):
        EnvGroup([members()[0], members()[0]])
    with pytest.raises(UsageError, match="no '/'"):
        EnvGroup({"a/b": members()[1]})
    with pytest.raises(UsageError, match="MEMBER/ID"):
        mix.member(members()[1].tasks()[0])


def test_eval_mix_through_the_cli_with_a_player_per_member(tmp_path, capsys) -> None:
    out = tmp_path / "run"
    args = json.dumps({"envs": {"tictactoe": TTT, "reverse_text": REV}})
    assert (
        main(["eval", "mix", "-a", args, "-m", "policy:optimal+oracle", "-n", "6", "-r", "2", "-q", "-o", str(out)])
        == 0
    )
    printed = capsys.readouterr().out
    assert "tictactoe/win %" in printed and "reverse_text/lcs_reward" in printed
    rows = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert len(rows) == 12 and {r["task_id"].split("/")[0] for r in rows} == {"tictactoe", "reverse_text"}
    assert all(r["rewards"]["lcs_reward"] == 1.0 for r in rows if r["task_id"].startswith("reverse_text/"))
    assert all(r["rewards"]["win_reward"] >= 0.5 for r in rows if r["task_id"].startswith("tictactoe/"))  # never loses
    assert main(["eval", "mix", "-a", args, "-m", "policy:oracle", "-q", "-o", str(tmp_path / "x")]) == 1
    assert "policy:optimal+oracle" in capsys.readouterr().err


def test_gen_keeps_rollouts_of_every_member(tmp_path) -> None:
    out = tmp_path / "data.jsonl"
    args = json.dumps({"envs": {"tictactoe": TTT, "reverse_text": REV}})
    assert main(["gen", "mix", "-a", args, "-m", "policy:teacher+oracle", "-n", "6", "-q", "-o", str(out)]) == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert sorted({r["task_id"].split("/")[0] for r in rows}) == ["reverse_text", "tictactoe"]
    assert all(r["messages"][-1]["role"] in ("assistant", "user") for r in rows)


@pytest.mark.heavy
def test_train_two_steps_on_a_mixture_on_cpu(tmp_path, capsys, one_thread) -> None:
    pytest.importorskip("torch")
    from rlvr.models import build_tiny_model

    tiny = build_tiny_model(tmp_path / "tiny", preset="tiny", seed=0)
    out = tmp_path / "run"
    env_args = {"envs": {"tictactoe": {**TTT, "num_buckets": 1, "opponent": "random"}, "reverse_text": REV}}
    argv = ["train", "mix", "--model", str(tiny), "--output-dir", str(out), "--steps", "2", "--batch-size", "4"]
    argv += ["--group-size", "2", "--max-tokens", "8", "--max-turns", "2", "--env-args", json.dumps(env_args)]
    argv += ["--eval-every", "2", "--eval-tasks", "2", "--lr", "1e-3"]
    assert main(argv) == 0, capsys.readouterr().err
    rows = list(csv.DictReader((out / "metrics.csv").read_text().splitlines()))
    assert [r["step"] for r in rows] == ["0.0", "1.0", "2.0"]
    last = rows[-1]
    for name in (
        "reward/mean",
        "reward/lcs_reward",
        "reward/win_reward",
        "outcome/tictactoe_reward",
        "outcome/reverse_text_lcs_reward",
        "outcome/tictactoe_win_pct",
        "loss/policy",
        "grad/norm",
    ):
        assert last[name] != "" and math.isfinite(float(last[name])), name
    assert float(last["outcome/tictactoe_rollouts"]) == float(last["outcome/reverse_text_rollouts"]) == 2
    assert float(last["rollout/turns"]) <= 2


def test_a_mixture_restarts_through_the_member_that_played() -> None:
    """The trainer's restart_frac on a mixture: the member's restarts under `NAME/ID`, played by
    that member again; a mixture whose members cannot restart says so."""
    mix = EnvGroup(list(members()))
    assert isinstance(mix, Restartable) and not isinstance(EnvGroup([members()[1]]), Restartable)
    tasks = [t for t in mix.tasks("train") if t.id.startswith("tictactoe/")][:3]
    games = play(mix, mix.policies()["random+echo"](), tasks, rollouts=1)
    restarts = [r for task, game in zip(tasks, games, strict=True) for r in mix.restart_tasks(task, game)]
    assert restarts and all(r.id.startswith("tictactoe/") and "@" in r.id for r in restarts)
    again = play(mix, mix.policies()["random+echo"](), restarts, rollouts=1)
    assert all(r.error is None and r.turns for r in again)
    text = [t for t in mix.tasks("train") if t.id.startswith("reverse_text/")][0]
    assert mix.restart_tasks(text, play(mix, mix.policies()["random+echo"](), [text], rollouts=1)[0]) == []
    # a greedy probe (restart_greedy) is the member's probe of its task, under the mixture's id
    probe = mix.probe_task(tasks[0], seed=12345)
    assert probe.id == tasks[0].id and probe.seed == 12345 and probe.info == tasks[0].info
    # given replies (restart_explore): the member's other replies at its own restart; none elsewhere
    assert isinstance(mix, Explorable) and not isinstance(EnvGroup([members()[1]]), Explorable)
    for restart in restarts:
        member, own = mix.member(restart)
        assert own.id != restart.id and mix.other_replies(restart) == member.other_replies(own) != []
    assert mix.other_replies(text) == []


def test_a_mixture_scores_turns_through_the_member_that_played() -> None:
    """The trainer's turn_credit on a mixture: the member's own turn scores of its task (the
    member's id, not the mixture's); a mixture whose members score no turns says so."""
    ttt, rev = members()
    assert isinstance(EnvGroup([ttt, rev]), TurnScored)  # tic-tac-toe scores its turns (missed wins)
    assert not isinstance(EnvGroup([rev]), TurnScored) and isinstance(EnvGroup([rev]), EnvGroup)

    class Scored(type(ttt)):
        def turn_rewards(self, task, rollout):
            assert "/" not in task.id  # the member's own id
            return [float(i) for i in range(len(rollout.turns))]

    ttt.__class__ = Scored
    mix = EnvGroup([ttt, rev])
    assert isinstance(mix, TurnScored)
    tasks = [t for t in mix.tasks("train") if t.id.startswith("tictactoe/")][:2]
    games = play(mix, mix.policies()["random+echo"](), tasks, rollouts=1)
    assert [mix.turn_rewards(t, g) for t, g in zip(tasks, games, strict=True)] == [
        [float(i) for i in range(len(g.turns))] for g in games
    ]
    text = [t for t in mix.tasks("train") if t.id.startswith("reverse_text/")][0]
    assert mix.turn_rewards(text, play(mix, mix.policies()["random+echo"](), [text], rollouts=1)[0]) is None


def test_a_mixture_pickles_with_its_protocols() -> None:
    import pickle

    mix = EnvGroup(list(members()))
    back = pickle.loads(pickle.dumps(mix))
    assert type(back).__name__ == type(mix).__name__ and list(back.members) == list(mix.members)
    assert [t.id for t in back.tasks()][:5] == [t.id for t in mix.tasks()][:5]


def test_two_members_of_one_environment_from_the_cli(tmp_path, capsys) -> None:
    """`{"NAME": {"env": ENV, ...}}` names a member apart from its environment: two
    reasoning-gym datasets (two configurations of one env) in one mixture."""
    pytest.importorskip("reasoning_gym")
    rg = {"env": "reasoning_gym", "size": 3, "eval_size": 3}
    envs = {"legs": {**rg, "dataset": "leg_counting"}, "words": {**rg, "dataset": "word_sorting"}}
    out = tmp_path / "run"
    argv = ["eval", "mix", "-a", json.dumps({"envs": envs}), "-m", "policy:oracle+guess", "-n", "6", "-r", "1", "-q"]
    assert main([*argv, "-o", str(out)]) == 0
    rows = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    legs = [r["reward"] for r in rows if r["task_id"].startswith("legs/")]
    assert len(rows) == 6 and legs == [1.0] * 3
    assert "legs/reward" in capsys.readouterr().out
    with pytest.raises(Exception, match='give the environment as "env"'):
        load_environment("mix", envs={"legs": {"dataset": "leg_counting"}})


def test_members_on_different_scales_warn_and_normalize_maps_one_onto_0_1() -> None:
    """Taxi's return (8 on average under its planner) beside reverse_text's [0, 1]: the mixture
    says so once; `normalize` maps Taxi's [-20, 20] onto [0, 1], and the warning goes."""
    pytest.importorskip("gymnasium")
    envs = {"taxi": {"env": "gym", "env_id": "Taxi-v4", "num_tasks": 3}, "reverse_text": REV}
    mix = load_environment("mix", envs=envs)
    rollouts = play(mix, mix.policies()["planner+oracle"](), mix.tasks()[:4], rollouts=1)
    taxi = [r.reward for r in rollouts if r.task_id.startswith("taxi/")]
    assert all(r > 4 for r in taxi)
    with pytest.warns(UserWarning, match=r"different scales \(taxi: \d+ to \d+, reverse_text: .*normalize"):
        mix.summarize(rollouts)
    scaled = load_environment("mix", envs=envs, normalize={"taxi": [-20, 20]})
    again = play(scaled, scaled.policies()["planner+oracle"](), scaled.tasks()[:4], rollouts=1)
    assert [r.reward for r in again if r.task_id.startswith("taxi/")] == [(r + 20) / 40 for r in taxi]
    assert [r.rewards for r in again] == [r.rewards for r in rollouts]  # each function's score as it was
    scaled.summarize(again)  # no warning (warnings are errors here)
    assert (
        mix.members["taxi"].rubric.total({"episode_return": 8.0, "format_reward": 0, "invalid_action_rate": 0}) == 8.0
    )
    with pytest.raises(UsageError, match="normalize names 'taxo', which is not a member"):
        load_environment("mix", envs=envs, normalize={"taxo": [0, 1]})
