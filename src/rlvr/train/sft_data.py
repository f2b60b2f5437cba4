"""SFT data: a JSONL chat dataset read, checked line by line, tokenised and split.

Each line is one conversation, `{"messages": [...], "tools": [...]}` (what `rlvr gen` writes;
other keys are ignored). A malformed line (not JSON, no messages, an unknown role, no assistant
turn) is reported by its number: `read_dataset` stops with one error naming the first few, or
skips them and returns their numbers.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from rlvr.clients.local_load import encodable
from rlvr.errors import UsageError, first_line

ROLES = ("system", "user", "assistant", "tool")


@dataclass
class Sample:
    """One tokenised conversation."""

    ids: list[int]
    mask: list[int]
    line: int


def read_dataset(path: str | Path, *, skip_bad_lines: bool = False) -> tuple[list[dict[str, Any]], list[int]]:
    """Conversations of a JSONL file (with their 1-based line numbers under `line`) and the
    numbers of the malformed lines that were skipped."""
    p = Path(path)
    if not p.is_file():
        raise UsageError(f"dataset {p} does not exist; make one with `rlvr gen ENV -m MODEL -d {p}`")
    rows, bad = [], []
    with p.open(encoding="utf-8", errors="replace") as f:
        for number, line in enumerate(f, start=1):
            if not line.strip():
                continue
            problem, row = _check_line(line)
            if problem is None:
                rows.append({**row, "line": number})
            else:
                bad.append((number, problem))
    if bad and not skip_bad_lines:
        shown = "; ".join(f"line {n}: {why}" for n, why in bad[:3]) + ("; ..." if len(bad) > 3 else "")
        raise UsageError(f"{p} has {len(bad)} malformed line(s) ({shown}); fix them or pass --skip-bad-lines")
    if not rows:
        raise UsageError(f"{p} holds no usable conversations")
    return rows, [n for n, _ in bad]


def _check_line(line: str) -> tuple[str | None, dict[str, Any]]:
    try:
        row = json.loads(line)
    except json.JSONDecodeError as exc:
        return f"not JSON ({exc.msg} at column {exc.colno})", {}
    if not isinstance(row, dict) or not isinstance(row.get("messages"), list) or not row["messages"]:
        return 'expected an object {"messages": [...]}', {}
    for i, m in enumerate(row["messages"]):
        if not isinstance(m, dict) or m.get("role") not in ROLES:
            return f"message {i} needs a role among {', '.join(ROLES)}", {}
        if not isinstance(m.get("content", ""), (str, list, type(None))):
            return f"message {i} content must be text", {}
        if m["role"] == "assistant" and m.get("content") is None and not m.get("tool_calls"):
            return f"message {i} (assistant) has neither content nor tool_calls", {}
    if not any(m["role"] == "assistant" for m in row["messages"]):
        return "no assistant message to learn from", {}
    if row["messages"][0]["role"] == "assistant":
        return "the conversation opens with an assistant message: there is nothing for it to answer", {}
    tools = row.get("tools")
    if tools is not None and not isinstance(tools, list):
        return "tools must be a list of tool schemas", {}
    return None, {"messages": encodable(row["messages"]), "tools": encodable(tools)}


def tokenize_rows(tokenizer: Any, rows: list[dict[str, Any]], max_length: int) -> list[Sample]:
    """Tokenise each conversation; ones whose assistant tokens were all cut are left out."""
    from jinja2 import TemplateError

    from rlvr.train.chat_tokens import tokenize_chat

    samples = []
    for row in rows:
        try:
            chat = tokenize_chat(tokenizer, row["messages"], row["tools"], max_length)
        except (TemplateError, ValueError, TypeError, KeyError, IndexError) as exc:
            raise UsageError(
                f"line {row['line']}: the chat template cannot render this conversation "
                f"({type(exc).__name__}: {first_line(exc)}); fix or remove that line"
            ) from None
        if sum(chat.loss_mask[1:]):
            samples.append(Sample(chat.input_ids, chat.loss_mask, row["line"]))
    return samples


def split_eval(samples: list[Sample], fraction: float, seed: int) -> tuple[list[Sample], list[Sample]]:
    """(train, eval): a seeded `fraction` held out (at least one when fraction > 0)."""
    if fraction <= 0 or len(samples) < 2:
        return samples, []
    order = torch.randperm(len(samples), generator=torch.Generator().manual_seed(seed)).tolist()
    n_eval = max(1, round(fraction * len(samples)))
    held = set(order[:n_eval])
    return [s for i, s in enumerate(samples) if i not in held], [samples[i] for i in sorted(held)]


def batch_at(step: int, n: int, batch_size: int, seed: int) -> list[int]:
    """Indices of the training conversations of step `step` (0-based)."""
    per_epoch = math.ceil(n / batch_size)
    epoch, k = divmod(step, per_epoch)
    order = torch.randperm(n, generator=torch.Generator().manual_seed(seed * 1_000_003 + epoch)).tolist()
    return order[k * batch_size : (k + 1) * batch_size]
