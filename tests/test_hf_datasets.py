"""Hugging Face datasets in and out: tasks from a Dataset, a DatasetDict, JSONL and Parquet files
(with column mapping and errors that name the bad row); an eval's rollouts as a Dataset; `rlvr
gen` output through `load_dataset("json")`."""

from __future__ import annotations

import json

import pytest

datasets = pytest.importorskip("datasets")

from rlvr.cli import main
from rlvr.clients.policy import Policy
from rlvr.engine import run_rollouts
from rlvr.envs.multiturn import SingleTurnEnv
from rlvr.errors import UsageError

ROWS = [{"problem": f"What is {i} + 1?", "solution": i + 1, "info": json.dumps({"i": i})} for i in range(5)]
COLUMNS = {"question": "problem", "answer": "solution"}


@pytest.fixture(autouse=True)
def quiet_datasets(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "hf-cache"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    datasets.disable_progress_bars()


def test_tasks_from_a_dataset_and_a_dataset_dict() -> None:
    rows = datasets.Dataset.from_list(ROWS)
    env = SingleTurnEnv(rows, columns=COLUMNS)
    assert [(t.id, t.question, t.answer, dict(t.info)) for t in env.dataset[:2]] == [
        ("0", "What is 0 + 1?", "1", {"i": 0}),
        ("1", "What is 1 + 1?", "2", {"i": 1}),
    ]
    splits = datasets.DatasetDict(train=rows, test=rows.select(range(2)))
    env = SingleTurnEnv(splits, columns=COLUMNS)
    assert len(env.tasks("train")) == 5 and [t.id for t in env.tasks("eval")] == ["0", "1"]
    assert len(SingleTurnEnv({"train": ROWS, "validation": ROWS[:1]}, columns=COLUMNS).tasks("eval")) == 1
    with pytest.raises(UsageError, match=r"needs a 'train' split; it has \['test'\]"):
        SingleTurnEnv(datasets.DatasetDict(test=rows), columns=COLUMNS)


def test_tasks_from_jsonl_and_parquet_files(tmp_path) -> None:
    jsonl = tmp_path / "tasks.jsonl"
    jsonl.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    parquet = tmp_path / "tasks.parquet"
    datasets.Dataset.from_list(ROWS).to_parquet(str(parquet))
    from_jsonl = SingleTurnEnv(jsonl, columns=COLUMNS).dataset
    assert SingleTurnEnv(str(parquet), columns=COLUMNS).dataset == from_jsonl and len(from_jsonl) == 5
    jsonl.write_text('{"question": "ok"}\n[1, 2]\n')
    with pytest.raises(UsageError, match="tasks.jsonl line 2 is a JSON list, not an object"):
        SingleTurnEnv(jsonl)
    csv = tmp_path / "tasks.csv"
    csv.touch()
    with pytest.raises(UsageError, match="expected .jsonl, .json or .parquet, got '.csv'"):
        SingleTurnEnv(csv)


@pytest.mark.parametrize("as_dataset", [False, True])
def test_a_bad_row_is_named_when_the_env_is_built_not_in_the_run(as_dataset) -> None:
    rows = [{"id": "a", "question": "fine", "text": "x"}, {"id": "x7", "question": None, "text": "no question here"}]
    source = datasets.Dataset.from_list(rows) if as_dataset else rows
    no_value = r"row 1 \(id 'x7'\) has no value in the columns 'prompt', 'question' .* with a value: \['id', 'text'\]"
    with pytest.raises(UsageError, match=no_value):
        SingleTurnEnv(source)
    with pytest.raises(UsageError, match=r"row 0: prompt must be text or a list of \{role, content\} messages"):
        SingleTurnEnv([{"prompt": ["just", "strings"]}])
    with pytest.raises(UsageError, match="row 0: info is text but not JSON"):
        SingleTurnEnv([{"question": "q", "info": "{oops"}])


async def test_a_row_mapping_of_columns_plays() -> None:
    env = SingleTurnEnv([{"q": "hello", "a": "HELLO"}], columns={"question": "q", "answer": "a"})
    [rollout] = await run_rollouts(env, Policy(lambda messages, rng: messages[-1]["content"].upper()), env.dataset)
    assert rollout.error is None and rollout.answer == "HELLO" and rollout.turns[0].completion.text == "HELLO"


def test_eval_saves_the_rollouts_as_a_dataset(tmp_path, capsys) -> None:
    out, saved = tmp_path / "run", tmp_path / "dataset"
    argv = ["eval", "reverse_text", "-m", "policy:oracle", "-n", "3", "-r", "2", "-q", "-o", str(out)]
    assert main([*argv, "--save-dataset", str(saved)]) == 0
    assert f"saved the dataset (6 rows) to {saved}" in capsys.readouterr().out
    data = datasets.load_from_disk(str(saved))
    for column in ("prompt", "completion", "answer", "task", "reward", "lcs_reward", "format_reward", "info"):
        assert column in data.column_names
    records = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert sorted(data["task_id"]) == sorted(r["task_id"] for r in records) and set(data["task"]) == {"reverse_text"}
    row = data[0]
    assert row["reward"] == row["lcs_reward"] == 1.0 and row["prompt"][0]["role"] == "system"
    assert row["completion"][0]["content"].startswith("<reversed_text>") and json.loads(row["info"])["words"] > 0


def test_push_to_hub_fails_with_one_line_without_a_token_or_a_network(tmp_path, capsys, monkeypatch) -> None:
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))  # no stored token
    monkeypatch.delenv("HF_TOKEN", raising=False)
    argv = ["eval", "reverse_text", "-m", "policy:oracle", "-n", "1", "-r", "1", "-q"]
    assert main([*argv, "-o", str(tmp_path / "a"), "--push-to-hub", "me/evals"]) == 1
    assert "needs a Hugging Face token: run `hf auth login` or set HF_TOKEN" in capsys.readouterr().err
    assert not (tmp_path / "a").exists()  # checked before the run
    monkeypatch.setenv("HF_TOKEN", "hf_not_a_real_token")
    assert main([*argv, "-o", str(tmp_path / "b"), "--push-to-hub", "me/evals"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("rlvr eval: error: pushing the dataset to me/evals failed:") and err.count("\n") == 1
    assert (tmp_path / "b" / "results.jsonl").read_text().count("\n") == 1  # the results are kept


def test_gen_output_loads_with_load_dataset_and_reads_as_sft_data(tmp_path) -> None:
    from rlvr.train.sft_data import read_dataset

    out = tmp_path / "gen.jsonl"
    assert main(["gen", "wiki_search", "-m", "policy:oracle", "-n", "4", "-q", "-o", str(out)]) == 0
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    data = datasets.load_dataset("json", data_files=str(out), split="train", cache_dir=str(tmp_path / "cache"))
    assert len(data) == len(lines) == 4 and "tools" in data.column_names
    assert [dict(row) for row in data] == lines  # tool calls and schemas come back as written
    rows, skipped = read_dataset(out)
    assert len(rows) == 4 and skipped == []
    again = tmp_path / "again.jsonl"
    data.to_json(str(again))  # through the datasets library and back: still SFT data
    assert len(read_dataset(again)[0]) == 4
