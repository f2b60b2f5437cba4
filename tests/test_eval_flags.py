"""`rlvr eval` / `rlvr gen` flags: -S sampling JSON, --resume without -o, extending a run,
`[tool.rlvr.eval]` defaults from an environment's pyproject.toml."""

from __future__ import annotations

import importlib
import json
import sys
from importlib.metadata import EntryPoint
from pathlib import Path

import pytest
from test_cli import _err  # one line on stderr, non-zero exit

from rlvr import registry
from rlvr.cli import main
from rlvr.registry import GROUP

pytest.importorskip("reverse_text")

ORACLE = ["eval", "reverse_text", "-m", "policy:oracle", "-q"]


def _meta(run: Path) -> dict:
    return json.loads((run / "metadata.json").read_text())


def _keys(run: Path) -> list[tuple[str, int]]:
    rows = [json.loads(line) for line in (run / "results.jsonl").read_text().splitlines()]
    return [(r["task_id"], r["rollout_index"]) for r in rows]


# ---- -S / --sampling-args ------------------------------------------------------------------------


def test_sampling_json_sets_sampling_and_named_flags_win(tmp_path) -> None:
    out = tmp_path / "a"
    argv = [*ORACLE, "-n", "1", "-r", "1", "-o", str(out), "-T", "0.5", "-t", "32"]
    assert main([*argv, "-S", '{"top_p": 0.9, "max_tokens": 64, "temperature": 0.1, "stop": ["</x>"]}']) == 0
    sampling = _meta(out)["sampling"]
    assert (sampling["top_p"], sampling["max_tokens"], sampling["temperature"]) == (0.9, 32, 0.5)
    assert sampling["stop"] == ["</x>"]
    out = tmp_path / "b"
    assert main([*ORACLE, "-n", "1", "-r", "1", "-o", str(out), "-S", '{"max_tokens": 64, "temperature": 0.1}']) == 0
    assert (_meta(out)["sampling"]["max_tokens"], _meta(out)["sampling"]["temperature"]) == (64, 0.1)


@pytest.mark.parametrize("command", ["eval", "gen"])
@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ('{"top_k": 5}', "-S: unknown sampling key 'top_k'; valid keys: max_tokens, temperature, top_p, stop"),
        ('{"seed": 5}', "unknown sampling key 'seed'"),
        ("{top_p: 1}", "-S must be a JSON object, got '{top_p: 1}' (Expecting property name"),
        ("[1]", "-S must be a JSON object"),
        ('{"top_p": 2}', "-S: top_p must be a number in (0, 1], got 2"),
        ('{"max_tokens": "64"}', '-S: max_tokens must be an integer >= 1, got "64"'),
        ('{"stop": "x"}', "-S: stop must be a list of strings"),
    ],
)
def test_bad_sampling_json_gives_one_line(capsys, tmp_path, command, value, expected) -> None:
    argv = [command, "reverse_text", "-m", "policy:oracle", "-n", "1", "-q", "-o", str(tmp_path / "x"), "-S", value]
    assert expected in _err(capsys, argv)


def test_gen_samples_with_the_json(tmp_path) -> None:
    out = tmp_path / "d.jsonl"
    assert (
        main(["gen", "reverse_text", "-m", "policy:oracle", "-n", "2", "-q", "-o", str(out), "-S", '{"top_p": 0.5}'])
        == 0
    )
    assert len(out.read_text().splitlines()) == 2


# ---- extending a run ------------------------------------------------------------------------------


def test_resume_adds_tasks_and_rollouts_and_keeps_the_old_ones(capsys, tmp_path) -> None:
    out = tmp_path / "run"
    assert main([*ORACLE, "-n", "2", "-r", "1", "-o", str(out)]) == 0
    first = (out / "results.jsonl").read_text()
    assert main([*ORACLE, "-n", "4", "-r", "2", "-o", str(out), "--resume"]) == 0
    assert "saved 8 rollouts" in capsys.readouterr().out
    assert (out / "results.jsonl").read_text().startswith(first)  # the old rollouts, untouched
    keys = _keys(out)
    assert len(keys) == len(set(keys)) == 8
    meta = _meta(out)
    assert (meta["num_tasks"], meta["rollouts_per_task"], meta["rollouts"], meta["status"]) == (4, 2, 8, "complete")
    assert "not drop them: pass 4 or more" in _err(capsys, [*ORACLE, "-n", "3", "-r", "2", "-o", str(out), "--resume"])
    err = _err(capsys, [*ORACLE, "-n", "4", "-r", "2", "-T", "0.5", "-o", str(out), "--resume"])
    assert "sampling.temperature was 1.0, now 0.5; its rollouts would not compare" in err
    assert "split was 'eval', now 'train'" in _err(capsys, [*ORACLE, "--split", "train", "-o", str(out), "--resume"])
    assert len(_keys(out)) == 8


# ---- --resume without -o ---------------------------------------------------------------------------


def test_resume_without_output_picks_the_newest_unfinished_run(capsys, tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert "no earlier run of reverse_text / policy_oracle under runs/eval" in _err(capsys, [*ORACLE, "--resume"])
    old, new = (Path(f"runs/eval/reverse_text--policy_oracle--20260101-00000{i}") for i in (0, 1))
    for run in (old, new):
        assert main([*ORACLE, "-n", "2", "-r", "1", "-o", str(run)]) == 0
    capsys.readouterr()
    assert main([*ORACLE, "-n", "2", "-r", "1", "--resume"]) == 0  # all finished: the newest
    assert f"resuming {new}" in capsys.readouterr().out
    (old / "metadata.json").write_text(json.dumps({**_meta(old), "status": "interrupted"}))
    (old / "results.jsonl").write_text((old / "results.jsonl").read_text().splitlines()[0] + "\n")
    assert main([*ORACLE, "-n", "2", "-r", "1", "--resume"]) == 0  # the unfinished one
    assert f"resuming {old}" in capsys.readouterr().out
    assert len(_keys(old)) == 2 and _meta(old)["status"] == "complete"


# ---- [tool.rlvr.eval] in the env's pyproject.toml ----------------------------------------------------


@pytest.fixture
def guess_it(tmp_path, monkeypatch):
    """A scaffolded multi-turn env `guess-it`, registered without pip; its pyproject.toml."""
    assert main(["init", "guess-it", "--kind", "multi", "-o", str(tmp_path)]) == 0
    monkeypatch.syspath_prepend(str(tmp_path / "guess-it"))
    points = {"guess-it": EntryPoint("guess-it", "guess_it:load_environment", GROUP)}
    monkeypatch.setattr(registry, "_entry_points", lambda: points)
    try:
        yield tmp_path / "guess-it" / "pyproject.toml"
    finally:
        importlib.invalidate_caches()
        for mod in [m for m in sys.modules if m == "guess_it" or m.startswith("guess_it.")]:
            del sys.modules[mod]


def test_env_pyproject_defaults_apply_and_flags_win(capsys, tmp_path, guess_it) -> None:
    guess_it.write_text(
        guess_it.read_text() + "\n[tool.rlvr.eval]\nnum_tasks = 3\nrollouts = 2\nmax_tokens = 40\ntop_p = 0.8\n"
    )
    argv = ["eval", "guess-it", "-m", "policy:binary_search", "-q"]
    assert main([*argv, "-o", str(tmp_path / "a")]) == 0
    assert f"defaults from {guess_it}: num_tasks=3, rollouts=2, max_tokens=40, top_p=0.8" in capsys.readouterr().out
    meta = _meta(tmp_path / "a")
    assert (meta["num_tasks"], meta["rollouts_per_task"], meta["sampling"]["max_tokens"]) == (3, 2, 40)
    assert meta["sampling"]["top_p"] == 0.8
    assert main([*argv, "-n", "1", "-t", "20", "-S", '{"top_p": 0.9}', "-o", str(tmp_path / "b")]) == 0
    meta = _meta(tmp_path / "b")
    assert (meta["num_tasks"], meta["rollouts_per_task"], meta["sampling"]["max_tokens"]) == (1, 2, 20)
    assert meta["sampling"]["top_p"] == 0.9


def test_env_pyproject_unknown_key_gives_one_line(capsys, tmp_path, guess_it) -> None:
    guess_it.write_text(guess_it.read_text() + "\n[tool.rlvr.eval]\nnum_examples = 3\n")
    err = _err(capsys, ["eval", "guess-it", "-m", "policy:binary_search", "-q", "-o", str(tmp_path / "a")])
    assert "[tool.rlvr.eval]: unknown key 'num_examples'; valid keys: num_tasks, rollouts, concurrency, split" in err
