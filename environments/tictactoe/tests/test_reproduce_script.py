"""scripts/reproduce_tictactoe.sh's RECIPE presets: what reaches `rlvr train`.

The script is run with a stand-in `rlvr` on PATH that records its arguments and fails, and with
the base model, the teacher games and the SFT model already in place, so the first command it
runs is the RL phase's `rlvr train`: the test reads that command line.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from rlvr_tictactoe.env import load_environment

SCRIPT = Path(__file__).resolve().parents[3] / "scripts" / "reproduce_tictactoe.sh"


def _train_args(
    tmp_path: Path,
    done_before: tuple[str, ...] = ("base/config.json", "teacher.jsonl", "sft/final/config.json"),
    **env: str,
) -> tuple[subprocess.CompletedProcess[str], list[str]]:
    """The first `rlvr` command the script runs, with the stages `done_before` already in place
    (by default all up to RL: the command is `rlvr train`)."""
    out, bin_dir, args = tmp_path / "run", tmp_path / "bin", tmp_path / "args.txt"
    for done in done_before:
        (out / done).parent.mkdir(parents=True, exist_ok=True)
        (out / done).write_text("{}")
    bin_dir.mkdir()
    fake = bin_dir / "rlvr"
    fake.write_text(f'#!/bin/sh\nprintf "%s\\n" "$@" > "{args}"\nexit 3\n')
    fake.chmod(0o755)
    proc = subprocess.run(
        ["bash", str(SCRIPT)],
        env=os.environ | {"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "OUT_DIR": str(out), **env},
        capture_output=True,
        text=True,
        timeout=60,
    )
    return proc, args.read_text().splitlines() if args.exists() else []


def _flag(argv: list[str], name: str) -> str:
    return argv[argv.index(name) + 1]


def test_the_unbeatable_recipe_reaches_rlvr_train(tmp_path: Path) -> None:
    proc, argv = _train_args(tmp_path, RECIPE="unbeatable")
    assert proc.returncode == 3, proc.stdout + proc.stderr  # the stand-in's exit: train was called
    assert argv[:2] == ["train", "tictactoe"]
    assert _flag(argv, "--steps") == "300"
    assert _flag(argv, "--restart-frac") == "0.5"
    assert _flag(argv, "--restart-below") == "0.65"
    assert _flag(argv, "--restart-points") == "backtrack"
    assert _flag(argv, "--num-buckets") == "1"
    assert _flag(argv, "--lr") == "2e-5"
    assert _flag(argv, "--keep-best") == "min:exact/beaten_games,max:exact/random/win_pct"
    assert "--restart-greedy=128" in argv
    env_args = json.loads(_flag(argv, "--env-args"))
    assert env_args == {
        "min_random_move_prob": 0.0,
        "max_random_move_prob": 0.0,
        "loss_reward": 0.0,
        "trap_prob": 1.0,
        "opening_plies": 0,
        "opening_history": False,
        "random_replies": 4,
        "probe_random_replies": 4,
        "probe_random_share": 0.5,
    }


def test_a_variable_the_caller_sets_wins_over_the_recipe(tmp_path: Path) -> None:
    proc, argv = _train_args(tmp_path, RECIPE="unbeatable", RL_STEPS="50", RESTART_BELOW="0.5")
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert _flag(argv, "--steps") == "50"
    assert _flag(argv, "--restart-below") == "0.5"
    assert _flag(argv, "--restart-points") == "backtrack"  # the rest is still the recipe's


def test_without_a_recipe_the_two_phase_defaults_are_unchanged(tmp_path: Path) -> None:
    proc, argv = _train_args(tmp_path)
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert _flag(argv, "--steps") == "80"
    assert _flag(argv, "--restart-frac") == "0"
    assert "--keep-best" not in argv
    assert json.loads(_flag(argv, "--env-args"))["opening_plies"] == 4


def test_the_second_phase_restarts_below_its_own_threshold(tmp_path: Path) -> None:
    """RL2_RESTART_BELOW sets phase 2's --restart-below alone (phase 1 keeps RESTART_BELOW); unset,
    phase 2 takes RESTART_BELOW."""
    sft = ("base/config.json", "teacher.jsonl", "sft/final/config.json")
    recipe = {"RECIPE": "unbeatable", "RESTART_BELOW": "0.5", "RL2_STEPS": "10"}
    proc, argv = _train_args(tmp_path / "first", sft, **recipe, RL2_RESTART_BELOW="0.9")
    assert proc.returncode == 3 and _flag(argv, "--steps") == "300" and _flag(argv, "--restart-below") == "0.5"
    proc, argv = _train_args(tmp_path / "second", (*sft, "rl/final/config.json"), **recipe, RL2_RESTART_BELOW="0.9")
    assert proc.returncode == 3 and _flag(argv, "--steps") == "10" and _flag(argv, "--restart-below") == "0.9"
    assert _flag(argv, "--model").endswith("rl/final")
    proc, argv = _train_args(tmp_path / "third", (*sft, "rl/final/config.json"), **recipe)
    assert proc.returncode == 3 and _flag(argv, "--steps") == "10" and _flag(argv, "--restart-below") == "0.5"


def test_the_env_penalties_reach_the_env_args_and_the_env_takes_them(tmp_path: Path) -> None:
    proc, argv = _train_args(tmp_path, MISSED_WIN_PENALTY="0.3", CLAIM_PENALTY="0.1")
    assert proc.returncode == 3, proc.stdout + proc.stderr
    env_args = json.loads(_flag(argv, "--env-args"))
    assert (env_args["missed_win_penalty"], env_args["claim_penalty"]) == (0.3, 0.1)
    assert {"missed_win_penalty", "claim_penalty"} <= set(load_environment(**env_args).rubric.names)
    proc, argv = _train_args(tmp_path / "plain")
    assert "missed_win_penalty" not in json.loads(_flag(argv, "--env-args"))  # unset: the reference rubric


def test_an_unknown_recipe_is_refused_before_any_work(tmp_path: Path) -> None:
    proc, argv = _train_args(tmp_path, RECIPE="unbeatabel")
    assert proc.returncode == 2
    assert "unknown RECIPE 'unbeatabel' (known: unbeatable)" in proc.stderr
    assert argv == []  # no rlvr command ran


def test_rl_from_a_given_model_makes_no_base_or_teacher_games_and_passes_explore(tmp_path: Path) -> None:
    """RL from a model put in sft/final (the shipped one, plan `given`): nothing before the RL
    phase runs, so two variants of one folder side by side never write one file together."""
    out, bin_dir, args = tmp_path / "run", tmp_path / "bin", tmp_path / "args.txt"
    (out / "sft" / "final").mkdir(parents=True)
    (out / "sft" / "final" / "config.json").write_text("{}")
    bin_dir.mkdir()
    (bin_dir / "rlvr").write_text(f'#!/bin/sh\nprintf "%s\\n" "$@" >> "{args}"\nexit 3\n')
    (bin_dir / "rlvr").chmod(0o755)
    env = {"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "OUT_DIR": str(out)}
    env |= {"EVAL_STAGES": "sft rl", "RESTART_FRAC": "0.5", "RESTART_EXPLORE": "2", "RESTART_EXPLORE_WEIGHT": "0.05"}
    proc = subprocess.run(["bash", str(SCRIPT)], env=os.environ | env, capture_output=True, text=True, timeout=60)
    argv = args.read_text().splitlines()
    assert proc.returncode == 3 and argv[:2] == ["train", "tictactoe"], proc.stdout + proc.stderr
    assert _flag(argv, "--restart-explore") == "2" and _flag(argv, "--restart-explore-weight") == "0.05"
    assert not (out / "base").exists() and not (out / "teacher.jsonl").exists()


def _evaluate(tmp_path: Path, best_bytes: bytes, **extra: str) -> tuple[list[str], Path]:
    """The evaluation stage alone (every earlier stage's output in place) for `rl` and
    `rl.best`, with a stand-in `rlvr` that records each evaluation and marks it complete."""
    out, bin_dir, calls = tmp_path / "run", tmp_path / "bin", tmp_path / "calls.txt"
    for folder, weights in (("rl/final", b"weights"), ("rl/best", best_bytes)):
        (out / folder).mkdir(parents=True)
        (out / folder / "config.json").write_text("{}")
        (out / folder / "model.safetensors").write_bytes(weights)
    (out / "sft" / "final").mkdir(parents=True)  # no base model, teacher games or SFT to make
    (out / "sft" / "final" / "config.json").write_text("{}")
    (out / "eval" / "rl.best-random").mkdir(parents=True)  # a cut evaluation of it, from an earlier call
    bin_dir.mkdir()
    fake = bin_dir / "rlvr"
    fake.write_text(
        "#!/bin/sh\n"
        f'[ "$1" = eval ] || exit 3; while [ "$1" != "-o" ]; do shift; done; echo "$2" >> "{calls}"\n'
        'mkdir -p "$2" && echo \'{"status": "complete"}\' > "$2/metadata.json"\n'
    )
    fake.chmod(0o755)
    env = {"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "OUT_DIR": str(out), "EVAL_STAGES": "rl rl.best"}
    env |= {"RL2_STEPS": "0", **extra}  # (rl/final is there: no RL phase runs)
    subprocess.run(["bash", str(SCRIPT)], env=os.environ | env, capture_output=True, text=True, timeout=60)
    return sorted(Path(line).name for line in calls.read_text().splitlines()), out / "eval"


def test_a_kept_best_that_is_the_final_model_is_not_evaluated_twice(tmp_path: Path) -> None:
    calls, evals = _evaluate(tmp_path, b"weights")
    assert calls == ["rl-exact", "rl-optimal", "rl-random"]
    for opp in ("exact", "random", "optimal"):
        link = evals / f"rl.best-{opp}"
        assert link.is_symlink() and os.readlink(link) == f"rl-{opp}"
        assert json.loads((link / "metadata.json").read_text())["status"] == "complete"


def test_a_kept_best_with_other_weights_is_evaluated(tmp_path: Path) -> None:
    calls, evals = _evaluate(tmp_path, b"other weights")
    assert calls == ["rl-exact", "rl-optimal", "rl-random", "rl.best-exact", "rl.best-optimal", "rl.best-random"]
    assert not any(p.is_symlink() for p in evals.iterdir())


def test_without_exact_evaluation_the_sampled_cells_are_linked_alone(tmp_path: Path) -> None:
    calls, evals = _evaluate(tmp_path, b"weights", EXACT="0")  # (the smoke scale's setting)
    assert calls == ["rl-optimal", "rl-random"]
    assert sorted(p.name for p in evals.iterdir() if p.is_symlink()) == ["rl.best-optimal", "rl.best-random"]


def test_the_sft_data_comes_from_the_teacher_named(tmp_path: Path) -> None:
    for teacher, sub in ((None, "default"), ("teacher_centre", "centre")):
        env = {"TEACHER": teacher} if teacher else {}
        proc, argv = _train_args(tmp_path / sub, ("base/config.json",), **env)
        assert proc.returncode == 3, proc.stdout + proc.stderr
        assert argv[:2] == ["gen", "tictactoe"] and _flag(argv, "-m") == f"policy:{teacher or 'teacher'}"


def test_a_resume_with_another_teacher_is_refused_before_any_work(tmp_path: Path) -> None:
    done = ("base/config.json", "teacher.jsonl", "sft/final/config.json")
    proc, argv = _train_args(tmp_path / "a", done, TEACHER="teacher_centre")  # the data: the default teacher's
    assert proc.returncode == 2 and argv == []  # no rlvr command ran
    assert "SFT data came from policy:teacher, not TEACHER=teacher_centre" in proc.stderr
    (tmp_path / "b" / "run").mkdir(parents=True)
    (tmp_path / "b" / "run" / "teacher.name").write_text("teacher_centre\n")
    proc, argv = _train_args(tmp_path / "b", done, TEACHER="teacher_centre")  # recorded: the same player
    assert proc.returncode == 3 and argv[:2] == ["train", "tictactoe"]
