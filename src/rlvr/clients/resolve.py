"""Turn a `-m MODEL` string into a client: a policy, a local model, or an API endpoint."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rlvr.clients.base import ChatClient
from rlvr.errors import UsageError


def make_client(
    model: str,
    env: Any = None,
    *,
    base_url: str | Sequence[str] | None = None,
    api_key_var: str | None = None,
    timeout_s: float = 120.0,
    max_retries: int = 5,
    concurrency: int = 64,
    device: str | None = None,
) -> ChatClient:
    """`policy:NAME` -> the env's reference player; an existing directory -> `LocalModel`;
    anything else -> an OpenAI-compatible endpoint (`base_url`, or a list of endpoints serving the
    same model; key from `api_key_var`).

    Without `base_url`, a name that looks like a path (see `looks_like_path`) but is no folder
    is refused: a mistyped model folder must not go to the default API host as a model name.
    """
    if model.startswith("policy:"):
        name = model.split(":", 1)[1]
        policies = env.policies() if env is not None else {}
        if name not in policies:
            available = ", ".join(f"policy:{n}" for n in policies) or "none"
            raise UsageError(f"no reference policy {model!r} for this environment (available: {available})")
        return policies[name]()
    if base_url is None and looks_like_path(model) and not Path(model).expanduser().is_dir():
        where = Path(model).expanduser()
        what = "is a file, not a model folder" if where.exists() else "does not exist"
        raise UsageError(
            f"model folder {model} {what}; pass a folder written by save_pretrained, or -b URL to "
            "use an API model of that name"
        )
    if base_url is None and Path(model).expanduser().is_dir():
        try:
            from rlvr.clients.local import LocalModel
        except ImportError as exc:
            raise UsageError(
                f"running the local model {model} needs the train extra: pip install 'rlvr[train]' ({exc})"
            ) from None
        return LocalModel(str(Path(model).expanduser()), device=device, max_batch_size=concurrency)
    from rlvr.clients.openai import OpenAIClient

    return OpenAIClient(
        model,
        base_url=base_url,
        api_key_var=api_key_var or "OPENAI_API_KEY",
        timeout_s=timeout_s,
        max_retries=max_retries,
        concurrency=concurrency,
    )


def looks_like_path(model: str) -> bool:
    """A name an API model never has: it starts with `/`, `.` or `~`, holds two slashes or
    more, or names something in a folder that exists here (`models/tictactoe-tinyy`). A
    hub-style `org/name` whose `org` is no local folder is not a path.

    >>> [looks_like_path(m) for m in ("./no/such", "~/m", "a/b/c", "gpt-4o", "Qwen/Qwen3-0.6B")]
    [True, True, True, False, False]
    """
    if model.startswith(("/", ".", "~")) or model.count("/") > 1:
        return True
    return "/" in model and Path(model).parent.is_dir()
