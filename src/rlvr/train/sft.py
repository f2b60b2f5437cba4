"""Supervised fine-tuning on chat conversations (`rlvr sft`), loss on assistant tokens only.

Choices:

- **Data**: JSONL, one conversation a line, `{"messages": [...], "tools": [...]}` (what
  `rlvr gen` writes; other keys are ignored; see `rlvr.train.sft_data`). Malformed lines are
  reported by number; the run stops unless `skip_bad_lines`.
- **Tokens**: `rlvr.train.chat_tokens.tokenize_chat` renders each conversation with the chat
  template (tools included) and masks exactly the assistant turns (content, tool calls, the
  end-of-turn marker). Conversations longer than `max_length` are cut.
- **Loss**: cross-entropy summed over the assistant tokens of the whole optimizer batch,
  divided by their count, so the split into micro-batches does not change it. Computed by the
  RL update's training forward (`rlvr.train.logprobs`): the output head in chunks, only at the
  assistant tokens, so full float32 logits over a large vocabulary never exist at once;
  `gradient_checkpointing` recomputes each block's activations in the backward pass;
  `pack_sequences` puts each micro-batch in one row (as `rlvr train`'s).
- **Order**: a seeded permutation per epoch; the batch of step `s` depends only on (seed, s),
  so a resumed run continues with exactly the batches it would have seen.
- **Eval**: a seeded `eval_fraction` of the conversations is held out; `loss/eval` is the
  token-mean loss over all of it, before the first step, every `eval_every` steps, at the end.
- **Precision**: weights and optimizer in float32; bf16 autocast on a CUDA GPU with bf16 (`bf16`).
- **LoRA** (`lora_rank > 0`): adapters on every Linear layer but the output head (found by
  walking the model); `final/` holds the merged model, loadable with `from_pretrained`.
- **Checkpoints** (`rlvr.train.checkpoint` layout): `checkpoints/step_N/` with the model (or
  adapter), optimizer, scheduler and RNG states; `resume=True` continues from the newest one.
- **Shared with `rlvr train`**: model loading, the LR schedule and the final export
  (`rlvr.train.model`), the run directory and resuming (`rlvr.train.checkpoint`), metrics
  (`rlvr.train.logging`). Defaults differ on purpose: cosine schedule here, constant for RL;
  AdamW with torch's default betas (0.9, 0.999) and `weight_decay` here, (0.9, 0.99) and no
  decay for RL.

Logged metrics (metrics.csv, TensorBoard, plots/*.png): `loss/train`, `loss/eval`,
`optim/lr`, `grad/norm`, `throughput/tokens_per_s` (assistant + context tokens per second).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from rlvr.errors import UsageError
from rlvr.progress import Progress
from rlvr.train.logprobs import activation_checkpointing, micro_batch_logprobs, should_pack
from rlvr.train.sequences import TrainSequence, micro_batches
from rlvr.train.sft_config import SFTConfig, check_resume
from rlvr.train.sft_data import Sample, batch_at, read_dataset, split_eval, tokenize_rows

CONFIG_FILE = "sft_config.json"


@dataclass
class SFTResult:
    """What a run did: where the final model is and how the loss went."""

    final_dir: Path
    steps: int
    train_loss: list[float] = field(default_factory=list)
    """`loss/train` of each step run by this call (a resumed run: only the new steps)."""
    eval_loss: list[float] = field(default_factory=list)
    """`loss/eval` at each evaluation of this call."""


# ---- loss -----------------------------------------------------------------------------------


def summed_loss(
    model: Any, samples: list[Sample], pad_id: int, device: torch.device, *, pack: bool = False
) -> torch.Tensor:
    """Cross-entropy summed over the masked (assistant) target tokens of `samples`, one
    micro-batch, through the RL update's training forward (`rlvr.train.logprobs`): the output
    head runs in chunks and only where the loss looks, so (B, T, V) float32 logits never exist
    at once (with a 151,936-token vocabulary they were most of a step's memory). `pack`: the
    micro-batch as one row without padding."""
    seqs = [TrainSequence(s.ids, s.mask, 0.0, [math.nan] * len(s.ids), i) for i, s in enumerate(samples)]
    [mb] = micro_batches(seqs, len(seqs), pad_id, device, pack=pack)
    logp, _ = micro_batch_logprobs(model, mb, 1.0)  # (B, T-1), 0 where the mask is 0
    return -(logp * mb.mask).sum()


def run_batch(
    model: Any,
    samples: list[Sample],
    cfg: SFTConfig,
    pad_id: int,
    device: torch.device,
    autocast: bool,
    *,
    train: bool,
) -> tuple[float, int]:
    """Mean assistant-token loss of `samples` (and its gradient when `train`); token count."""
    total = sum(sum(s.mask[1:]) for s in samples)
    pack = should_pack(model, cfg.pack_sequences)
    loss_sum = 0.0
    for start in range(0, len(samples), cfg.micro_batch_size):
        with (
            torch.autocast(device.type, dtype=torch.bfloat16, enabled=autocast),
            torch.set_grad_enabled(train),
            activation_checkpointing(model, cfg.gradient_checkpointing and train),
        ):
            loss = summed_loss(model, samples[start : start + cfg.micro_batch_size], pad_id, device, pack=pack)
        if train:
            (loss / total).backward()
        loss_sum += loss.item()
    return loss_sum / total, total


def evaluate(
    model: Any,
    samples: list[Sample],
    cfg: SFTConfig,
    pad_id: int,
    device: torch.device,
    autocast: bool,
) -> float:
    was_training = model.training
    model.eval()
    try:
        return run_batch(model, samples, cfg, pad_id, device, autocast, train=False)[0]
    finally:
        model.train(was_training)


# ---- the run --------------------------------------------------------------------------------


def train_sft(cfg: SFTConfig, *, resume: bool = False, quiet: bool = False) -> SFTResult:
    """Fine-tune `cfg.model` on `cfg.data`; the final model lands in `OUTPUT_DIR/final`."""
    from rlvr.train.model import deterministic_kernels

    with deterministic_kernels(cfg.deterministic):
        return _train_sft(cfg, resume=resume, quiet=quiet)


def _train_sft(cfg: SFTConfig, *, resume: bool, quiet: bool) -> SFTResult:
    from rlvr.train.checkpoint import model_fingerprint, open_run_dir, save_checkpoint
    from rlvr.train.logging import MetricsLog
    from rlvr.train.model import export_final, load_model_config, load_tokenizer, use_bf16

    run_dir = Path(cfg.output_dir)
    tokenizer = load_tokenizer(cfg.model)
    fingerprint = model_fingerprint(load_model_config(cfg.model), tokenizer)
    ckpt, state = open_run_dir(
        run_dir,
        cfg.to_dict(),
        config_file=CONFIG_FILE,
        resume=resume,
        check_resume=lambda saved: check_resume(saved, cfg),
        fingerprint=fingerprint,
    )
    device = torch.device(cfg.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    autocast = use_bf16(cfg.bf16, device)
    torch.manual_seed(cfg.seed)

    # ---- data: read, tokenise, hold out the eval split ----
    train_set, eval_set = split_eval(_read_samples(cfg, tokenizer, quiet), cfg.eval_fraction, cfg.seed)
    total_steps = cfg.max_steps or cfg.epochs * math.ceil(len(train_set) / cfg.batch_size)
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id or 0

    # ---- model, optimizer, schedule (restored from the checkpoint when resuming) ----
    model, optimizer, scheduler, start = _model_and_optimizer(cfg, device, ckpt, state, total_steps)
    log = MetricsLog(run_dir, resume_step=start if ckpt is not None else None)
    result = SFTResult(run_dir / "final", total_steps)

    def eval_and_log(step: int) -> None:
        if eval_set:
            loss = evaluate(model, eval_set, cfg, pad_id, device, autocast)
            result.eval_loss.append(loss)
            log.write(step, {"loss/eval": loss})

    if not quiet:
        print(
            f"sft: {len(train_set)} train / {len(eval_set)} eval conversations, {total_steps} steps, "
            f"{'LoRA rank ' + str(cfg.lora_rank) if cfg.lora_rank else 'full fine-tuning'} on {device}",
            flush=True,  # a redirected stdout is block-buffered: show the line before the long steps
        )
    if start == 0:
        eval_and_log(0)
    with Progress("sft step", total_steps, completed=start, quiet=quiet) as progress:
        for step in range(start + 1, total_steps + 1):
            # ---- one optimizer step over a batch, micro-batch by micro-batch ----
            batch = [train_set[i] for i in batch_at(step - 1, len(train_set), cfg.batch_size, cfg.seed)]
            metrics = _optimizer_step(model, batch, cfg, pad_id, device, autocast, optimizer, scheduler)
            result.train_loss.append(metrics["loss/train"])
            log.write(step, metrics)
            progress.advance(status=f"loss {metrics['loss/train']:.4f}")

            # ---- evaluate, checkpoint ----
            last = step == total_steps
            if eval_set and (last or (cfg.eval_every is not None and step % cfg.eval_every == 0)):
                eval_and_log(step)
            if last or (cfg.save_every is not None and step % cfg.save_every == 0):
                save_checkpoint(
                    run_dir,
                    step,
                    model=model,
                    tokenizer=tokenizer,
                    optimizer=optimizer,
                    trainer_state={
                        "step": step,
                        "scheduler": scheduler.state_dict(),
                        "config": cfg.to_dict(),
                        "fingerprint": fingerprint,
                    },
                )
                log.plot()
    log.plot()
    log.close()
    export_final(model, tokenizer, result.final_dir)
    if not quiet:
        print(f"saved {result.final_dir} ({_losses(result)})")
    return result


def _losses(result: SFTResult) -> str:
    """The run's losses in a few words, for the line that says where the model was saved."""
    summary = f"train loss {result.train_loss[0]:.4f} -> {result.train_loss[-1]:.4f}" if result.train_loss else ""
    if result.eval_loss:
        summary += f", eval loss {result.eval_loss[-1]:.4f}"
    return summary.strip(", ") or "nothing left to train"


def _model_and_optimizer(
    cfg: SFTConfig, device: torch.device, ckpt: Any, state: Any, total_steps: int
) -> tuple[Any, torch.optim.Optimizer, Any, int]:
    """The trainable model, its AdamW and schedule, and the step to start after: restored from
    the checkpoint when resuming (`ckpt`, `state` from `open_run_dir`), else new (step 0)."""
    from rlvr.train.checkpoint import restore_training
    from rlvr.train.model import load_trainable, make_scheduler

    model = load_trainable(cfg.model, lora=cfg.lora, device=device, checkpoint=ckpt.model_dir if ckpt else None)
    model.train()
    optimizer = torch.optim.AdamW(
        [p for p in model.parameters() if p.requires_grad], lr=cfg.lr, weight_decay=cfg.weight_decay
    )
    scheduler = make_scheduler(optimizer, schedule=cfg.lr_schedule, warmup=cfg.warmup_steps, total=total_steps)
    start = 0
    if ckpt is not None and state is not None:
        start = restore_training(ckpt, state, optimizer=optimizer, scheduler=scheduler, rank=0)
    return model, optimizer, scheduler, start


def _read_samples(cfg: SFTConfig, tokenizer: Any, quiet: bool) -> list[Sample]:
    """`cfg.data`'s conversations, tokenised; malformed lines skipped (and said) when allowed."""
    rows, skipped = read_dataset(cfg.data, skip_bad_lines=cfg.skip_bad_lines)
    if skipped and not quiet:
        print(f"skipped {len(skipped)} malformed line(s) of {cfg.data}: lines {', '.join(map(str, skipped[:20]))}")
    samples = tokenize_rows(tokenizer, rows, cfg.max_length)
    if not samples:
        raise UsageError(f"no conversation in {cfg.data} has assistant tokens within max_length={cfg.max_length}")
    return samples


def _optimizer_step(
    model: Any,
    batch: list[Sample],
    cfg: SFTConfig,
    pad_id: int,
    device: torch.device,
    autocast: bool,
    optimizer: Any,
    scheduler: Any,
) -> dict[str, float]:
    """One optimizer step over `batch`, micro-batch by micro-batch; the step's metrics."""
    t0 = time.monotonic()
    loss, _ = run_batch(model, batch, cfg, pad_id, device, autocast, train=True)
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.max_grad_norm)
    lr = float(scheduler.get_last_lr()[0])
    optimizer.step()
    scheduler.step()
    optimizer.zero_grad(set_to_none=True)
    tokens = sum(len(s.ids) for s in batch)
    return {
        "loss/train": loss,
        "optim/lr": lr,
        "grad/norm": float(norm),
        "throughput/tokens_per_s": tokens / max(time.monotonic() - t0, 1e-9),
    }
