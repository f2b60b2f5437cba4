"""Tiny Hugging Face-format models that rlvr builds offline (needs the `train` extra).

`build_tiny_model("runs/tiny", preset="tiny")` writes a folder that
`AutoModelForCausalLM.from_pretrained` and `AutoTokenizer.from_pretrained` load like a hub model.
"""

from __future__ import annotations

try:
    import tokenizers  # noqa: F401
    import transformers  # noqa: F401
except ImportError as exc:  # pragma: no cover - depends on the install
    raise ImportError(f"rlvr.models needs the train extra ({exc.name} is missing): pip install 'rlvr[train]'") from exc

from rlvr.models.tiny import (
    PRESETS,
    Preset,
    build_tiny_model,
    count_parameters,
    default_corpus,
    init_model,
)
from rlvr.models.tokenizer import CHAT_TEMPLATE, train_tokenizer

__all__ = [
    "CHAT_TEMPLATE",
    "PRESETS",
    "Preset",
    "build_tiny_model",
    "count_parameters",
    "default_corpus",
    "init_model",
    "train_tokenizer",
]
