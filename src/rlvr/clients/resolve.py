"""Turn a `-m MODEL` string into a client: a policy, a local model, or an API endpoint."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rlvr.clients.base import ChatClient
from rlvr.errors import UsageError


def make_client(
    model: str,
    env: Any = None,
    *,
    base_url: str | None = None,
    api_key_var: str | None = None,
    timeout_s: float = 120.0,
    max_retries: int = 5,
    concurrency: int = 64,
    device: str | None = None,
) -> ChatClient:
    """`policy:NAME` -> the env's reference player; an existing directory -> `LocalModel`;
    anything else -> an OpenAI-compatible endpoint (`base_url`, key from `api_key_var`)."""
    if model.startswith("policy:"):
        name = model.split(":", 1)[1]
        policies = env.policies() if env is not None else {}
        if name not in policies:
            available = ", ".join(f"policy:{n}" for n in policies) or "none"
            raise UsageError(f"no reference policy {model!r} for this environment (available: {available})")
        return policies[name]()
    if base_url is None and Path(model).is_dir():
        try:
            from rlvr.clients.local import LocalModel
        except ImportError as exc:
            raise UsageError(
                f"running the local model {model} needs the train extra: pip install 'rlvr[train]' ({exc})"
            ) from None
        return LocalModel(model, device=device, max_batch_size=concurrency)
    from rlvr.clients.openai import OpenAIClient

    return OpenAIClient(
        model,
        base_url=base_url,
        api_key_var=api_key_var or "OPENAI_API_KEY",
        timeout_s=timeout_s,
        max_retries=max_retries,
        concurrency=concurrency,
    )
