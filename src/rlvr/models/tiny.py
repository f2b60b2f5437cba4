"""Tiny causal language models that rlvr builds itself, for offline tests and demos.

`build_tiny_model` trains a byte-level BPE tokenizer on a corpus (see `rlvr.models.tokenizer`),
builds a randomly initialised Qwen3 model (Llama where the installed transformers has no
Qwen3) with tied embeddings, and saves both with `save_pretrained`. The folder then loads like
any hub model:

    model = AutoModelForCausalLM.from_pretrained(out_dir)
    tokenizer = AutoTokenizer.from_pretrained(out_dir)

Presets (parameter counts with the default corpus; the vocabulary adds `hidden * vocab`):

    tiny   hidden 128, 4 layers, 4 heads   ~1.1M   CPU tests; builds in about a second
    small  hidden 384, 8 layers, 6 heads   ~18M    GPU experiments (e.g. tic-tac-toe from scratch)
"""

from __future__ import annotations

import json
import string
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlvr.errors import UsageError


@dataclass(frozen=True)
class Preset:
    """Shape of one tiny-model preset."""

    hidden_size: int
    """Width of the residual stream."""
    num_layers: int
    """Number of transformer blocks."""
    num_heads: int
    """Attention heads (head_dim = hidden_size // num_heads)."""
    num_kv_heads: int
    """Key/value heads (grouped-query attention)."""
    intermediate_size: int
    """Width of the MLP."""
    vocab_size: int
    """Default upper bound on the BPE vocabulary."""
    max_position_embeddings: int = 4096
    """Longest sequence the rotary embedding is set up for."""


PRESETS: dict[str, Preset] = {
    "tiny": Preset(
        hidden_size=128,
        num_layers=4,
        num_heads=4,
        num_kv_heads=4,
        intermediate_size=512,
        vocab_size=2048,
    ),
    "small": Preset(
        hidden_size=384,
        num_layers=8,
        num_heads=6,
        num_kv_heads=2,
        intermediate_size=1536,
        vocab_size=4096,
    ),
}


def default_corpus() -> list[str]:
    """Generic text to train a tokenizer when no environment supplies its own prompts.

    ASCII letters, digits, punctuation, the XML-like tags rlvr's parsers use, JSON, and a few
    short English sentences, each repeated enough for BPE to learn merges.
    """
    sentences = [
        "The quick brown fox jumps over the lazy dog.",
        "You are a helpful assistant. Think step by step, then answer.",
        "Your move. The board is shown below; pick an empty cell.",
        "Reverse the text and give the answer inside the tags.",
        "Call a tool when you need information; otherwise answer directly.",
        "The result of the function call is shown above. What is the final answer?",
        "Invalid move: that cell is taken. Try again.",
        "You win! It is a draw. You lose. Game over.",
    ]
    tagged = [
        "<think>\nLet me think about this.\n</think>\n<answer>42</answer>",
        "<think>The centre is free.</think>\n<move>5</move>",
        "<answer>\nyes\n</answer>",
        "<reasoning>First, second, third.</reasoning>",
        '{"name": "search", "arguments": {"query": "capital of France", "k": 3}}',
        '{"x": 1, "y": [2, 3], "ok": true, "none": null, "text": "a b c"}',
        "| X | O | . |\n| . | X | . |\n| O | . | X |",
        " 1 | 2 | 3 \n---+---+---\n 4 | 5 | 6 \n---+---+---\n 7 | 8 | 9 ",
    ]
    chars = [
        string.ascii_lowercase,
        string.ascii_uppercase,
        string.digits,
        string.punctuation,
        " ".join(string.ascii_letters),
        " ".join(string.punctuation),
    ]
    words = " ".join(s.lower().strip(".!?") for s in sentences).split()
    return (sentences + tagged) * 8 + chars * 2 + [" ".join(words[i:] + words[:i]) for i in range(8)]


def build_tiny_model(
    out_dir: str | Path,
    *,
    preset: str = "tiny",
    corpus: Iterable[str] | None = None,
    seed: int = 0,
    vocab_size: int | None = None,
) -> Path:
    """Build a random-init causal LM + tokenizer + chat template and save it to `out_dir`.

    Args:
        out_dir: folder to write (created if missing; files in it are overwritten).
        preset: "tiny" (~1.1M parameters, CPU tests) or "small" (~18M, GPU experiments).
        corpus: texts to train the BPE tokenizer on (e.g. an environment's prompts and replies);
            `default_corpus()` when None.
        seed: seeds the weight initialisation; the same arguments give the same weights.
        vocab_size: upper bound on the vocabulary; the preset's default when None.

    Returns:
        `out_dir` as a Path.
    """
    from rlvr.models.tokenizer import train_tokenizer

    shape = _preset(preset)
    if vocab_size is not None and vocab_size < 512:
        raise UsageError(f"vocab_size must be at least 512 (256 bytes + merges), got {vocab_size}")
    tokenizer = train_tokenizer(
        default_corpus() if corpus is None else corpus,
        vocab_size=vocab_size or shape.vocab_size,
        model_max_length=shape.max_position_embeddings,
    )
    model = init_model(tokenizer, preset=preset, seed=seed)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    _portable_tokenizer_class(out / "tokenizer_config.json")
    return out


def init_model(tokenizer: Any, *, preset: str = "tiny", seed: int = 0) -> Any:
    """A randomly initialised causal LM of `preset`'s shape for `tokenizer`'s vocabulary.

    The same tokenizer, preset and seed give the same weights; the global torch RNG is left
    as it was.
    """
    import torch

    from rlvr.models.tokenizer import ENDOFTEXT, IM_END

    shape = _preset(preset)
    pad_id = tokenizer.convert_tokens_to_ids(ENDOFTEXT)
    eos_id = tokenizer.convert_tokens_to_ids(IM_END)
    config_cls, model_cls = _architecture()
    config = config_cls(
        vocab_size=len(tokenizer),
        hidden_size=shape.hidden_size,
        intermediate_size=shape.intermediate_size,
        num_hidden_layers=shape.num_layers,
        num_attention_heads=shape.num_heads,
        num_key_value_heads=shape.num_kv_heads,
        head_dim=shape.hidden_size // shape.num_heads,
        max_position_embeddings=shape.max_position_embeddings,
        tie_word_embeddings=True,
        bos_token_id=pad_id,
        eos_token_id=eos_id,
        pad_token_id=pad_id,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = model_cls(config)
    model.generation_config = sampling_generation_config(pad_id=pad_id, eos_ids=[eos_id, pad_id])
    return model


def sampling_generation_config(*, pad_id: int, eos_ids: list[int]) -> Any:
    """The `generation_config.json` of an rlvr-built model: it *samples* (at the request's
    temperature and top_p) unless a request asks for temperature 0.

    Servers start from this file and override only what a request sends: `transformers serve`
    sets `temperature` and `top_p` from the request but `do_sample` only for temperature 0, so
    without `do_sample=True` here it decodes greedily at any temperature and every rollout of
    a group is the same (no GRPO signal).
    """
    from transformers import GenerationConfig

    return GenerationConfig(
        bos_token_id=pad_id,
        eos_token_id=eos_ids,
        pad_token_id=pad_id,
        do_sample=True,
    )


def count_parameters(model: Any) -> int:
    """Number of distinct parameters (tied embeddings counted once)."""
    return sum(p.numel() for p in model.parameters())


def _preset(name: str) -> Preset:
    if name not in PRESETS:
        raise UsageError(f"unknown tiny-model preset {name!r}; expected one of {sorted(PRESETS)}")
    return PRESETS[name]


def _architecture() -> tuple[type, type]:
    try:
        from transformers import Qwen3Config, Qwen3ForCausalLM
    except ImportError:  # transformers older than 4.51
        from transformers import LlamaConfig, LlamaForCausalLM

        return LlamaConfig, LlamaForCausalLM
    return Qwen3Config, Qwen3ForCausalLM


def _portable_tokenizer_class(config_path: Path) -> None:
    # transformers 5 writes "TokenizersBackend", a name 4.x does not know; both read this one.
    config = json.loads(config_path.read_text())
    config["tokenizer_class"] = "PreTrainedTokenizerFast"
    config_path.write_text(json.dumps(config, indent=2, ensure_ascii=False) + "\n")
