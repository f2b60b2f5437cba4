"""The CLI on bad input: one clear line on stderr, non-zero exit, no traceback."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from rlvr.cli import main

pytest.importorskip("reverse_text")


def _err(capsys, argv) -> str:
    code = main(argv)
    out = capsys.readouterr()
    assert code != 0, out
    assert "Traceback" not in out.err and out.err.count("\n") == 1, out.err
    return out.err


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (
            ["eval", "no_such_env", "-m", "policy:oracle"],
            "no environment named 'no_such_env' is installed (installed: ",
        ),
        (["eval", "reverse_text", "-m", "policy:oracle", "-a", "{bad"], "-a must be a JSON object"),
        (["eval", "reverse_text", "-m", "policy:oracle", "-a", "[1]"], "-a must be a JSON object"),
        (["eval", "reverse_text", "-m", "policy:oracle", "-a", '{"nope": 1}'], "takes no argument 'nope'"),
        (["eval", "reverse_text", "-m", "policy:oracle", "-n", "0"], "-n must be a positive number of tasks, or -1"),
        (["eval", "reverse_text", "-m", "policy:oracle", "-c", "-1"], "-c must be positive, got -1"),
        (["eval", "reverse_text", "-m", "policy:nobody"], "no reference policy 'policy:nobody'"),
        (["eval", "reverse_txt", "-m", "policy:oracle"], "; did you mean 'reverse_text'?"),
        (
            ["eval", "reverse_text", "--bogus", "1"],
            "rlvr eval: error: unrecognized arguments: --bogus 1; see `rlvr eval",
        ),
        (["train", "reverse_text", "--bogus"], "rlvr train: error: unrecognized arguments: --bogus; see `rlvr train"),
    ],
)
def test_bad_input_gives_one_line(capsys, argv, expected) -> None:
    assert expected in _err(capsys, argv)


def test_a_name_like_no_installed_env_still_says_how_to_install_it(capsys) -> None:
    err = _err(capsys, ["eval", "zzzqq", "-m", "policy:oracle"])
    assert "did you mean" not in err and "pip install -e PATH" in err


def test_list_shows_kind_description_players_and_default_model(capsys) -> None:
    assert main(["list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    about = {line.split()[0]: (line, lines[i + 1]) for i, line in enumerate(lines) if not line.startswith(" ")}
    head, details = about["reverse_text"]
    assert "[single-turn] reverse a paragraph character by character" in head
    assert details.strip() == "players: policy:oracle policy:echo; default model: none (pass -m)"
    if "tictactoe" in about:
        head, details = about["tictactoe"]
        assert "[multi-turn] Tic-tac-toe" in head and "policy:optimal" in details
        assert details.endswith("tictactoe-tiny")  # the shipped model: `rlvr eval tictactoe` needs no -m
    if "python_math" in about:
        assert "[tool]" in about["python_math"][0]


def test_missing_api_key_variable(capsys, monkeypatch, tmp_path) -> None:
    monkeypatch.delenv("RLVR_TEST_KEY", raising=False)
    err = _err(capsys, ["eval", "reverse_text", "-m", "gpt-x", "-k", "RLVR_TEST_KEY", "-o", str(tmp_path / "r")])
    assert "RLVR_TEST_KEY" in err


def test_eval_saves_resumes_and_refuses_corrupt_results(capsys, tmp_path) -> None:
    out = tmp_path / "run"
    argv = ["eval", "reverse_text", "-m", "policy:oracle", "-n", "4", "-r", "2", "-q", "-o", str(out)]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert "saved 8 rollouts" in printed and "reward (total)" in printed
    meta = json.loads((out / "metadata.json").read_text())
    assert meta["status"] == "complete" and meta["rollouts"] == 8
    # a second run into the same folder must not overwrite it
    assert "already holds results" in _err(capsys, argv)
    # resuming a complete run adds nothing
    assert main(argv + ["--resume"]) == 0
    assert "saved 8 rollouts" in capsys.readouterr().out
    lines = (out / "results.jsonl").read_text().splitlines()
    assert len(lines) == 8
    (out / "results.jsonl").write_text("not json\n" + "\n".join(lines[1:]) + "\n")
    before = (out / "results.jsonl").read_text()
    assert "results.jsonl:1 is not an rlvr rollout" in _err(capsys, argv + ["--resume"])
    assert (out / "results.jsonl").read_text() == before  # nothing lost


def test_unreachable_endpoint_fails_fast_and_writes_nothing(capsys, tmp_path) -> None:
    import socket

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out = tmp_path / "run"
    err = _err(
        capsys,
        ["eval", "reverse_text", "-m", "some-model", "-b", f"http://127.0.0.1:{port}/v1", "-n", "3", "-o", str(out)],
    )
    assert f"cannot reach http://127.0.0.1:{port}/v1" in err and "-b" in err
    assert not out.exists()


# ---- a local model never runs unbounded ------------------------------------------------------


def test_eval_of_a_local_model_defaults_to_a_token_limit_and_prints_it(capsys, monkeypatch, tmp_path, scramble) -> None:
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    import rlvr.commands.sampling
    import rlvr.registry
    from rlvr import SingleTurnEnv
    from rlvr.models import build_tiny_model
    from rlvr.types import SamplingArgs

    model_dir = build_tiny_model(tmp_path / "tiny")  # random weights: replies never end early
    model = scramble(transformers.AutoModelForCausalLM.from_pretrained(model_dir))
    model.save_pretrained(model_dir)

    def load(name, **env_args):
        env = SingleTurnEnv([{"question": "hi"}], sampling=SamplingArgs(temperature=1.0))  # no limit of its own
        env.name, env.env_args = name, env_args
        return env

    monkeypatch.setattr(rlvr.registry, "load_environment", load)
    monkeypatch.setattr(rlvr.commands.sampling, "DEFAULT_MAX_TOKENS", 12)
    saved = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        out = tmp_path / "run"
        assert main(["eval", "unbounded", "-m", str(model_dir), "-n", "1", "-r", "2", "-q", "-o", str(out)]) == 0
        assert "unbounded / " in capsys.readouterr().out.splitlines()[0]
        rows = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
        assert [r["usage"]["completion_tokens"] for r in rows] == [12, 12]
        meta = json.loads((out / "metadata.json").read_text())
        assert meta["sampling"]["max_tokens"] == 12
        # -t still wins over the default
        main(
            [
                "eval",
                "unbounded",
                "-m",
                str(model_dir),
                "-n",
                "1",
                "-r",
                "1",
                "-t",
                "5",
                "-q",
                "-o",
                str(tmp_path / "t"),
            ]
        )
    finally:
        torch.set_num_threads(saved)
    assert "1 tasks x 1 rollouts, max 5 tokens a turn" in capsys.readouterr().out
    assert json.loads((tmp_path / "t" / "results.jsonl").read_text())["usage"]["completion_tokens"] == 5


def test_eval_of_an_endpoint_keeps_the_endpoints_limit(openai_server, capsys, monkeypatch, tmp_path) -> None:
    import rlvr.registry
    from rlvr import SingleTurnEnv
    from rlvr.types import SamplingArgs

    def load(name, **env_args):
        env = SingleTurnEnv([{"question": "hi"}], sampling=SamplingArgs(temperature=1.0))
        env.name, env.env_args = name, env_args
        return env

    monkeypatch.setattr(rlvr.registry, "load_environment", load)
    argv = [
        "eval",
        "open",
        "-m",
        "m",
        "-b",
        openai_server.base_url,
        "-k",
        "RLVR_TEST_NO_SUCH_KEY",
        "-n",
        "1",
        "-r",
        "1",
    ]
    argv += ["-q", "-o", str(tmp_path / "r")]
    assert main(argv) == 0
    assert "no token limit but the endpoint's a turn" in capsys.readouterr().out.splitlines()[0]


@pytest.mark.parametrize(
    ("argv", "status"),
    [
        (["list"], {141}),
        # argparse of Python 3.11.7 swallows its own write errors and exits 0; that of 3.11.2
        # (Debian 12) lets them reach rlvr's handler: 141
        (["--help"], {0, 141}),
        (["train", "--help"], {0, 141}),
        (["eval", "reverse_text", "-m", "policy:oracle", "-n", "2", "-r", "1", "-q", "-o", "{tmp}/run"], {141}),
    ],
)
def test_a_reader_that_closes_early_gets_no_traceback(argv: list[str], status: set[int], tmp_path) -> None:
    """`rlvr list | head`: the pipe is closed before the command writes; 141 as for SIGPIPE, stderr empty."""
    command = [sys.executable, "-m", "rlvr.cli", *(a.format(tmp=tmp_path) for a in argv)]
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()  # the reader is gone before the first line
    with proc.stderr:
        err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) in status, err
    assert err == ""


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="needs /proc: a folder nobody, root included, can write")
@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (
            ["gen", "reverse_text", "-m", "policy:oracle", "-n", "1", "-d", "/proc/x.jsonl"],
            "cannot write to /proc/x.jsonl",
        ),
        (["init", "my_env", "-o", "/proc/nope"], "cannot write to /proc/nope"),
        (
            ["eval", "reverse_text", "-m", "policy:oracle", "-n", "1", "--save-dataset", "/proc/nope"],
            "for --save-dataset",
        ),
    ],
)
def test_an_output_under_proc_is_one_line(capsys, tmp_path, argv, expected) -> None:
    """Three of 83 bad inputs ended in a traceback (FileNotFoundError from mkdir or open)."""
    if argv[0] == "eval":
        pytest.importorskip("datasets")
        argv = [*argv, "-o", str(tmp_path / "run")]
    assert expected in _err(capsys, argv)


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        ('{"memory_mb": 1}', "memory_mb must be between 32 and 1048576 (MiB), got 1"),
        ('{"memory_mb": 1e12}', "argument memory_mb must be an integer, got 1000000000000.0"),
        ('{"memory_mb": "512"}', 'argument memory_mb must be an integer, got "512"'),
        ('{"timeout_s": true}', "argument timeout_s must be a number, got true"),
    ],
)
def test_env_arguments_of_the_wrong_type_or_range_are_one_line(capsys, args, expected) -> None:
    """python_math took memory_mb 1 or 1e12 and exited 0, every tool call failing (Python cannot
    start in 1 MiB; a float is no rlimit)."""
    pytest.importorskip("python_math")
    assert expected in _err(capsys, ["eval", "python_math", "-m", "policy:oracle", "-n", "1", "-a", args])
