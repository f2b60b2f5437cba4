"""The control routes of a running vLLM server, for training with generation on it.

Generation itself goes through `OpenAIClient` (`/v1/chat/completions` with `logprobs` and
vLLM's `return_token_ids`, which gives the prompt and sampled ids). This module speaks the
rest of the protocol, as vLLM 0.22 serves it over HTTP; rlvr never imports vLLM:

    GET  /v1/models                   served models: `id`, `root` (the path it loaded), `parent` (LoRA)
    POST /v1/load_lora_adapter        {"lora_name", "lora_path"}; needs --enable-lora and
    POST /v1/unload_lora_adapter      {"lora_name"}   VLLM_ALLOW_RUNTIME_LORA_UPDATING=True
    GET  /get_world_size              {"world_size": TP x PP x DP}       (these routes need
    POST /init_weight_transfer_engine {"init_info": {...}}                VLLM_SERVER_DEV_MODE=1
    POST /start_weight_update         {"is_checkpoint_format": true}      and the server's
    POST /update_weights              {"update_info": {...}}              --weight-transfer-config)
    POST /finish_weight_update
    POST /reset_prefix_cache          the KV of old weights must not serve the new ones

Every failure becomes one line: `ClientError` naming the route, the server's reason and the fix.
Not run against a real vLLM here (it cannot be installed on these machines): tested against
`tests/vllm_server.py`, a fake server that implements the same routes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import openai

from rlvr.clients.api_key import api_key_for
from rlvr.clients.openai_response import error_message
from rlvr.errors import ClientError, UsageError

DEV_MODE_HINT = (
    'start the server with VLLM_SERVER_DEV_MODE=1 and --weight-transfer-config \'{"backend": "BACKEND"}\' '
    "(vLLM >= 0.22)"
)
LORA_HINT = (
    "start the server with --enable-lora --max-lora-rank >= the trained rank and "
    "VLLM_ALLOW_RUNTIME_LORA_UPDATING=True, on a machine that sees the adapter folder"
)


def server_root(url: str) -> str:
    """The server's root URL from what a user types (`host:8000`, `.../v1/`).

    >>> server_root("http://gpu1:8000/v1/"), server_root("localhost:8000")
    ('http://gpu1:8000', 'http://localhost:8000')
    """
    url = url.strip().rstrip("/")
    if "://" not in url:
        url = "http://" + url
    return url.removesuffix("/v1")


class VLLMServer:
    """The control routes of one vLLM server at `url` (see the module docstring).

    The API key (vLLM's `--api-key`) is read from `api_key_var`; a server on this machine needs
    none. Each call is one request, not retried: these calls change the server's state, and a
    weight update that half happened is not one to send again blindly.
    """

    def __init__(self, url: str, *, api_key_var: str = "OPENAI_API_KEY", timeout_s: float = 1800.0) -> None:
        self.url = server_root(url)
        self.timeout_s = timeout_s
        self._key = api_key_for(api_key_var, [self.url])

    @property
    def openai_url(self) -> str:
        """The base URL of the OpenAI-compatible routes (for `OpenAIClient`)."""
        return self.url + "/v1"

    async def _call(self, method: str, route: str, body: dict[str, Any] | None = None, *, hint: str = "") -> Any:
        """One request; its JSON answer, or `ClientError` with the server's reason and `hint`."""
        async with openai.AsyncOpenAI(
            api_key=self._key, base_url=self.openai_url, timeout=self.timeout_s, max_retries=0
        ) as sdk:
            try:
                if method == "GET":
                    return await sdk.get(self.url + route, cast_to=object)
                return await sdk.post(self.url + route, body=body or {}, cast_to=object)
            except openai.APIConnectionError as exc:
                cause = exc.__cause__ or exc
                raise ClientError(
                    f"cannot reach the vLLM server at {self.url} ({type(cause).__name__}: {cause}); "
                    "check --vllm-url and that `vllm serve` is running"
                ) from None
            except openai.APIStatusError as exc:
                fix = f"; {hint}" if hint else ""
                raise ClientError(
                    f"vLLM server at {self.url}: {method} {route} failed: HTTP {exc.status_code}: "
                    f"{error_message(exc)}{fix}"
                ) from None

    # ---- models -------------------------------------------------------------------------------

    async def models(self) -> list[dict[str, Any]]:
        """The served models (base models and loaded LoRA adapters), as `/v1/models` lists them."""
        answer = await self._call("GET", "/v1/models")
        data = answer.get("data") if isinstance(answer, dict) else None
        if not isinstance(data, list):
            raise ClientError(f"vLLM server at {self.url}: GET /v1/models answered no model list: {answer!r:.200}")
        return [m for m in data if isinstance(m, dict)]

    async def served_name(self, model: str) -> str:
        """The name the server serves `model` under; `UsageError` when it serves another model.

        A base model matches when its `id` or `root` is `model`, or names the same folder."""
        bases = [m for m in await self.models() if not m.get("parent")]
        for m in bases:
            if any(_same_model(str(m.get(k) or ""), model) for k in ("id", "root")):
                return str(m["id"])
        served = ", ".join(f"{m.get('id')} (from {m.get('root')})" for m in bases) or "no base model"
        raise UsageError(
            f"the vLLM server at {self.url} serves {served}, but training starts from {model}; "
            f"start `vllm serve {model}` there, or train from the model it serves"
        )

    # ---- LoRA adapters ------------------------------------------------------------------------

    async def load_lora(self, name: str, path: str | Path) -> None:
        """Load the adapter saved in folder `path` under `name` (a new name each time: a name is
        loaded once, and a new one keeps cached prefixes of the old adapter from being reused)."""
        body = {"lora_name": name, "lora_path": str(path)}
        await self._call("POST", "/v1/load_lora_adapter", body, hint=LORA_HINT)

    async def unload_lora(self, name: str) -> None:
        await self._call("POST", "/v1/unload_lora_adapter", {"lora_name": name}, hint=LORA_HINT)

    # ---- full weights -------------------------------------------------------------------------

    async def world_size(self, backend: str) -> int:
        """Inference processes that receive weights (TP x PP x DP)."""
        answer = await self._call("GET", "/get_world_size", hint=DEV_MODE_HINT.replace("BACKEND", backend))
        size = answer.get("world_size") if isinstance(answer, dict) else None
        if not isinstance(size, int) or size < 1:
            raise ClientError(f"vLLM server at {self.url}: GET /get_world_size answered {answer!r:.200}")
        return size

    async def init_weight_transfer(self, init_info: dict[str, Any], backend: str) -> None:
        hint = DEV_MODE_HINT.replace("BACKEND", backend)
        await self._call("POST", "/init_weight_transfer_engine", {"init_info": init_info}, hint=hint)

    async def start_weight_update(self) -> None:
        await self._call("POST", "/start_weight_update", {"is_checkpoint_format": True})

    async def update_weights(self, update_info: dict[str, Any]) -> None:
        await self._call("POST", "/update_weights", {"update_info": update_info})

    async def finish_weight_update(self) -> None:
        await self._call("POST", "/finish_weight_update")

    async def reset_prefix_cache(self) -> None:
        await self._call("POST", "/reset_prefix_cache")


def _same_model(served: str, model: str) -> bool:
    """`served` (an id or root the server reports) and `model` name the same model.

    >>> _same_model("Qwen/Qwen3-0.6B", "Qwen/Qwen3-0.6B"), _same_model("/m/x/", "/m/x"), _same_model("a", "b")
    (True, True, False)
    """
    if not served:
        return False
    if served == model:
        return True
    root = Path(served).expanduser()
    return root.is_absolute() and root.resolve() == Path(model).expanduser().resolve()
