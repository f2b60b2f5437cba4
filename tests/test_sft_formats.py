"""`rlvr sft --data` takes what `rlvr eval` takes tasks from: JSONL, JSON, Parquet, and a saved
Hugging Face dataset; any other format is refused by name."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")
datasets = pytest.importorskip("datasets")
pq = pytest.importorskip("pyarrow.parquet")
pa = pytest.importorskip("pyarrow")

from rlvr.cli import main
from rlvr.commands.sft_source import as_jsonl
from rlvr.models import build_tiny_model

pytestmark = pytest.mark.usefixtures("one_thread")


def conversation(i: int) -> dict:
    return {
        "messages": [
            {"role": "user", "content": f"Play cell {i % 9}."},
            {"role": "assistant", "content": f"<move>{i % 9}</move>"},
        ]
    }


ROWS = [conversation(i) for i in range(6)]
TOOL_ROW = {
    "messages": [
        {"role": "user", "content": "Look it up."},
        {"role": "assistant", "content": None, "tool_calls": [{"function": {"name": "f", "arguments": "{}"}}]},
    ]
}


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    return build_tiny_model(tmp_path_factory.mktemp("tiny"), preset="tiny")


def read_back(path: str) -> list[dict]:
    return [json.loads(line) for line in Path(path).read_text(encoding="utf-8").splitlines()]


def test_parquet_trains(tiny_dir, tmp_path) -> None:
    data = tmp_path / "convs.parquet"
    pq.write_table(pa.Table.from_pylist(ROWS), data)
    out = tmp_path / "run"
    argv = ["sft", "-m", str(tiny_dir), "-d", str(data), "-o", str(out), "--steps", "1", "--eval-fraction", "0"]
    assert main([*argv, "-q"]) == 0
    assert (out / "final" / "config.json").is_file()
    assert read_back(str(out / "data.jsonl")) == ROWS  # what it trained on, row by row


def test_a_saved_dataset_trains(tiny_dir, tmp_path) -> None:
    saved = tmp_path / "saved"
    datasets.Dataset.from_list(ROWS).save_to_disk(str(saved))
    out = tmp_path / "run"
    argv = ["sft", "-m", str(tiny_dir), "-d", str(saved), "-o", str(out), "--steps", "1", "--eval-fraction", "0"]
    assert main([*argv, "-q"]) == 0
    assert (out / "final" / "config.json").is_file()
    assert read_back(str(out / "data.jsonl")) == ROWS


def test_arrow_nulls_are_dropped_and_a_dataset_dict_gives_its_train_split(tmp_path) -> None:
    saved = tmp_path / "dict"
    rows = [ROWS[0], TOOL_ROW]  # Arrow gives the user message `tool_calls: None`, the tool call `content: None`
    datasets.DatasetDict({"train": datasets.Dataset.from_list(rows)}).save_to_disk(str(saved))
    back = read_back(as_jsonl(str(saved), tmp_path / "out"))
    assert back[0] == ROWS[0]
    assert back[1]["messages"][1] == {
        "role": "assistant",
        "tool_calls": [{"function": {"name": "f", "arguments": "{}"}}],
    }


def test_json_is_converted_and_jsonl_is_read_as_it_is(tmp_path) -> None:
    (tmp_path / "a.json").write_text(json.dumps(ROWS))
    assert read_back(as_jsonl(str(tmp_path / "a.json"), tmp_path / "out")) == ROWS
    jsonl = str(tmp_path / "a.jsonl")
    assert as_jsonl(jsonl, tmp_path / "out2") == jsonl and not (tmp_path / "out2").exists()


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("convs.csv", "--data {path}: '.csv' is not a dataset format; expected .jsonl, .json"),
        ("folder", "--data {path} is a folder but not a saved dataset (Dataset.save_to_disk)"),
        ("missing.parquet", "dataset {path} does not exist"),
    ],
)
def test_unsupported_data_is_refused_by_name(tiny_dir, tmp_path, capsys, name, expected) -> None:
    path = tmp_path / name
    if name == "folder":
        path.mkdir()
    elif not name.startswith("missing"):
        path.write_text("a,b\n1,2\n")
    out = tmp_path / "run"
    assert main(["sft", "-m", str(tiny_dir), "-d", str(path), "-o", str(out), "--steps", "1", "-q"]) != 0
    err = capsys.readouterr().err
    assert expected.format(path=path) in err and len(err.strip().splitlines()) == 1, err
    assert not (out / "config.json").exists()


def test_hostile_text_converts_to_readable_json_lines(tmp_path) -> None:
    """A lone surrogate (valid in a JSON file's escapes, not in UTF-8) and NaN reach the trainer's
    line checks as JSON lines, as they would from a JSONL file; nothing half-written is left."""
    rows = [
        {"messages": [{"role": "user", "content": "hi \ud800 <think>"}, {"role": "assistant", "content": "ok"}]},
        {"messages": [{"role": "user", "content": "x"}, {"role": "assistant", "content": float("nan")}]},
    ]
    source = tmp_path / "hostile.json"
    source.write_text(json.dumps(rows))  # ASCII escapes: the surrogate is written as \ud800
    out = Path(as_jsonl(str(source), tmp_path / "run"))
    lines = out.read_text(encoding="utf-8").splitlines()
    assert json.loads(lines[0]) == rows[0] and len(lines) == 2
    assert [p.name for p in out.parent.iterdir()] == [out.name]
