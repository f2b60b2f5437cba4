"""Checkpoints: everything a killed run needs to continue exactly where it stopped.

Layout of `RUN_DIR/checkpoints/step_000050/`:

    model/        save_pretrained of the policy: the whole model (full fine-tuning, loads with
                  `AutoModelForCausalLM` / `rlvr eval -m`) or the LoRA adapter (peft format),
                  plus the tokenizer
    trainer.pt    step, optimizer, LR scheduler, sampler position, the config, the model
                  fingerprint, and rank 0's RNG states (python, numpy, torch, CUDA)
    rng_rank{r}.pt   RNG states of the other ranks (multi-GPU)

A checkpoint is written to `step_N.tmp/` and renamed when complete, so a kill mid-write never
leaves a half checkpoint that resume would pick; the newest `KEEP` complete ones are kept.
Resume refuses a checkpoint whose model fingerprint (architecture, vocabulary, chat template)
differs from the model being loaded.

`open_run_dir` is how both trainers start: a new run refuses a directory that already holds
one; `resume` checks the config against the one the run started with (saved in the run
directory) and returns the newest checkpoint, if any (none: the run starts over at step 0).
"""

from __future__ import annotations

import hashlib
import json
import pickle
import random
import re
import shutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from rlvr.errors import ModelError, UsageError

KEEP = 3
"""Complete checkpoints kept per run (older ones are deleted)."""
_STEP_DIR = re.compile(r"step_(\d+)$")
_FINGERPRINT_KEYS = (
    "model_type",
    "vocab_size",
    "hidden_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "intermediate_size",
    "tie_word_embeddings",
)


@dataclass
class Checkpoint:
    """A complete checkpoint on disk."""

    path: Path
    step: int

    @property
    def model_dir(self) -> Path:
        return self.path / "model"

    def trainer_state(self) -> dict[str, Any]:
        try:
            return torch.load(self.path / "trainer.pt", map_location="cpu", weights_only=False)
        except (OSError, RuntimeError, EOFError, ValueError, pickle.UnpicklingError) as exc:
            raise UsageError(
                f"cannot read checkpoint {self.path}/trainer.pt ({type(exc).__name__}: "
                f"{exc}); delete that checkpoint folder to resume from an older one"
            ) from None


def checkpoints_dir(run_dir: str | Path) -> Path:
    return Path(run_dir) / "checkpoints"


def list_checkpoints(run_dir: str | Path) -> list[Checkpoint]:
    """Complete checkpoints of a run, oldest first (`.tmp` folders are ignored)."""
    root = checkpoints_dir(run_dir)
    found = []
    for p in root.iterdir() if root.is_dir() else ():
        m = _STEP_DIR.match(p.name)
        if m and (p / "trainer.pt").is_file():
            found.append(Checkpoint(p, int(m.group(1))))
    return sorted(found, key=lambda c: c.step)


def latest_checkpoint(run_dir: str | Path) -> Checkpoint | None:
    found = list_checkpoints(run_dir)
    return found[-1] if found else None


def model_fingerprint(model_config: Any, tokenizer: Any) -> str:
    """A short hash of what makes weights interchangeable: architecture shape and tokenizer."""
    cfg = model_config.get_text_config() if hasattr(model_config, "get_text_config") else model_config
    parts = {k: getattr(cfg, k, None) for k in _FINGERPRINT_KEYS}
    parts["tokens"] = len(tokenizer)
    parts["chat_template"] = hashlib.sha256(str(tokenizer.chat_template).encode()).hexdigest()[:12]
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:16]


def check_fingerprint(checkpoint: Checkpoint, saved: str, current: str, model: str) -> None:
    if saved != current:
        raise ModelError(
            f"checkpoint {checkpoint.path} was written for a different model (fingerprint {saved}, "
            f"but {model} gives {current}); resume with the model the run started from, or start "
            f"a new run in another output_dir"
        )


# ---- starting and resuming a run ------------------------------------------------------------


def open_run_dir(
    run_dir: Path,
    config: dict[str, Any],
    *,
    config_file: str,
    resume: bool,
    check_resume: Callable[[dict[str, Any]], None],
    fingerprint: str,
    barrier: Callable[[], None] = lambda: None,
    main: bool = True,
) -> tuple[Checkpoint | None, dict[str, Any] | None]:
    """Check `run_dir` and write `config` to `run_dir/config_file`; with `resume`, the
    checkpoint to continue from and its trainer state (None, None: start at step 0).

    `check_resume(saved_config)` raises when the run may not continue with `config`; a
    checkpoint of another model (`fingerprint`) is refused.
    """
    config_path = run_dir / config_file
    ckpt, state = latest_checkpoint(run_dir), None
    if resume:
        if not config_path.is_file():
            raise UsageError(f"nothing to resume in {run_dir} (no {config_file}); start without --resume")
        check_resume(json.loads(config_path.read_text(encoding="utf-8")))
        if ckpt is not None:
            state = ckpt.trainer_state()
            check_fingerprint(ckpt, state["fingerprint"], fingerprint, str(config.get("model")))
    else:
        found = [p for p in (config_path, run_dir / "metrics.csv") if p.exists()] + ([ckpt.path] if ckpt else [])
        if found:
            raise UsageError(
                f"{run_dir} already holds a run ({found[0].name}); pass --resume to continue it, "
                "or choose another output directory"
            )
    barrier()
    if main:
        run_dir.mkdir(parents=True, exist_ok=True)
        config_path.write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
    return (ckpt, state) if state is not None else (None, None)


def restore_training(
    checkpoint: Checkpoint, state: Mapping[str, Any], *, optimizer: Any, scheduler: Any, rank: int
) -> int:
    """Put the optimizer, the LR schedule and this rank's RNGs back where `checkpoint` left
    them; returns its step."""
    optimizer.load_state_dict(state["optimizer"])
    scheduler.load_state_dict(state["scheduler"])
    restore_rng(checkpoint, state, rank)
    return int(state["step"])


# ---- RNG -------------------------------------------------------------------------------------


def rng_state() -> dict[str, Any]:
    state: dict[str, Any] = {"python": random.getstate(), "torch": torch.get_rng_state()}
    try:
        import numpy as np

        state["numpy"] = np.random.get_state()
    except ImportError:  # pragma: no cover
        pass
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: Mapping[str, Any]) -> None:
    random.setstate(state["python"])
    torch.set_rng_state(state["torch"])
    if "numpy" in state:
        import numpy as np

        np.random.set_state(state["numpy"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


# ---- saving ----------------------------------------------------------------------------------


def save_checkpoint(
    run_dir: str | Path,
    step: int,
    *,
    model: Any,
    tokenizer: Any,
    trainer_state: dict[str, Any],
    rank: int = 0,
    barrier: Callable[[], None] = lambda: None,
) -> Path:
    """Write checkpoint `step` (every rank calls this; rank 0 writes the shared files).

    `trainer_state` holds what `trainer.pt` stores besides the RNG states (step, optimizer,
    scheduler, sampler, config, fingerprint).
    """
    root = checkpoints_dir(run_dir)
    final = root / f"step_{step:06d}"
    tmp = root / f"step_{step:06d}.tmp"
    if rank == 0:
        root.mkdir(parents=True, exist_ok=True)
        if tmp.exists():
            shutil.rmtree(tmp)
        tmp.mkdir()
    barrier()
    if rank != 0:
        torch.save(rng_state(), tmp / f"rng_rank{rank}.pt")
    barrier()
    if rank == 0:
        model.save_pretrained(tmp / "model")
        tokenizer.save_pretrained(tmp / "model")
        torch.save({**trainer_state, "rng": rng_state()}, tmp / "trainer.pt")
        if final.exists():  # the same step saved again (e.g. a resumed run): replace it
            shutil.rmtree(final)
        tmp.rename(final)
        for old in list_checkpoints(run_dir)[:-KEEP]:
            shutil.rmtree(old.path, ignore_errors=True)
    barrier()
    return final


def restore_rng(checkpoint: Checkpoint, state: Mapping[str, Any], rank: int) -> None:
    """Restore this rank's RNG states (rank 0's live in trainer.pt)."""
    if rank == 0:
        set_rng_state(state["rng"])
        return
    path = checkpoint.path / f"rng_rank{rank}.pt"
    if path.is_file():
        set_rng_state(torch.load(path, map_location="cpu", weights_only=False))
