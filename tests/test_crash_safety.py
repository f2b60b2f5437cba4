"""`rlvr sft` and `rlvr train` killed (SIGKILL, in a child process) at their most fragile
moments, then resumed: the resumed run finishes and leaves a final model that loads. Also
torn or corrupt files (weights, checkpoints, configs) and output paths that cannot be written:
one line, or a fallback that says what it did; never a traceback."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
pytest.importorskip("reverse_text")

from rlvr.cli import main
from rlvr.models import build_tiny_model
from rlvr.train.checkpoint import latest_checkpoint, list_checkpoints

pytestmark = pytest.mark.usefixtures("one_thread")

KILL_DRIVER = textwrap.dedent(
    """
    import os, signal, sys
    from pathlib import Path
    import torch, transformers

    where = sys.argv[1]

    def die():
        os.kill(os.getpid(), signal.SIGKILL)

    real_save = torch.save
    def save(obj, path, *args, **kwargs):  # trainer.pt of the first checkpoint: the model is written
        if where == "checkpoint" and Path(path).name == "trainer.pt":
            die()
        return real_save(obj, path, *args, **kwargs)
    torch.save = save

    real_pretrained = transformers.PreTrainedModel.save_pretrained
    def save_pretrained(self, path, *args, **kwargs):  # the final export, one empty file in
        if where == "export" and Path(path).name.startswith("final"):
            Path(path).mkdir(parents=True, exist_ok=True)
            (Path(path) / "config.json").write_text("")
            die()
        return real_pretrained(self, path, *args, **kwargs)
    transformers.PreTrainedModel.save_pretrained = save_pretrained

    import shutil
    real_rmtree = shutil.rmtree
    def rmtree(path, *args, **kwargs):  # an old final/ being removed: its weights go first
        if where == "rmtree" and Path(path).name.startswith("final") and not Path(path).name.endswith(".tmp"):
            for weights in Path(path).glob("*.safetensors"):
                weights.unlink()
            die()
        return real_rmtree(path, *args, **kwargs)
    shutil.rmtree = rmtree

    real_rename, renames = os.rename, []
    def rename(src, dst, *args, **kwargs):  # where=rename-N: killed before the N-th rename of a final* folder
        if where.startswith("rename-") and Path(src).name.startswith("final"):
            renames.append(src)
            if len(renames) == int(where.split("-")[1]):
                die()
        return real_rename(src, dst, *args, **kwargs)
    os.rename = rename

    from rlvr.cli import main
    sys.exit(main(sys.argv[2:]))
    """
)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    return build_tiny_model(tmp_path_factory.mktemp("tiny"), preset="tiny")


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("data") / "chats.jsonl"
    rows = [
        {"messages": [{"role": "user", "content": f"Say {i}."}, {"role": "assistant", "content": f"{i}"}]}
        for i in range(8)
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def sft_argv(tiny: Path, data: Path, out: Path, *extra: str) -> list[str]:
    argv = ["sft", "-m", str(tiny), "-d", str(data), "-o", str(out), "--steps", "2", "--batch-size", "4"]
    return argv + ["--eval-fraction", "0", "--save-every", "1", "-q", *extra]


def train_argv(tiny: Path, out: Path, *extra: str) -> list[str]:
    argv = ["train", "reverse_text", "--model", str(tiny), "--output-dir", str(out), "--steps", "2"]
    argv += ["--batch-size", "4", "--group-size", "2", "--max-tokens", "4", "--eval-every", "none"]
    return argv + ["--save-every", "1", "-q", *extra]


def killed(where: str, argv: list[str]) -> None:
    """Run `rlvr ARGV` in a child process that SIGKILLs itself at `where`."""
    done = subprocess.run([sys.executable, "-c", KILL_DRIVER, where, *argv], capture_output=True, text=True)
    assert done.returncode == -9, done.stderr[-2000:]


def loads(final: Path) -> bool:
    return (
        transformers.AutoModelForCausalLM.from_pretrained(final) is not None and not final.with_suffix(".tmp").exists()
    )


# ---- kills --------------------------------------------------------------------------------------


@pytest.mark.parametrize("command", ["sft", "train"])
def test_killed_during_the_very_first_checkpoint_write_resumes_from_step_0(tiny, data, tmp_path, capsys, command):
    out = tmp_path / "run"
    argv = sft_argv(tiny, data, out) if command == "sft" else train_argv(tiny, out)
    killed("checkpoint", argv)
    assert list_checkpoints(out) == [] and (out / "checkpoints" / "step_000001.tmp").is_dir()
    assert main(argv) == 1 and "pass --resume" in capsys.readouterr().err
    assert main([*argv, "--resume"]) == 0, capsys.readouterr().err
    assert latest_checkpoint(out).step == 2 and loads(out / "final")


@pytest.mark.parametrize("command", ["sft", "train"])
def test_killed_during_the_final_export_resumes_to_a_loadable_final_model(tiny, data, tmp_path, capsys, command):
    """A kill mid-export left final/config.json at 0 bytes, and `--resume` exited 0 without
    exporting again (train), so `rlvr eval -m RUN/final` failed."""
    out = tmp_path / "run"
    argv = sft_argv(tiny, data, out) if command == "sft" else train_argv(tiny, out)
    killed("export", argv)
    assert latest_checkpoint(out).step == 2
    assert main([*argv, "--resume"]) == 0, capsys.readouterr().err
    assert loads(out / "final")


# train killed in the old final/'s removal runs in `make test` (it failed before the rename-based
# export); the other seven points, ~15 s each, in `make test-heavy`
HEAVY = pytest.mark.heavy
WHERE = ["rmtree", *(pytest.param(w, marks=HEAVY) for w in ("export", "rename-1", "rename-2"))]


@pytest.mark.parametrize("where", WHERE)
@pytest.mark.parametrize("command", [pytest.param("sft", marks=HEAVY), "train"])
def test_killed_anywhere_in_the_export_of_an_extended_run_resumes_to_its_new_model(
    tiny, data, tmp_path, capsys, command, where
):
    """Extending a finished run replaces its final/. A kill while the old one was removed
    (`rmtree`) left final/config.json without weights, and `rlvr train --resume` exited 0
    without exporting again. Now the new folder is swapped in by renames, and a kill at any
    step (writing it, either rename, removing the old one) resumes to the new model."""
    out = tmp_path / "run"
    argv = sft_argv(tiny, data, out) if command == "sft" else train_argv(tiny, out)
    assert main(argv) == 0, capsys.readouterr().err
    longer = [*argv, "--steps", "3", "--resume"]
    killed(where, longer)
    assert main(longer) == 0, capsys.readouterr().err
    assert loads(out / "final") and not (out / "final.old").exists()
    final = transformers.AutoModelForCausalLM.from_pretrained(out / "final").state_dict()
    step_3 = transformers.AutoModelForCausalLM.from_pretrained(latest_checkpoint(out).path / "model").state_dict()
    assert latest_checkpoint(out).step == 3 and all(torch.equal(final[k], step_3[k]) for k in step_3)


# ---- torn and corrupt files -----------------------------------------------------------------------


def test_resume_with_nothing_written_or_a_torn_config_starts_over(tiny, data, tmp_path, capsys) -> None:
    """A run killed before its first checkpoint was stuck: --resume said 'start without
    --resume', a fresh run said 'pass --resume'."""
    assert main(sft_argv(tiny, data, tmp_path / "new", "--resume")) == 0
    assert "nothing to resume in" in capsys.readouterr().err and loads(tmp_path / "new" / "final")
    torn = tmp_path / "torn"
    torn.mkdir()
    (torn / "sft_config.json").write_text("")  # killed while writing it (before the write became atomic)
    (torn / "metrics.csv").write_text("step,loss/eval\n0.0,")
    assert main(sft_argv(tiny, data, torn)) == 1 and "pass --resume" in capsys.readouterr().err
    assert main(sft_argv(tiny, data, torn, "--resume")) == 0
    assert "starting a new run" in capsys.readouterr().err and loads(torn / "final")


@pytest.mark.parametrize("command", ["sft", "train"])
def test_a_corrupt_newest_checkpoint_is_passed_over_for_the_one_before(tiny, data, tmp_path, capsys, command):
    out = tmp_path / "run"
    argv = sft_argv(tiny, data, out) if command == "sft" else train_argv(tiny, out)
    assert main(argv) == 0
    [weights] = (out / "checkpoints" / "step_000002" / "model").glob("*.safetensors")
    with weights.open("r+b") as f:  # a disk that filled up mid-write
        f.truncate(os.path.getsize(weights) // 2)
    shutil.rmtree(out / "final")
    assert main([*argv, "--resume"]) == 0
    err = capsys.readouterr().err
    assert "passing over checkpoint" in err and "step_000002" in err and "resuming from the one before it" in err
    assert loads(out / "final") and latest_checkpoint(out).step == 2


@pytest.mark.parametrize("command", ["eval", "sft", "train"])
def test_corrupt_weights_are_one_line(tiny, data, tmp_path, capsys, command) -> None:
    bad = tmp_path / "bad"
    shutil.copytree(tiny, bad)
    [weights] = bad.glob("*.safetensors")
    weights.write_bytes(weights.read_bytes()[:1000])
    argv = {
        "eval": ["eval", "reverse_text", "-m", str(bad), "-n", "1", "-o", str(tmp_path / "e")],
        "sft": sft_argv(bad, data, tmp_path / "s"),
        "train": train_argv(bad, tmp_path / "t"),
    }[command]
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"cannot load a causal language model from {bad}" in err, err


def _unwritable(tmp_path: Path) -> Path:
    if os.geteuid() != 0:
        locked = tmp_path / "locked"
        locked.mkdir(mode=0o500)
        return locked / "run"
    if not Path("/sys").is_dir():
        pytest.skip("root writes anywhere; needs /sys to find a folder it cannot write")
    return Path("/sys/rlvr-test-run")


@pytest.mark.parametrize("command", ["eval", "sft", "train", "model"])
def test_an_output_path_that_cannot_be_written_is_one_line(tiny, data, tmp_path, capsys, command) -> None:
    a_file = tmp_path / "a_file"
    a_file.write_text("x")
    for out, why in (
        (a_file, "it is a file, not a folder"),
        (a_file / "run", "a part of that path is a file, not a folder"),
        (_unwritable(tmp_path), ""),
    ):
        argv = {
            "eval": ["eval", "reverse_text", "-m", "policy:oracle", "-n", "1", "-o", str(out)],
            "sft": sft_argv(tiny, data, out),
            "train": train_argv(tiny, out),
            "model": ["model", "new", "-o", str(out)],
        }[command]
        assert main(argv) == 1
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and f"cannot write to {out}: {why}" in err, err
