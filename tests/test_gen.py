"""`rlvr gen`: play an environment, keep rollouts passing a filter, write a chat dataset."""

from __future__ import annotations

import json

import pytest

import rlvr.registry
from rlvr import Policy, Rubric, SingleTurnEnv, ToolEnv
from rlvr.cli import main


def correct(completion, answer) -> float:
    return float(completion[-1]["content"] == answer)


def short(completion) -> float:
    return float(len(completion[-1]["content"]) <= 3)


def _reply(messages, rng) -> str:
    question = messages[-1]["content"]
    if question == "boom":
        raise RuntimeError("the player crashed")
    return question.upper() if question in ("a", "bb") else question  # right on "a" and "bb"


class EchoEnv(SingleTurnEnv):
    """Answer = the question upper-cased. Tasks: a (right, short), bb (right, short),
    cccc (wrong, long), dd (wrong, short), boom (the player raises)."""

    def __init__(self):
        rows = [{"id": q, "question": q, "answer": q.upper()} for q in ("a", "bb", "cccc", "dd", "boom")]
        super().__init__(rows, system_prompt="Shout.", rubric=Rubric([correct, short], weights=[1.0, 0.5]))
        self.calls = 0

    def policies(self):
        def make():
            def fn(messages, rng):
                self.calls += 1
                return _reply(messages, rng)

            return Policy(fn, name="shout")

        return {"shout": make}


def lookup(term: str) -> str:
    """Look a term up.

    Args:
        term: what to look up
    """
    return term


@pytest.fixture
def envs(monkeypatch):
    made = {}

    def load(name, **env_args):
        if name == "echo":
            made[name] = EchoEnv()
        elif name == "hostile":
            made[name] = SingleTurnEnv([{"id": "0", "question": "q\ud800"}], rubric=Rubric([short]))
            made[name].policies = lambda: {"odd": lambda: Policy(lambda m, rng: "\udfff\x00", name="odd")}
        elif name == "tooly":
            made[name] = ToolEnv([{"id": "0", "question": "q"}], tools=[lookup])
            made[name].policies = lambda: {"plain": lambda: Policy(lambda m, rng: "done", name="plain")}
        else:
            raise AssertionError(name)
        made[name].name, made[name].env_args = name, dict(env_args)
        return made[name]

    monkeypatch.setattr(rlvr.registry, "load_environment", load)
    return made


def _lines(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_keeps_rollouts_passing_the_filter_and_says_why_others_dropped(envs, tmp_path, capsys) -> None:
    out = tmp_path / "data" / "sft.jsonl"
    argv = [
        "gen",
        "echo",
        "-m",
        "policy:shout",
        "-r",
        "2",
        "-q",
        "-o",
        str(out),
        "--filter",
        "correct == 1 and short > 0",
    ]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    rows = _lines(out)
    assert sorted((r["task_id"], r["rollout_index"]) for r in rows) == [
        ("a", 0),
        ("a", 1),
        ("bb", 0),
        ("bb", 1),
    ]
    row = next(r for r in rows if r["task_id"] == "bb")
    assert row["messages"] == [
        {"role": "system", "content": "Shout."},
        {"role": "user", "content": "bb"},
        {"role": "assistant", "content": "BB"},
    ]
    assert row["rewards"] == {"correct": 1.0, "short": 1.0} and row["reward"] == 1.5
    assert row["env"] == "echo" and row["model"] == "policy:shout" and "tools" not in row
    assert "kept 4 of 10 rollouts" in printed
    assert "dropped 4: failed `correct == 1`" in printed  # cccc and dd, twice each
    assert "dropped 2: error (RuntimeError)" in printed


def test_without_filter_keeps_every_rollout_but_errors(envs, tmp_path, capsys) -> None:
    out = tmp_path / "all.jsonl"
    assert main(["gen", "echo", "-m", "policy:shout", "-n", "4", "-q", "-d", str(out)]) == 0
    assert [r["task_id"] for r in _lines(out)] == ["a", "bb", "cccc", "dd"]
    assert "kept 4 of 4 rollouts" in capsys.readouterr().out


def test_tool_environments_record_their_tool_schemas(envs, tmp_path) -> None:
    out = tmp_path / "tools.jsonl"
    assert main(["gen", "tooly", "-m", "policy:plain", "-q", "-d", str(out)]) == 0
    [row] = _lines(out)
    assert row["tools"][0]["function"]["name"] == "lookup"


def _error(capsys, argv) -> str:
    code = main(argv)
    err = capsys.readouterr().err
    assert code != 0 and "Traceback" not in err and err.count("\n") == 1, err
    return err


def test_unknown_filter_name_fails_before_playing(envs, tmp_path, capsys) -> None:
    err = _error(
        capsys,
        [
            "gen",
            "echo",
            "-m",
            "policy:shout",
            "-d",
            str(tmp_path / "x.jsonl"),
            "--filter",
            "corect == 1",
        ],
    )
    assert "unknown 'corect'; available: completion_tokens, correct, reward, short, truncated, turns" in err
    assert envs["echo"].calls == 0 and not (tmp_path / "x.jsonl").exists()


def test_bad_filter_syntax_and_existing_output_are_one_line_errors(envs, tmp_path, capsys) -> None:
    out = tmp_path / "x.jsonl"
    assert "bad filter" in _error(
        capsys, ["gen", "echo", "-m", "policy:shout", "-d", str(out), "--filter", "correct >"]
    )
    out.write_text("precious\n")
    assert "already exists" in _error(capsys, ["gen", "echo", "-m", "policy:shout", "-d", str(out)])
    assert out.read_text() == "precious\n"
    assert main(["gen", "echo", "-m", "policy:shout", "-q", "-d", str(out), "--overwrite", "-n", "1"]) == 0
    assert len(_lines(out)) == 1


def test_nothing_kept_exits_non_zero(envs, tmp_path, capsys) -> None:
    out = tmp_path / "none.jsonl"
    assert main(["gen", "echo", "-m", "policy:shout", "-q", "-d", str(out), "--filter", "reward > 10"]) == 1
    assert "kept 0 of 5 rollouts" in capsys.readouterr().out


def test_local_model_directory_plays_through_the_batched_client(envs, tmp_path, capsys) -> None:
    torch = pytest.importorskip("torch")
    from rlvr.models import build_tiny_model

    saved = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        model_dir = build_tiny_model(tmp_path / "tiny")
        out = tmp_path / "local.jsonl"
        assert (
            main(
                [
                    "gen",
                    "echo",
                    "-m",
                    str(model_dir),
                    "-r",
                    "2",
                    "-t",
                    "8",
                    "-q",
                    "-d",
                    str(out),
                    "--filter",
                    "reward >= 0",
                ]
            )
            == 0
        )
    finally:
        torch.set_num_threads(saved)
    printed = capsys.readouterr().out
    rows = _lines(out)
    assert "kept 10 of 10 rollouts" in printed and len(rows) == 10  # "boom" only crashes the policy
    assert all(r["model"] == str(model_dir) and r["messages"][-1]["role"] == "assistant" for r in rows)


def test_a_folder_that_holds_no_model_is_a_one_line_error(envs, tmp_path, capsys) -> None:
    (tmp_path / "empty").mkdir()
    err = _error(capsys, ["gen", "echo", "-m", str(tmp_path / "empty"), "-d", str(tmp_path / "x.jsonl")])
    assert "cannot load a causal language model from" in err


def test_any_text_is_written_as_strict_utf8_json(envs, tmp_path) -> None:
    """Lone surrogates (valid JSON a model may send, not UTF-8) are written as their escape."""
    out = tmp_path / "odd.jsonl"
    assert main(["gen", "hostile", "-m", "policy:odd", "-q", "-d", str(out)]) == 0
    [row] = [json.loads(line) for line in out.read_bytes().decode("utf-8").splitlines()]
    assert [m["content"] for m in row["messages"]] == ["q\ud800", "\udfff\x00"]
