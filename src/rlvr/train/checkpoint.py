"""Checkpoints: everything a killed run needs to continue exactly where it stopped.

Layout of `RUN_DIR/checkpoints/step_000050/`:

    model/        save_pretrained of the policy: the whole model (full fine-tuning, loads with
                  `AutoModelForCausalLM` / `rlvr eval -m`) or the LoRA adapter (peft format),
                  plus the tokenizer
    trainer.pt    step, optimizer, LR scheduler, sampler position, the config, the model
                  fingerprint, and rank 0's RNG states (python, numpy, torch, CUDA)
    rng_rank{r}.pt   RNG states of the other ranks (multi-GPU)
    optimizer/    with sharding = fsdp only: the sharded optimizer state, each rank's part
                  (torch.distributed.checkpoint); trainer.pt's optimizer is then None

Under FSDP the model folder is still whole: the weights are gathered to rank 0 to be saved
(`rlvr.train.sharding`).

A checkpoint is written to `step_N.tmp/` and renamed when complete, so a kill mid-write never
leaves a half checkpoint that resume would pick; the newest `KEEP` complete ones are kept.
Resume refuses a checkpoint whose model fingerprint (architecture, vocabulary, chat template)
differs from the model being loaded.

`open_run_dir` is how both trainers start: a new run refuses a directory that already holds
one; `resume` checks the config against the one the run started with (saved in the run
directory) and returns the newest readable checkpoint, if any (none: the run starts over at
step 0, as does resuming where nothing was written yet).
"""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import random
import re
import shutil
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from rlvr.errors import ModelError, UsageError, cannot_write, first_line

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

    def weights_problem(self) -> str | None:
        """Why the model folder cannot be loaded (a file torn or corrupted, e.g. by a full disk),
        or None. Reads the config and the headers of the weight files, not the weights."""
        from safetensors import SafetensorError, safe_open

        try:
            for name in ("config.json", "adapter_config.json"):
                if (self.model_dir / name).exists():
                    json.loads((self.model_dir / name).read_text(encoding="utf-8"))
            weights = sorted(self.model_dir.glob("*.safetensors"))
            if not weights:
                return f"no weights in {self.model_dir}"
            for path in weights:
                with safe_open(str(path), framework="pt") as f:
                    f.keys()
        except (OSError, ValueError, SafetensorError) as exc:  # (json.JSONDecodeError is a ValueError)
            return f"{type(exc).__name__}: {first_line(exc)}"
        return None


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


def default_output_dir(env: str, model: str) -> str:
    """`runs/train/ENV--MODEL`, MODEL from the model path (`runs/sft/x/final` -> `x-final`):
    where `rlvr train` writes, and what `--resume` without -o continues.

    >>> default_output_dir("tictactoe", "runs/sft/small/final")
    'runs/train/tictactoe--small-final'
    """
    parts = [p for p in model.split("/") if p]
    name = "-".join(parts[-2:]) if parts[-1] in ("final", "model") and len(parts) > 1 else parts[-1]
    return f"runs/train/{env}--{re.sub(r'[^A-Za-z0-9._-]+', '_', name)[:60]}"


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
    checkpoint of another model (`fingerprint`) is refused. Resuming a run killed before its
    first checkpoint (or before it wrote anything) starts it over; a checkpoint that cannot be
    read is passed over for the one before it, saying so on stderr.
    """
    config_path = run_dir / config_file
    ckpt, state = None, None
    say = _note if main else (lambda text: None)
    if resume:
        ckpt, state = _newest_readable(run_dir, say)
        saved = _read_config(config_path)
        if saved is None and state is not None:
            saved = state.get("config")  # the run's config, as its newest checkpoint has it
        if saved is None:
            say(f"nothing to resume in {run_dir} (no {config_file} or checkpoint): starting a new run")
        else:
            check_resume(saved)
        if ckpt is not None and state is not None:
            check_fingerprint(ckpt, state["fingerprint"], fingerprint, str(config.get("model")))
    else:
        found = [p for p in (config_path, run_dir / "metrics.csv") if p.exists()] + list_checkpoints(run_dir)[-1:]
        if found:
            name = found[0].path.name if isinstance(found[0], Checkpoint) else found[0].name
            raise UsageError(
                f"{run_dir} already holds a run ({name}); pass --resume to continue it, "
                "or choose another output directory"
            )
    barrier()
    if main:
        try:
            run_dir.mkdir(parents=True, exist_ok=True)
            tmp = config_path.with_name(config_path.name + ".tmp")  # a kill mid-write leaves the old file
            tmp.write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
            os.replace(tmp, config_path)
        except OSError as exc:  # a file in the way, no permission, a read-only disk
            raise UsageError(cannot_write(run_dir, exc)) from None
    return (ckpt, state) if state is not None else (None, None)


def _note(text: str) -> None:
    print(f"rlvr: note: {text}", file=sys.stderr)


def _read_config(path: Path) -> dict[str, Any] | None:
    """The config a run saved, or None where there is none (or a torn one from a kill)."""
    try:
        saved = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return saved if isinstance(saved, dict) else None


def _newest_readable(run_dir: Path, say: Callable[[str], None]) -> tuple[Checkpoint | None, dict[str, Any] | None]:
    """The newest checkpoint that can be read, and its trainer state."""
    found = list_checkpoints(run_dir)
    for ckpt in reversed(found):
        try:
            state = ckpt.trainer_state()
            problem = ckpt.weights_problem()
        except UsageError as exc:
            problem = str(exc).split("; ")[0]
        if problem is None:
            return ckpt, state
        older = "resuming from the one before it" if ckpt is not found[0] else "starting over at step 0"
        say(f"passing over checkpoint {ckpt.path}, which cannot be read ({problem}); {older}")
    return None, None


def restore_training(
    checkpoint: Checkpoint, state: Mapping[str, Any], *, optimizer: Any, scheduler: Any, rank: int, model: Any = None
) -> int:
    """Put the optimizer, the LR schedule and this rank's RNGs back where `checkpoint` left
    them; returns its step. `model` (the trained one) is needed for a sharded optimizer state."""
    if state["optimizer"] is None:  # written sharded, each rank its part (sharding = fsdp)
        from rlvr.train.sharding import load_optimizer

        load_optimizer(model, optimizer, checkpoint.path / "optimizer")
    else:
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
    optimizer: Any,
    trainer_state: dict[str, Any],
    rank: int = 0,
    barrier: Callable[[], None] = lambda: None,
) -> Path:
    """Write checkpoint `step` (every rank calls this; rank 0 writes the shared files, and
    with a sharded model every rank writes its part of the optimizer state).

    `trainer_state` holds what `trainer.pt` stores besides the optimizer and the RNG states
    (step, scheduler, sampler, config, fingerprint).
    """
    from rlvr.train.sharding import full_state_dict, is_sharded, save_optimizer

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
    sharded = is_sharded(model)
    weights = full_state_dict(model)  # sharded: gathered to rank 0 (every rank takes part)
    if sharded:
        save_optimizer(model, optimizer, tmp / "optimizer")
    barrier()
    if rank == 0:
        model.save_pretrained(tmp / "model", **({} if weights is None else {"state_dict": weights}))
        tokenizer.save_pretrained(tmp / "model")
        optimizer_state = None if sharded else optimizer.state_dict()
        torch.save({**trainer_state, "optimizer": optimizer_state, "rng": rng_state()}, tmp / "trainer.pt")
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
