"""scripts/tictactoe_gpus.sh's plans, wired to a stand-in pipeline: which GPU and settings each
run gets, and that a plan it cannot run is refused at once with its reason and a non-zero status.

The stand-in `scripts/reproduce_tictactoe.sh` (in a copy of the scripts folder) only writes the
variables the real one reads (RL2_RESTART_BELOW, MISSED_WIN_PENALTY, TURN_CREDIT, RL2_TURN_CREDIT and RL2_KEEP_BEST
to files of their own), and the SFT model's marker file the later variants wait for (not where the first phase is
there already, restored: the real one skips SFT then). The real pipeline runs once, with `rlvr` a
stand-in that logs its calls.
"""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FAKE = """\
echo "GPU=$CUDA_VISIBLE_DEVICES SEED=$SEED RL=$RL_NAME STEPS=$RL_STEPS K=${RESTART_EXPLORE:-} P=${RL_MIN_P:-}-${RL_MAX_P:-} B=${BUCKETS:-} RL2=$RL2_STEPS P2=${RL2_MIN_P:-}-${RL2_MAX_P:-} B2=${RL2_BUCKETS:-} LR2=${RL2_LR:-} EVERY=${EVAL_EVERY:-} KEEP=${KEEP_BEST:-} TEACHER=${TEACHER:-} STAGES=$EVAL_STAGES"
echo "${RL2_RESTART_BELOW:-}" > "$OUT_DIR/$RL_NAME.restart_below2"
echo "${MISSED_WIN_PENALTY:-}" > "$OUT_DIR/$RL_NAME.missed_win_penalty"
echo "${TURN_CREDIT:-}" > "$OUT_DIR/$RL_NAME.turn_credit"
echo "${RL2_TURN_CREDIT:-}" > "$OUT_DIR/$RL_NAME.turn_credit2"
echo "${RL2_KEEP_BEST:-}" > "$OUT_DIR/$RL_NAME.keep2"
[ -f "$OUT_DIR/$RL_NAME/final/config.json" ] || { mkdir -p "$OUT_DIR/sft/final"; touch "$OUT_DIR/sft/final/config.json"; }
[ -e "$OUT_DIR/$RL_NAME" ] || { mkdir -p "$OUT_DIR/$RL_NAME/final"; touch "$OUT_DIR/$RL_NAME/final/config.json"; }
"""

KEEP = "min:exact/beaten_games,max:exact/random/win_pct"  # the best RL model: fewest lost games, then most wins
KEEP_SHIP = "min:exact/beaten_games,min:exact/rejected_move_games,max:exact/random/win_pct"

pytestmark = pytest.mark.skipif(shutil.which("setsid") is None, reason="needs setsid (util-linux)")


def _gpus(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """`tictactoe_gpus.sh ARGS` in a copy of the scripts folder, the pipeline the stand-in."""
    scripts = tmp_path / "scripts"
    if not scripts.exists():
        scripts.mkdir()
        shutil.copy(ROOT / "scripts" / "tictactoe_gpus.sh", scripts)
        (scripts / "reproduce_tictactoe.sh").write_text(FAKE)
    return subprocess.run(
        ["bash", "scripts/tictactoe_gpus.sh", *args],
        cwd=tmp_path,
        env=os.environ | {"RUNS": "runs/plan"} | env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def _start(tmp_path: Path, plan: str, **env: str) -> subprocess.CompletedProcess[str]:
    return _gpus(tmp_path, "start", plan, **env)


def _logs(tmp_path: Path) -> dict[str, str]:
    runs = tmp_path / "runs" / "plan"
    deadline = time.monotonic() + 30
    while (tmp_path / "runs" / "plan.pid").exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    return {str(p.relative_to(runs)): p.read_text().strip() for p in sorted(runs.glob("*/pipeline-*.log"))}


def _plan_logs(tmp_path: Path, plan: str, **env: str) -> dict[str, str]:
    """Start `plan` (it must start), and its pipeline logs once every job is under way."""
    proc = _start(tmp_path, plan, **env)
    assert proc.returncode == 0, proc.stderr
    return _logs(tmp_path)


def test_each_seed_runs_on_the_gpu_named_for_it(tmp_path: Path) -> None:
    proc = _start(tmp_path, "given4", SEEDS="1 2", SEED_GPUS="0 1")
    assert proc.returncode == 0, proc.stderr
    assert "started plan given4" in proc.stdout
    logs = _logs(tmp_path)
    assert list(logs) == ["s1/pipeline-rlGX.log", "s2/pipeline-rlGX.log"]
    assert logs["s1/pipeline-rlGX.log"].startswith("GPU=0 SEED=1 RL=rlGX STEPS=400 K=2 P=-0.0 B=1 RL2=0")
    assert logs["s2/pipeline-rlGX.log"].startswith("GPU=1 SEED=2 RL=rlGX STEPS=400 K=2 P=-0.0 B=1 RL2=0")


def test_the_wins_phase_follows_the_weak_start(tmp_path: Path) -> None:
    proc = _start(tmp_path, "weakwins", SEEDS="0", SEED_GPUS="1", WEAK_STEPS="7")
    assert proc.returncode == 0, proc.stderr
    (log,) = _logs(tmp_path).values()
    assert log.startswith("GPU=1 SEED=0 RL=rlGX STEPS=7 K=2 P=-0.0 B=1 RL2=100 P2=0.7-0.7 B2=1 ")
    assert log.endswith("STAGES=base sft rlGX rlGX2 rlGX.best rlGX2.best")


def test_the_wins_phase_can_keep_perfect_opponents(tmp_path: Path) -> None:
    proc = _start(tmp_path, "weakwins", SEEDS="2", SEED_GPUS="0", WINS_MIN_P="0", WINS_BUCKETS="8")
    assert proc.returncode == 0, proc.stderr
    (log,) = _logs(tmp_path).values()
    assert log.startswith("GPU=0 SEED=2 RL=rlGX STEPS=300 K=2 P=-0.0 B=1 RL2=100 P2=0-0.7 B2=8 ")


def test_two_second_phases_share_one_first_phase(tmp_path: Path) -> None:
    logs = _plan_logs(tmp_path, "weakwins2", SEEDS="2", SEED_GPUS="0")
    assert list(logs) == ["s2/pipeline-rlGX.log", "s2/pipeline-rlGY.log"]
    first, second = logs["s2/pipeline-rlGX.log"], logs["s2/pipeline-rlGY.log"]
    assert first.startswith("GPU=0 SEED=2 RL=rlGX STEPS=300 K=2 P=-0.0 B=1 RL2=100 P2=0-0.7 B2=8 LR2=1e-5 ")
    assert first.endswith("STAGES=base sft rlGX rlGX2 rlGX.best rlGX2.best")
    assert second.startswith("GPU=0 SEED=2 RL=rlGY STEPS=300 K=2 P=-0.0 B=1 RL2=100 P2=0.7-0.7 B2=1 LR2=1e-5 ")
    assert second.endswith("STAGES=rlGY2 rlGY2.best")  # its phase 1 is rlGX's, evaluated there
    link = tmp_path / "runs" / "plan" / "s2" / "rlGY"
    assert link.is_symlink() and os.readlink(link) == "rlGX"
    for run in ("rlGX", "rlGY"):  # the second phases keep the most wins with the draws held
        keep2 = (tmp_path / "runs" / "plan" / "s2" / f"{run}.keep2").read_text().strip()
        assert keep2 == "exact/optimal/draw_pct>=97,max:exact/random/win_pct"


def test_a_second_phase_kept_by_its_own_rule_is_evaluated_as_a_stage(tmp_path: Path) -> None:
    """RL2_KEEP_BEST without KEEP_BEST (plan recipe keeps no best): phase 2's kept best is a stage
    of its own, phase 1 has none."""
    logs = _plan_logs(tmp_path, "recipe", SEEDS="0", RL2_KEEP_BEST="max:exact/random/win_pct")
    assert logs["s0/pipeline-rl.log"].endswith("STAGES=sft rl rl2 rl2.best")
    assert logs["s0/pipeline-rlR.log"].endswith("STAGES=rlR")  # no phase 2 there


def test_the_weak_start_takes_the_teacher_named_outside_the_plan(tmp_path: Path) -> None:
    """TEACHER=limit before `start weakwins2`: its 200 SFT games are the limit player's (the plan
    sets no teacher, so both runs' pipelines read it, and the second waits for that SFT model)."""
    logs = _plan_logs(tmp_path, "weakwins2", SEEDS="2", SEED_GPUS="0", TEACHER="limit")
    assert [log.split(" TEACHER=")[1].split(" ")[0] for log in logs.values()] == ["limit", "limit"]


def test_the_weak_wins_plan_without_its_second_wins_phase_fits_two_seeds_a_gpu(tmp_path: Path) -> None:
    logs = _plan_logs(tmp_path, "weakwins2", SEEDS="4 5", SEED_GPUS="0 0", OTHER="")
    assert list(logs) == ["s4/pipeline-rlGX.log", "s5/pipeline-rlGX.log"]  # no rlGY
    assert logs["s4/pipeline-rlGX.log"].startswith(
        "GPU=0 SEED=4 RL=rlGX STEPS=300 K=2 P=-0.0 B=1 RL2=100 P2=0-0.7 B2=8 "
    )
    assert logs["s5/pipeline-rlGX.log"].startswith(
        "GPU=0 SEED=5 RL=rlGX STEPS=300 K=2 P=-0.0 B=1 RL2=100 P2=0-0.7 B2=8 "
    )


def test_the_second_of_two_weak_wins_phases_can_take_another_safe_range(tmp_path: Path) -> None:
    proc = _start(
        tmp_path, "weakwins2", SEEDS="5", SEED_GPUS="0", OTHER_MIN_P="0.35", OTHER_BUCKETS="8", WINS_STEPS="200"
    )
    assert proc.returncode == 0, proc.stderr
    logs = _logs(tmp_path)
    assert logs["s5/pipeline-rlGX.log"].startswith(
        "GPU=0 SEED=5 RL=rlGX STEPS=300 K=2 P=-0.0 B=1 RL2=200 P2=0-0.7 B2=8 "
    )
    assert logs["s5/pipeline-rlGY.log"].startswith(
        "GPU=0 SEED=5 RL=rlGY STEPS=300 K=2 P=-0.0 B=1 RL2=200 P2=0.35-0.7 B2=8 "
    )


def test_the_shipped_models_wins_phase_against_two_safe_opponent_ranges(tmp_path: Path) -> None:
    logs = _plan_logs(tmp_path, "wins2")
    assert list(logs) == ["shipped/pipeline-rlWM.log", "shipped/pipeline-rlWM0.log"]
    assert logs["shipped/pipeline-rlWM.log"].startswith("GPU=0 SEED=0 RL=rlWM STEPS=120 K= P=0.35-0.7 B=8 RL2=0 ")
    assert logs["shipped/pipeline-rlWM0.log"].startswith("GPU=0 SEED=0 RL=rlWM0 STEPS=120 K= P=0-0.7 B=8 RL2=0 ")
    assert logs["shipped/pipeline-rlWM.log"].endswith("STAGES=sft rlWM rlWM.best")
    assert logs["shipped/pipeline-rlWM0.log"].endswith("STAGES=rlWM0 rlWM0.best")
    for log in logs.values():  # evaluated every 10 steps, the best kept by the shipping rule (0 rejected too)
        assert " EVERY=10 KEEP=min:exact/beaten_games,min:exact/rejected_move_games,max:exact/random/win_pct " in log
    assert (tmp_path / "runs" / "plan" / "shipped" / "sft" / "final" / "config.json").exists()  # the shipped model


@pytest.mark.parametrize(
    ("plan", "env", "reason"),
    [
        ("given4", {"SEEDS": "1 2", "SEED_GPUS": "0"}, "SEED_GPUS names 1 GPUs for 2 seeds"),
        ("no_such_plan", {}, "unknown plan no_such_plan"),
    ],
)
def test_a_plan_that_cannot_run_is_refused_with_its_reason(
    tmp_path: Path, plan: str, env: dict[str, str], reason: str
) -> None:
    proc = _start(tmp_path, plan, **env)
    assert proc.returncode == 2
    assert reason in proc.stderr
    assert "started" not in proc.stdout
    assert not list((tmp_path / "runs").glob("plan/*/pipeline-*.log"))


@pytest.mark.parametrize(
    ("plan", "run", "head", "tail"),
    [  # the recipe as it is, against a mix whose best response wins the most, from another teacher's
        # SFT data, and that again with its best kept for shipping (no rejected move if it can)
        ("unbeatable", "rlU", "STEPS=300 K= P=- B=", f"EVERY= KEEP={KEEP} TEACHER="),
        ("mix", "rlM", "STEPS=200 K= P=-0.7 B=8", f"EVERY= KEEP={KEEP} TEACHER="),
        ("habit", "rlH", "STEPS=300 K= P=- B=", f"EVERY= KEEP={KEEP} TEACHER=teacher_centre"),
        ("habit2", "rlH", "STEPS=300 K= P=- B=", f"EVERY=10 KEEP={KEEP_SHIP} TEACHER=teacher_centre"),
    ],
)
def test_the_unbeatable_recipe_three_seeds_on_one_gpu(
    tmp_path: Path, plan: str, run: str, head: str, tail: str
) -> None:
    logs = _plan_logs(tmp_path, plan, SEEDS="3 4 5", SEED_GPUS="0 0 0")
    assert list(logs) == [f"s{seed}/pipeline-{run}.log" for seed in (3, 4, 5)]
    for seed in (3, 4, 5):
        log = logs[f"s{seed}/pipeline-{run}.log"]
        assert log.startswith(f"GPU=0 SEED={seed} RL={run} {head} RL2=0 ")
        assert log.endswith(f"{tail} STAGES=sft {run} {run}.best")


def test_the_habit_recipe_then_a_wins_phase_against_opponents_with_a_safe_optimum(tmp_path: Path) -> None:
    logs = _plan_logs(tmp_path, "habitwins", SEEDS="3 4", SEED_GPUS="0 0", WINS_STEPS="120")
    assert list(logs) == ["s3/pipeline-rlH.log", "s4/pipeline-rlH.log"]
    for seed in (3, 4):
        log = logs[f"s{seed}/pipeline-rlH.log"]
        assert log.startswith(f"GPU=0 SEED={seed} RL=rlH STEPS=150 K= P=- B= RL2=120 P2=-0.7 B2=8 LR2=1e-5 ")
        assert log.endswith(f"EVERY=10 KEEP={KEEP_SHIP} TEACHER=teacher_centre STAGES=sft rlH rlH2 rlH.best rlH2.best")


def test_sft_on_the_limit_player_then_the_recipe_beside_it_against_the_mix(tmp_path: Path) -> None:
    logs = _plan_logs(tmp_path, "limit", SEEDS="5 6", SEED_GPUS="0 0")
    assert list(logs) == [f"s{seed}/pipeline-{run}.log" for seed in (5, 6) for run in ("rlL", "rlLM")]
    for seed in (5, 6):  # one SFT model a seed, on the limit player's games; the second run waits for it
        plain, mixed = logs[f"s{seed}/pipeline-rlL.log"], logs[f"s{seed}/pipeline-rlLM.log"]
        assert plain.startswith(f"GPU=0 SEED={seed} RL=rlL STEPS=150 K= P=- B= RL2=0 ")
        assert mixed.startswith(f"GPU=0 SEED={seed} RL=rlLM STEPS=150 K= P=-0.7 B=8 RL2=0 ")
        assert plain.endswith(f"EVERY=10 KEEP={KEEP_SHIP} TEACHER=limit STAGES=sft rlL rlL.best")
        assert mixed.endswith(f"EVERY=10 KEEP={KEEP_SHIP} TEACHER=limit STAGES=rlLM rlLM.best")


def test_the_second_weak_wins_phase_can_restart_draws_too(tmp_path: Path) -> None:
    logs = _plan_logs(
        tmp_path, "weakwins2", SEEDS="4", SEED_GPUS="0", OTHER_MIN_P="0", OTHER_BUCKETS="8", OTHER_RESTART_BELOW="0.9"
    )
    assert " P2=0-0.7 B2=8 LR2=1e-5 " in logs["s4/pipeline-rlGX.log"]
    assert " P2=0-0.7 B2=8 LR2=1e-5 " in logs["s4/pipeline-rlGY.log"]
    below = {p.stem: p.read_text().strip() for p in (tmp_path / "runs" / "plan" / "s4").glob("*.restart_below2")}
    assert below == {"rlGX": "", "rlGY": "0.9"}  # the control keeps the usual restarts


@pytest.mark.parametrize("option", ["missed_win_penalty", "turn_credit"])
def test_the_second_weak_wins_phase_can_cost_a_missed_win(tmp_path: Path, option: str) -> None:
    """By the game's reward (OTHER_MISSED_WIN_PENALTY) or by the turn's (OTHER_TURN_CREDIT), in the
    second phase alone; the control keeps the reference rubric and the other option stays unset."""
    _plan_logs(tmp_path, "weakwins2", SEEDS="4", SEED_GPUS="0", OTHER_MIN_P="0", **{f"OTHER_{option.upper()}": "0.3"})
    runs = tmp_path / "runs" / "plan" / "s4"
    for name in ("missed_win_penalty", "turn_credit", "restart_below2"):
        got = {p.stem: p.read_text().strip() for p in runs.glob(f"*.{name}")}
        assert got == {"rlGX": "", "rlGY": "0.3" if name == option else ""}


def test_the_weak_wins_mix_alone_with_turn_scores_two_seeds_a_gpu(tmp_path: Path) -> None:
    """MIX_TURN_CREDIT: rlGX's mixed phase trains with turn scores, its first phase without (the
    stand-in sees TURN_CREDIT unset and RL2_TURN_CREDIT set); OTHER="" runs that line alone."""
    logs = _plan_logs(tmp_path, "weakwins2", SEEDS="2 3", SEED_GPUS="0 0", OTHER="", MIX_TURN_CREDIT="0.5")
    assert sorted(logs) == ["s2/pipeline-rlGX.log", "s3/pipeline-rlGX.log"]
    assert all(log.startswith("GPU=0 ") for log in logs.values())
    for seed in ("s2", "s3"):
        runs = tmp_path / "runs" / "plan" / seed
        assert (runs / "rlGX.turn_credit").read_text().strip() == ""
        assert (runs / "rlGX.turn_credit2").read_text().strip() == "0.5"


def test_the_weak_wins_phase_at_two_learning_rates_from_one_first_phase(tmp_path: Path) -> None:
    logs = _plan_logs(tmp_path, "weakwins3", SEEDS="4", SEED_GPUS="0")
    first, second = logs["s4/pipeline-rlGX.log"], logs["s4/pipeline-rlGY.log"]
    assert first.startswith("GPU=0 SEED=4 RL=rlGX STEPS=300 K=2 P=-0.0 B=1 RL2=120 P2=0-0.7 B2=8 LR2=1e-5 ")
    assert second.startswith("GPU=0 SEED=4 RL=rlGY STEPS=300 K=2 P=-0.0 B=1 RL2=120 P2=0-0.7 B2=8 LR2=3e-5 ")
    assert first.endswith("STAGES=base sft rlGX rlGX2 rlGX.best rlGX2.best")
    assert second.endswith("STAGES=rlGY2 rlGY2.best")


def _collect(tmp_path: Path, files: dict[str, str], links: dict[str, str] | None = None) -> list[str]:
    """Run `collect` over a plan folder of these files (and symlinks); the archive's names."""
    run = tmp_path / "runs" / "plan" / "s0"
    for name, text in files.items():
        (run / name).parent.mkdir(parents=True, exist_ok=True)
        (run / name).write_text(text)
    for name, target in (links or {}).items():
        (run / name).symlink_to(target)
    proc = _gpus(tmp_path, "collect", "out", "noplots")
    assert proc.returncode == 0, proc.stderr
    with tarfile.open(tmp_path / "out" / "runs.tgz") as tar:
        return sorted(n.removeprefix("runs/plan/s0/") for n in tar.getnames())


def test_collect_brings_finished_stage_games_and_no_weights(tmp_path: Path) -> None:
    files = {
        "eval/sft-exact/metadata.json": '{"status": "complete"}',
        "eval/sft-exact/results.jsonl": "{}\n",
        "eval/rl-exact/metadata.json": '{"status": "running"}',  # still being written: its games stay
        "eval/rl-exact/results.jsonl": "{}\n",
        "eval/rl.best-exact/metadata.json": '{"status": "complete"}',  # its games deleted: the rest still comes
        "rl/eval/step_000025/exact/metadata.json": '{"status": "complete"}',  # the trainer's: summaries only
        "rl/eval/step_000025/exact/results.jsonl": "{}\n",
        "rl/metrics.csv": "step\n0\n",
        "rl/final/config.json": "{}",
        "rl/final/model.safetensors": "weights",
    }
    assert _collect(tmp_path, files) == [
        "eval/rl-exact/metadata.json",
        "eval/rl.best-exact/metadata.json",
        "eval/sft-exact/metadata.json",
        "eval/sft-exact/results.jsonl",
        "rl/eval/step_000025/exact/metadata.json",
        "rl/metrics.csv",
    ]


def test_collect_early_in_a_run_with_a_dangling_link(tmp_path: Path) -> None:
    """No evaluation finished yet (the games' grep matches none, a failure under the script's
    pipefail) and a link to a phase not there yet: what is there still comes back."""
    files = {"eval/sft-exact/metadata.json": '{"status": "running"}', "rl/metrics.csv": "step\n0\n"}
    assert _collect(tmp_path, files, {"rlY": "rlX"}) == ["eval/sft-exact/metadata.json", "rl/metrics.csv"]


def _exact(lost: int, rejected: int, win: float) -> str:
    """An exact evaluation's metadata: `lost` beaten lines, rejected-move games, wins vs random."""
    rates = {"random": {"win": win}, "optimal": {"draw": 100.0}}
    beaten = [f"line{i}" for i in range(lost)]
    return json.dumps({"exact": {"beaten": beaten, "rejected_move_games": rejected, "rates_pct": rates}})


def _kept(lost: object, rejected: object, win: object) -> str:
    """A kept best's record (`best/keep_best.json`) holding the three metrics `best` ranks by."""
    metrics = {"exact/beaten_games": lost, "exact/rejected_move_games": rejected, "exact/random/win_pct": win}
    return json.dumps({"keep_best": "min:exact/beaten_games", "step": 90, "metrics": metrics})


def _best(tmp_path: Path, files: dict[str, str]) -> str:
    for name, text in files.items():
        path = tmp_path / "runs" / "plan" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    proc = _gpus(tmp_path, "best")
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip().removeprefix("runs/plan/")


def test_best_takes_fewest_lost_then_fewest_rejected_then_most_wins(tmp_path: Path) -> None:
    files = {
        "s3/eval/sft-exact/metadata.json": _exact(0, 0, 99.0),  # not an RL model: never the answer
        "s3/eval/rlH-exact/metadata.json": _exact(0, 3, 93.66),
        "s3/eval/rlH.best-exact/metadata.json": _exact(0, 0, 91.15),
        "s4/eval/rlH-exact/metadata.json": _exact(0, 0, 92.36),
        "s5/eval/rlH-exact/metadata.json": _exact(1, 0, 95.0),
        "s6/eval/rlH-exact/metadata.json": _exact(0, 0, 94.0),  # its model folder is gone: passed over
    }
    for run in ("s3/rlH/final", "s3/rlH/best", "s4/rlH/final", "s5/rlH/final", "s3/sft/final"):
        files[f"{run}/config.json"] = "{}"
    assert _best(tmp_path, files) == "s4/rlH/final"


def test_best_before_any_rl_evaluation_reads_the_kept_bests_records(tmp_path: Path) -> None:
    """Mid-run (a device call ending before the last evaluation), each run's kept best by its
    own record, rejected-move games included where the record has them."""

    files = {
        "s3/rlH/best/keep_best.json": _kept(0, 3, 93.7),
        "s4/rlH/best/keep_best.json": _kept(0, 0, 91.3),
        "s5/rlH/best/keep_best.json": "not json",  # passed over, said on stderr
    }
    for run in ("s3", "s4", "s5"):
        files[f"{run}/rlH/best/config.json"] = "{}"
    assert _best(tmp_path, files) == "s4/rlH/best"


def test_best_mixes_finished_and_running_seeds_and_ranks_hostile_records_last(tmp_path: Path) -> None:
    """One seed evaluated by its pipeline, the others still running (only their kept-best records):
    all compete, an evaluation over the run's own record; a torn or foreign metadata file, a NaN
    rate and a null count rank last, not crash."""

    files = {
        "s3/eval/rlH-exact/metadata.json": _exact(0, 1, 93.66),
        "s3/eval/rlH.best-exact/metadata.json": _exact(0, 2, 92.0),
        "s3/rlH/best/keep_best.json": _kept(0, 0, 99.0),  # the trainer's view; the pipeline's evaluation decides
        "s4/rlH/best/keep_best.json": _kept(0, 0, 91.3),
        "s5/eval/rlH-exact/metadata.json": '{"exact": {"beaten": [], "rejec',  # torn mid-write
        "s6/rlH/best/keep_best.json": _kept(0, None, 99.0),
        "s7/eval/rlH-exact/metadata.json": "[1, 2]",  # JSON, not an object
    }
    for run in ("s3/rlH/final", "s3/rlH/best", "s4/rlH/best", "s5/rlH/final", "s6/rlH/best", "s7/rlH/final"):
        files[f"{run}/config.json"] = "{}"
    assert _best(tmp_path, files) == "s4/rlH/best"
    files["s4/rlH/best/keep_best.json"] = _kept(1, 0, 99.9)  # now every record ranks below s3's evaluation
    assert _best(tmp_path, files) == "s3/rlH/final"


def test_best_ranks_a_nan_win_rate_last(tmp_path: Path) -> None:
    files = {
        "s3/eval/rlH-exact/metadata.json": _exact(0, 0, float("nan")),  # (json writes NaN)
        "s4/rlH/best/keep_best.json": _kept(0, 0, 90.0),
        "s3/rlH/final/config.json": "{}",
        "s4/rlH/best/config.json": "{}",
    }
    assert _best(tmp_path, files) == "s4/rlH/best"


def test_best_by_a_keep_best_order_and_never_a_restored_first_phase(tmp_path: Path) -> None:
    """BEST_BY (or the plan's RUNS/best_by) ranks by a keep_best order: the most wins among models
    with >= 97% draws vs optimal, the fewest lost games aside; the first phase restored as this
    machine's input is evaluated beside its second phases but is never the answer."""

    def exact(lost: int, win: float, draw: float) -> str:
        rates = {"random": {"win": win}, "optimal": {"draw": draw}}
        return json.dumps({"exact": {"beaten": ["x"] * lost, "rejected_move_games": 0, "rates_pct": rates}})

    files = {
        "s2/eval/rlGX-exact/metadata.json": exact(12, 89.59, 99.16),  # the input: fewest lost, restored
        "s2/rlGX/restored_from": "out/s2-rlGX\n",
        "s2/eval/rlGX2-exact/metadata.json": exact(18, 89.72, 99.07),
        "s2/eval/rlGY2-exact/metadata.json": exact(23, 90.09, 98.10),
        "s2/eval/rlGY2.best-exact/metadata.json": exact(30, 91.00, 96.90),  # more wins, draws below the floor
    }
    for run in ("rlGX/final", "rlGX2/final", "rlGY2/final", "rlGY2/best"):
        files[f"s2/{run}/config.json"] = "{}"
    assert _best(tmp_path, files) == "s2/rlGX2/final"  # by default the fewest lost, the input passed over
    wins = "exact/optimal/draw_pct>=97,max:exact/random/win_pct"
    assert _gpus(tmp_path, "best", BEST_BY=wins).stdout.strip() == "runs/plan/s2/rlGY2/final"
    (tmp_path / "runs" / "plan" / "best_by").write_text(wins + "\n")  # what plan weakwins2's start writes
    assert _best(tmp_path, {}) == "s2/rlGY2/final"
    assert _gpus(tmp_path, "best", BEST_BY="max:exact/random/win_pct").stdout.strip() == "runs/plan/s2/rlGY2/best"
    for bad in ("most:wins", "exact/optimal/draw_pct>=high", "max:"):
        proc = _gpus(tmp_path, "best", BEST_BY=bad)
        assert proc.returncode == 1 and "each entry is" in proc.stderr and not proc.stdout, bad


def test_plan_weakwins2_writes_its_target_order_for_best(tmp_path: Path) -> None:
    _plan_logs(tmp_path, "weakwins2", SEEDS="2", SEED_GPUS="0")
    best_by = (tmp_path / "runs" / "plan" / "best_by").read_text().strip()
    assert best_by == "exact/optimal/draw_pct>=97,max:exact/random/win_pct"


def test_without_a_command_the_usage_lists_every_command_and_stops_before_the_plans(tmp_path: Path) -> None:
    proc = _gpus(tmp_path)
    assert proc.returncode == 2 and "Plans" not in proc.stdout
    script = (ROOT / "scripts" / "tictactoe_gpus.sh").read_text()
    commands = set(re.findall(r"^  ([a-z]+)\)", script, re.MULTILINE))
    assert commands == {"start", "wait", "send", "collect", "summary", "best", "ship", "bundle", "pack", "restore"}
    for command in commands:
        assert f"scripts/tictactoe_gpus.sh {command}" in proc.stdout, command


@pytest.mark.heavy
def test_wait_with_bundle_brings_the_best_weights_back_with_the_runs(tmp_path: Path) -> None:
    """BUNDLE=1: each call's `wait ... DIR` also ships the best model so far (the shipped model
    stands in for a run's kept best), so a machine released between calls loses no weights."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    path = {"PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}  # python3 with torch
    assert _gpus(tmp_path, "wait", "0", "out", BUNDLE="1", **path).stdout.endswith("nothing bundled\n")
    best = tmp_path / "runs" / "plan" / "s8" / "rlLM" / "best"
    shutil.copytree(ROOT / "models" / "tictactoe-tiny", best)
    (best / "keep_best.json").write_text(_kept(0, 0, 95.4))
    stale = tmp_path / "out" / ".bundle.killed" / "model"  # a bundle killed mid-write (SIGKILL) left this
    stale.mkdir(parents=True)
    (stale / "config.json").write_text("{}")
    proc = _gpus(tmp_path, "wait", "0", "out", BUNDLE="1", **path)
    assert proc.returncode == 0, proc.stderr
    parts = sorted((tmp_path / "out").glob("model.tar.*"))
    assert len(parts) == 3 and all(p.stat().st_size <= 15 * 2**20 for p in parts)
    with tarfile.open(fileobj=io.BytesIO(b"".join(p.read_bytes() for p in parts))) as tar:
        names = set(tar.getnames())
    assert {"model/config.json", "model/tokenizer.json", "model/model.safetensors.index.json"} <= names
    assert (tmp_path / "out" / "runs.tgz").exists()
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [
        "model.tar.00",
        "model.tar.01",
        "model.tar.02",
        "runs.tgz",
    ]


@pytest.mark.heavy
def test_wait_with_bundle_from_sends_first_phases_final_models_one_call_at_a_time(tmp_path: Path) -> None:
    """BUNDLE_FROM="SEED/RUN ...": each first phase's final model there yet (what second phases start
    from) is packed once (RUNS/packed/SEED-RUN) and sent into DIR/SEED-RUN while DIR stays within
    the 64 MiB a call's files may take together: a 34 MB model a call, the rest named for the next
    call and not packed in this one (a pack costs the call 10-15 s); `restore` makes each its RUN's
    final model on the next machine, the weights unchanged."""
    pytest.importorskip("torch")
    safetensors = pytest.importorskip("safetensors.torch")
    path = {"PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    both = {"BUNDLE_FROM": "s8/rlLM s9/rlLM", **path}
    proc = _gpus(tmp_path, "wait", "0", "out1", **both)
    assert proc.returncode == 0 and "no model at runs/plan/s8/rlLM(/final) yet: not bundled" in proc.stdout, proc.stderr
    assert "no model at runs/plan/s9/rlLM(/final) yet: not bundled" in proc.stdout
    assert sorted(p.name for p in (tmp_path / "out1").iterdir()) == ["runs.tgz"]
    finals = {seed: tmp_path / "runs" / "plan" / seed / "rlLM" / "final" for seed in ("s8", "s9")}
    for final in finals.values():
        shutil.copytree(ROOT / "models" / "tictactoe-tiny", final)
    proc = _gpus(tmp_path, "wait", "0", "out2", **both)
    assert proc.returncode == 0, proc.stderr
    assert "sent s8-rlLM" in proc.stdout and "not sent (over 64 MiB with this call's files): s9-rlLM" in proc.stdout
    assert sorted(p.name for p in (tmp_path / "out2").iterdir()) == ["runs.tgz", "s8-rlLM"]
    sent = [p for p in (tmp_path / "out2").rglob("*") if p.is_file()]
    assert sum(p.stat().st_size for p in sent) <= 64 * 2**20 and len(sent) <= 8
    assert proc.stdout.count("shipped") == 1  # s9's not packed: it could not go in this call
    assert not (tmp_path / "runs" / "plan" / "packed" / "s9-rlLM").exists()
    proc = _gpus(tmp_path, "wait", "0", "out3", **both)  # the next call: the one left, s8 not packed again
    assert proc.returncode == 0 and "sent s9-rlLM" in proc.stdout and proc.stdout.count("shipped") == 1, proc.stderr
    assert "s9-rlLM" in proc.stdout.split("shipped", 1)[1].split("\n", 1)[0]
    assert sorted(p.name for p in (tmp_path / "out3").iterdir()) == ["runs.tgz", "s9-rlLM"]
    proc = _gpus(tmp_path, "wait", "0", "out4", **both)  # every one sent: nothing more, nothing packed
    assert proc.returncode == 0 and "sent" not in proc.stdout and "shipped" not in proc.stdout
    assert sorted(p.name for p in (tmp_path / "out4").iterdir()) == ["runs.tgz"]
    cut = tmp_path / "out5" / "s8-rlLM"  # a send killed mid-copy left a short part (and no mark)
    cut.mkdir(parents=True)
    (cut / "model.tar.00").write_bytes(b"cut")
    proc = _gpus(tmp_path, "send", "out5", "s8-rlLM")  # a call whose files did not come back: again
    assert proc.returncode == 0 and "sent s8-rlLM" in proc.stdout
    packed_s8 = tmp_path / "runs" / "plan" / "packed" / "s8-rlLM"
    assert all((cut / p.name).read_bytes() == p.read_bytes() for p in packed_s8.glob("model.tar.*"))
    for name in ("s7-rlLM", "..", "../plan"):
        proc = _gpus(tmp_path, "send", "out6", name)
        assert proc.returncode == 2 and "no packed model" in proc.stderr, name
    assert _gpus(tmp_path, "send").returncode == 2

    def weights(folder: Path) -> dict:
        return {k: v for f in sorted(folder.glob("*.safetensors")) for k, v in safetensors.load_file(f).items()}

    shipped = weights(finals["s8"])
    for seed, out in (("s8", "out5"), ("s9", "out3")):
        run = tmp_path / "elsewhere" / seed / "rlLM"
        proc = _gpus(tmp_path, "restore", str(tmp_path / out / f"{seed}-rlLM"), str(run))
        assert proc.returncode == 0, proc.stderr
        restored = weights(run / "final")
        assert shipped.keys() == restored.keys()
        assert all(restored[k].equal(shipped[k].to(restored[k].dtype)) for k in shipped)  # bf16 both ways
    other = tmp_path / "elsewhere" / "s7" / "rlLM"  # a run the archive holds no folder for: refused
    proc = _gpus(tmp_path, "restore", str(tmp_path / "out2" / "s8-rlLM"), str(other))
    assert proc.returncode == 1 and "no folder model or s7-rlLM" in proc.stderr
    assert not (other / "final").exists()


@pytest.mark.heavy
def test_wait_with_bundle_from_packs_a_kept_best_again_when_it_changed(tmp_path: Path) -> None:
    """A BUNDLE_FROM key may name any model folder under RUNS, e.g. SEED/RUN/best, the kept best of
    a run still going: packed as SEED-RUN-best, sent, and packed and sent again once the run keeps
    a newer best (never a stale one); a model that is not there yet is said so. One a call: a model
    never sent goes before one sent before and packed again."""
    pytest.importorskip("torch")
    path = {"PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    env = {"BUNDLE_FROM": "s8/rlLM2/best", **path}
    proc = _gpus(tmp_path, "wait", "0", "out1", **env)
    assert proc.returncode == 0 and "no model at runs/plan/s8/rlLM2/best(/final) yet: not bundled" in proc.stdout
    glob = _gpus(tmp_path, "wait", "0", "out0", BUNDLE_FROM="*", **path)  # a key is a path, never a pattern
    assert glob.returncode == 0 and "no model at runs/plan/*(/final) yet" in glob.stdout
    assert glob.stdout.count("not bundled") == 1, glob.stdout
    best = tmp_path / "runs" / "plan" / "s8" / "rlLM2" / "best"
    shutil.copytree(ROOT / "models" / "tictactoe-tiny", best)
    proc = _gpus(tmp_path, "wait", "0", "out2", **env)
    assert proc.returncode == 0 and "sent s8-rlLM2-best" in proc.stdout, proc.stderr
    assert (tmp_path / "out2" / "s8-rlLM2-best" / "model.tar.00").exists()
    proc = _gpus(tmp_path, "wait", "0", "out3", **env)  # unchanged and sent: nothing
    assert proc.returncode == 0 and "sent" not in proc.stdout and "shipped" not in proc.stdout
    packed = tmp_path / "runs" / "plan" / "packed" / "s8-rlLM2-best" / "model.tar.00"
    later = max(time.time(), packed.stat().st_mtime) + 5  # the run keeps a newer best
    os.utime(best / "config.json", (later, later))
    proc = _gpus(tmp_path, "wait", "0", "out4", **env)
    assert proc.returncode == 0 and "shipped" in proc.stdout and "sent s8-rlLM2-best" in proc.stdout
    shutil.copytree(ROOT / "models" / "tictactoe-tiny", tmp_path / "runs" / "plan" / "s9" / "rlLM2" / "best")
    later = max(time.time(), packed.stat().st_mtime) + 5  # both changed: the one never sent goes first, the
    # other waits (newer than the part packed above: that pack may take longer than 5 s on a busy machine)
    os.utime(best / "config.json", (later, later))
    keys = "s8/rlLM2/best\n s9/rlLM2/best"  # (a key a line reads as well as a line of keys)
    proc = _gpus(tmp_path, "wait", "0", "out5", BUNDLE_FROM=keys, **path)
    assert proc.returncode == 0 and "sent s9-rlLM2-best" in proc.stdout, proc.stderr
    assert "not sent (over 64 MiB with this call's files): s8-rlLM2-best" in proc.stdout
    assert proc.stdout.count("shipped") == 1  # s8's newer best waits unpacked for the next call
    proc = _gpus(tmp_path, "wait", "0", "out6", BUNDLE_FROM="s8/rlLM2/best s9/rlLM2/best", **path)
    assert proc.returncode == 0 and "sent s8-rlLM2-best" in proc.stdout and "s9" not in proc.stdout.split("sent", 1)[1]


def test_pack_refuses_a_name_without_a_model_or_one_that_leaves_its_folder(tmp_path: Path) -> None:
    """A NAME must be a plain folder name: `..` or `a/b` would ship a model outside the archive's
    folder (into DIR itself); nothing is written for a refused call."""
    out, model = tmp_path / "out", tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    for args in (("pack", str(out)), ("pack", str(out), "nameless"), ("pack", str(out), f"a={tmp_path}")):
        proc = _gpus(tmp_path, *args)
        assert proc.returncode == 2 and "pack DIR NAME=MODEL" in proc.stderr, args
    for name in ("..", ".", "a/b", "../up", "-x", "s2\nrlGX", ""):
        proc = _gpus(tmp_path, "pack", str(out), f"{name}={model}")
        assert proc.returncode == 2 and "not a plain folder name" in proc.stderr, name
    assert not out.exists() or not list(out.rglob("*"))


def _bundle_of(tmp_path: Path, folder: Path, parts: int = 3) -> Path:
    """`bundle`'s output for a model folder (a tar of `model/`, split), made here without torch."""
    data = io.BytesIO()
    with tarfile.open(fileobj=data, mode="w") as tar:
        tar.add(folder, arcname="model")
    blob, out = data.getvalue(), tmp_path / "bundle"
    out.mkdir()
    size = -(-len(blob) // parts)
    for i in range(parts):
        (out / f"model.tar.{i:02d}").write_bytes(blob[i * size : (i + 1) * size])
    return out


def test_restore_puts_a_bundle_back_as_a_runs_final_model(tmp_path: Path) -> None:
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text('{"model_type": "llama"}')
    (model / "model.safetensors").write_bytes(os.urandom(50_000))
    bundle = _bundle_of(tmp_path, model)
    run = tmp_path / "runs" / "plan" / "s2" / "rlGX"
    (run / ".restore.killed" / "model").mkdir(parents=True)  # a restore killed mid-unpack (SIGKILL) left this
    proc = _gpus(tmp_path, "restore", str(bundle), str(run))
    assert proc.returncode == 0, proc.stderr
    assert sorted(p.name for p in run.iterdir()) == ["final", "restored_from"]  # nothing half-made beside it
    assert (run / "restored_from").read_text().strip() == str(bundle)
    for name in ("config.json", "model.safetensors"):
        assert (run / "final" / name).read_bytes() == (model / name).read_bytes()
    again = _gpus(tmp_path, "restore", str(bundle), str(run))  # a model there is never overwritten
    assert again.returncode == 2 and "there already" in again.stderr
    shutil.rmtree(run)
    (bundle / "model.tar.02").unlink()  # a bundle cut short: refused, and no final model
    cut = _gpus(tmp_path, "restore", str(bundle), str(run))
    assert cut.returncode == 1 and "cut short" in cut.stderr
    assert list(run.iterdir()) == []
    for args in ((str(tmp_path / "nowhere"), str(run)), (str(bundle),)):
        proc = _gpus(tmp_path, "restore", *args)
        assert proc.returncode == 2 and "no bundle" in proc.stderr


def test_a_second_phase_from_a_restored_first_phase_waits_for_no_sft(tmp_path: Path) -> None:
    """The first phase's final model restored alone (no SFT model on this machine): both second
    phases start, the other arm too, which would otherwise wait for an SFT model never made."""
    final = tmp_path / "runs" / "plan" / "s2" / "rlGX" / "final"
    final.mkdir(parents=True)
    (final / "config.json").write_text("{}")
    logs = _plan_logs(tmp_path, "weakwins2", SEEDS="2", SEED_GPUS="0")
    assert list(logs) == ["s2/pipeline-rlGX.log", "s2/pipeline-rlGY.log"]
    assert not (tmp_path / "runs" / "plan" / "s2" / "sft").exists()


STUB_RLVR = """#!/usr/bin/env bash
echo "$*" >> "$RLVR_CALLS"
out=""; prev=""
for a in "$@"; do case $prev in -o|--output-dir) out=$a ;; esac; prev=$a; done
case $1 in
  model) mkdir -p "$out"; echo {} > "$out/config.json" ;;
  gen) touch "$out" ;;
  sft|train) mkdir -p "$out/final"; echo {} > "$out/final/config.json" ;;
  eval) mkdir -p "$out"; echo '{"status": "complete"}' > "$out/metadata.json" ;;
esac
"""


def _pipeline(tmp_path: Path, out: Path, **env: str) -> str:
    """The real scripts/reproduce_tictactoe.sh into OUT, its `rlvr` a stand-in: the calls it made."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "rlvr").write_text(STUB_RLVR)
    (bin_dir / "rlvr").chmod(0o755)
    calls = tmp_path / "calls.log"
    proc = subprocess.run(
        ["bash", str(ROOT / "scripts" / "reproduce_tictactoe.sh")],
        cwd=ROOT,
        env=os.environ
        | {
            "PATH": os.pathsep.join([str(bin_dir), str(Path(sys.executable).parent), os.environ["PATH"]]),
            "RLVR_CALLS": str(calls),
            "OUT_DIR": str(out),
            "RL_NAME": "rlGX",
            "SCALE": "full",  # (the stand-in's sizes do not matter; kept bests need exact evaluations)
        }
        | env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return calls.read_text()


@pytest.mark.parametrize("there", ["nothing", "sft", "phase 1"])
def test_the_pipeline_skips_base_data_and_sft_where_the_first_phase_is_restored(tmp_path: Path, there: str) -> None:
    """The real scripts/reproduce_tictactoe.sh, its `rlvr` a stand-in that logs each call: with RUN's
    first phase there (restored), it trains only the second phase, from that model; with the SFT
    model there, both phases, and the base model only for its evaluation."""
    out = tmp_path / "runs" / "s2"
    if there != "nothing":
        folder = out / ("sft" if there == "sft" else "rlGX") / "final"
        folder.mkdir(parents=True)
        (folder / "config.json").write_text("{}")
    calls = _pipeline(
        tmp_path,
        out,
        KEEP_BEST="min:exact/beaten_games",
        RL2_KEEP_BEST="exact/optimal/draw_pct>=97,max:exact/random/win_pct",
        TEACHER="teacher" if there == "sft" else "limit",
        EVAL_STAGES="base sft rlGX rlGX2",
    )
    commands = [line.split()[0] for line in calls.splitlines()]
    trained = [line.split("--output-dir ")[1].split()[0] for line in calls.splitlines() if line.startswith("train")]
    made = [c for c in commands if c != "eval"]
    keeps = [line.split("--keep-best ")[1].split()[0] for line in calls.splitlines() if line.startswith("train")]
    assert keeps == (["min:exact/beaten_games"] if there != "phase 1" else []) + [
        "exact/optimal/draw_pct>=97,max:exact/random/win_pct"
    ]
    # with the first phase there, no base model either, though EVAL_STAGES names it: one made now is
    # not the one the run came from
    if there == "phase 1":
        assert made == ["train"] and trained == [f"{out}/rlGX2"]
        assert f"--model {out}/rlGX/final --output-dir {out}/rlGX2 " in calls
    else:
        assert made == (["model", "gen", "sft"] if there == "nothing" else ["model"]) + ["train", "train"]
        assert trained == [f"{out}/rlGX", f"{out}/rlGX2"]


@pytest.mark.parametrize(
    ("env", "first", "second"),
    [
        ({"TURN_CREDIT": "0.3"}, "0.3", "0.3"),  # both phases, as before RL2_TURN_CREDIT
        ({"RL2_TURN_CREDIT": "0.5"}, None, "0.5"),  # the mixed phase alone (plan weakwins2's MIX_TURN_CREDIT)
        ({"TURN_CREDIT": "0.3", "RL2_TURN_CREDIT": ""}, "0.3", None),  # set empty: none in phase 2
    ],
)
def test_each_rl_phase_takes_its_own_turn_credit(
    tmp_path: Path, env: dict[str, str], first: str | None, second: str | None
) -> None:
    calls = _pipeline(tmp_path, tmp_path / "runs" / "s2", **env)
    trains = {
        line.split("--output-dir ")[1].split()[0].rsplit("/", 1)[1]: line
        for line in calls.splitlines()
        if line.startswith("train")
    }
    assert sorted(trains) == ["rlGX", "rlGX2"]
    for run, credit in (("rlGX", first), ("rlGX2", second)):
        got = trains[run].split("--turn-credit ")[1].split()[0] if "--turn-credit" in trains[run] else None
        assert got == credit, (run, trains[run])
