"""One flag vocabulary across eval, gen, sft and play, no abbreviated flags, renamed flags that
still work with a note, the messages a newcomer meets, and which temperature a run samples at."""

from __future__ import annotations

import json

import pytest
from test_cli import _err

import rlvr.commands.sft
from rlvr.cli import build_parser, main

pytest.importorskip("reverse_text")

ORACLE = ["reverse_text", "-m", "policy:oracle"]


_fails = _err  # a non-zero exit with one line on stderr and no traceback


@pytest.mark.parametrize(
    ("argv", "meant"),
    [
        (["eval", *ORACLE, "--temp", "0"], "--temperature"),
        (["eval", *ORACLE, "--num-task", "1"], "--num-tasks"),
        (["gen", *ORACLE, "--overwr"], "--overwrite"),
        (["train", "reverse_text", "--step", "3"], "--steps"),
    ],
)
def test_a_prefix_of_a_flag_is_refused_naming_the_flag(capsys, argv, meant) -> None:
    err = _fails(capsys, argv)
    assert "unrecognized arguments: --" in err and f"did you mean {meant}" in err, err


def test_no_parser_takes_abbreviations() -> None:
    from rlvr.cli import _parsers

    parsers = _parsers(build_parser())
    assert len(parsers) >= 10 and not [p.prog for p in parsers if p.allow_abbrev]


@pytest.mark.parametrize(
    ("command", "shown"),
    [
        ("eval", ["-m MODEL", "-t MAX_TOKENS", "-T TEMPERATURE", "-a JSON", "-o DIR", "-n NUM_TASKS"]),
        ("gen", ["-m MODEL", "-t MAX_TOKENS", "-T TEMPERATURE", "-a JSON", "-o DIR", "-d FILE"]),
        ("sft", ["-m PATH", "-d FILE", "-o DIR", "--steps N"]),
        ("play", ["-m MODEL", "-t MAX_TOKENS", "-T TEMPERATURE", "-a JSON"]),
    ],
)
def test_usage_lines_show_the_short_flags(command, shown) -> None:
    sub = next(a for a in build_parser()._actions if hasattr(a, "choices") and a.choices)
    usage = " ".join(sub.choices[command].format_usage().split())
    assert [flag for flag in shown if flag not in usage] == [], usage


@pytest.fixture
def sft_config(monkeypatch):
    """What `rlvr sft` would train with, without training."""
    seen = {}

    def fake_run(args):
        seen.update(vars(args))
        return 0

    monkeypatch.setattr(rlvr.commands.sft, "run", fake_run)
    return seen


def test_sft_takes_steps_and_o_as_train_does_and_the_old_spellings_with_a_note(sft_config, capsys) -> None:
    assert main(["sft", "-m", "M", "-d", "D", "-o", "OUT", "--steps", "7"]) == 0
    assert (sft_config["max_steps"], sft_config["output_dir"]) == (7, "OUT")
    assert capsys.readouterr().err == ""
    assert main(["sft", "-m", "M", "-d", "D", "--output-dir", "OLD", "--max-steps", "5"]) == 0
    assert (sft_config["max_steps"], sft_config["output_dir"]) == (5, "OLD")
    assert capsys.readouterr().err.splitlines() == [
        "rlvr sft: note: --output-dir is deprecated; use --output",
        "rlvr sft: note: --max-steps is deprecated; use --steps",
    ]


def test_sft_without_an_output_folder_is_one_line(capsys) -> None:
    assert "-o/--output DIR is required" in _fails(capsys, ["sft", "-m", "M", "-d", "D"])


def test_gen_o_names_a_folder_d_a_file_and_o_file_still_works(tmp_path, capsys) -> None:
    gen = ["gen", *ORACLE, "-n", "2", "-q"]
    (tmp_path / "there").mkdir()
    assert main([*gen, "-o", f"{tmp_path / 'there'}/"]) == 0  # a folder, given with its slash
    assert len((tmp_path / "there" / "data.jsonl").read_text().splitlines()) == 2
    assert f"-> {tmp_path / 'there' / 'data.jsonl'}" in capsys.readouterr().out
    assert main([*gen, "-o", str(tmp_path / "new")]) == 0  # a folder made for it
    assert (tmp_path / "new" / "data.jsonl").is_file()
    assert main([*gen, "-d", str(tmp_path / "teacher.jsonl")]) == 0
    assert json.loads((tmp_path / "teacher.jsonl").read_text().splitlines()[0])["env"] == "reverse_text"
    capsys.readouterr()
    assert main([*gen, "-o", str(tmp_path / "old.jsonl")]) == 0  # the earlier spelling of -d
    assert (tmp_path / "old.jsonl").is_file()
    assert "note: -o FILE is deprecated; use -d " in capsys.readouterr().err
    err = _fails(capsys, [*gen, "-o", str(tmp_path / "a"), "-d", str(tmp_path / "b.jsonl")])
    assert "not both" in err
    assert "-o DIR" in _fails(capsys, gen)


def test_a_negative_task_count_names_the_real_rule(capsys) -> None:
    err = _fails(capsys, ["eval", *ORACLE, "-n", "-5"])
    assert "-n must be a positive number of tasks, or -1 for all of them; got -5" in err


def test_an_unknown_env_argument_gets_a_did_you_mean(capsys) -> None:
    err = _fails(capsys, ["eval", *ORACLE, "-a", '{"num_task": 3}'])
    assert "takes no argument 'num_task'; did you mean 'num_tasks'? it accepts: num_tasks, " in err


def test_the_install_hint_names_where_the_env_really_is(capsys, monkeypatch, tmp_path) -> None:
    monkeypatch.chdir(tmp_path)
    err = _fails(capsys, ["eval", "zzzqq", "-m", "policy:oracle"])
    assert "environments/zzzqq" not in err and "`pip install -e PATH`" in err and "rlvr init zzzqq" in err
    (tmp_path / "zzzqq").mkdir()
    (tmp_path / "zzzqq" / "pyproject.toml").write_text("[project]\nname = 'zzzqq'\n")
    assert "install its package with `pip install -e zzzqq`" in _fails(capsys, ["eval", "zzzqq", "-m", "x"])


def test_a_training_run_folder_as_model_says_which_folder_is_the_model(capsys, tmp_path) -> None:
    pytest.importorskip("torch")
    run = tmp_path / "sft"
    (run / "final").mkdir(parents=True)
    (run / "config.json").write_text('{"model": "x"}')  # the run's own, as `rlvr train` writes it
    (run / "final" / "config.json").write_text("{}")
    err = _fails(capsys, ["eval", "reverse_text", "-m", str(run), "-n", "1"])
    assert f"{run} is a training run's folder, not a model; did you mean {run / 'final'}?" in err
    (run / "final" / "config.json").unlink()
    (run / "checkpoints" / "step_000050" / "model").mkdir(parents=True)
    (run / "checkpoints" / "step_000050" / "model" / "config.json").write_text("{}")
    err = _fails(capsys, ["eval", "reverse_text", "-m", str(run), "-n", "1"])
    assert f"its last checkpoint's model is {run / 'checkpoints' / 'step_000050' / 'model'}" in err


def test_eval_says_which_temperature_it_samples_at(capsys, tmp_path) -> None:
    assert main(["eval", *ORACLE, "-n", "1", "-r", "1", "-q", "-o", str(tmp_path / "a")]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line for line in lines if line.startswith("sampling at T=")] == [
        "sampling at T=1 (the environment's default); -T 0 for greedy"
    ]
    assert main(["eval", *ORACLE, "-n", "1", "-r", "1", "-q", "-T", "0", "-o", str(tmp_path / "b")]) == 0
    assert "sampling at T=0 (-T): greedy" in capsys.readouterr().out.splitlines()


def test_play_says_which_temperature_it_samples_at(capsys, monkeypatch) -> None:
    pytest.importorskip("rlvr_tictactoe")
    import builtins
    import itertools

    cells = itertools.cycle([str(i) for i in range(9)])
    monkeypatch.setattr(builtins, "input", lambda prompt="": next(cells))
    argv = ["play", "tictactoe", "-m", "policy:optimal", "--first", "me", "--games", "1", "--seed", "3"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "policy:optimal: sampling at T=1 (the environment's default); -T 0 for greedy" in out
    assert "vs policy:optimal at T=1: you won 0" in out
