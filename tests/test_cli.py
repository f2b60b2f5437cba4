"""The CLI on bad input: one clear line on stderr, non-zero exit, no traceback."""

from __future__ import annotations

import json

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
        (["eval", "reverse_text", "-m", "policy:oracle", "-n", "0"], "-n must be positive, got 0"),
        (["eval", "reverse_text", "-m", "policy:oracle", "-c", "-1"], "-c must be positive, got -1"),
        (["eval", "reverse_text", "-m", "policy:nobody"], "no reference policy 'policy:nobody'"),
    ],
)
def test_bad_input_gives_one_line(capsys, argv, expected) -> None:
    assert expected in _err(capsys, argv)


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
