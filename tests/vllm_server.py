"""A fake vLLM server for training tests: vLLM 0.22's HTTP routes, generation by a real tiny model.

`VLLMServer(model_dir)` serves on a free port of 127.0.0.1 (plain ASGI, uvicorn in a thread):

- `GET /v1/models`; `POST /v1/chat/completions` answered by rlvr's `LocalModel` on the server's
  own copy of the model, with `logprobs` (tokens `token_id:N` under
  `return_tokens_as_token_ids`) and, under `return_token_ids`, `choices[0].token_ids` and
  `prompt_token_ids`, as vLLM >= 0.10.2 does. An unknown model name is a 404, as in vLLM.
- `POST /v1/load_lora_adapter` / `unload_lora_adapter`: the adapter folder is loaded with peft
  and merged into a fresh copy of the base model, served under `lora_name`. Loading a name that
  is loaded already is a 400, as in vLLM.
- Dev-mode routes (`dev_mode=True`): `/get_world_size`, `/init_weight_transfer_engine`,
  `/start_weight_update`, `/update_weights`, `/finish_weight_update`, `/reset_prefix_cache`.
  `update_weights` copies the tensors into the served model: from CUDA IPC handles
  (`ipc_handles_pickled`, rebuilt on this process's GPU as vLLM's IPC backend does) or, for
  the CPU tests' stand-in transport, from the safetensors file named in `init_info["file"]`.

`calls` records every control request (route, body); `sampled` every completion's token ids.
Settings that make it misbehave: `token_ids=False` (ignores the two token-id fields),
`refuse_lora=True` (every adapter load is a 400), `dev_mode=False` (the dev routes are 404s).
"""

from __future__ import annotations

import asyncio
import base64
import json
import pickle
import time
from pathlib import Path
from typing import Any

import torch
from openai_wire import ThreadedServer, error, read_body, send_json
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM, AutoTokenizer

from rlvr.clients.local import LocalModel
from rlvr.train.model import quiet_peft
from rlvr.types import SamplingArgs

DEV_ROUTES = (
    "/get_world_size",
    "/init_weight_transfer_engine",
    "/start_weight_update",
    "/update_weights",
    "/finish_weight_update",
    "/reset_prefix_cache",
)


class VLLMServer(ThreadedServer):
    """A fake vLLM server of the tiny model in `model_dir` (see the module docstring)."""

    def __init__(
        self,
        model_dir: str | Path,
        *,
        served_name: str | None = None,
        device: str = "cpu",
        token_ids: bool = True,
        refuse_lora: bool = False,
        dev_mode: bool = True,
    ) -> None:
        self.root = str(model_dir)
        self.name = served_name or self.root
        self.device = device
        self.token_ids, self.refuse_lora, self.dev_mode = token_ids, refuse_lora, dev_mode
        self.tokenizer = AutoTokenizer.from_pretrained(self.root)
        self.model = self._load()
        self.models: dict[str, LocalModel] = {
            self.name: LocalModel(self.name, model=self.model, tokenizer=self.tokenizer)
        }
        self.lora_paths: dict[str, str] = {}
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.sampled: list[list[int]] = []
        self.init_info: dict[str, Any] | None = None

    def _load(self) -> Any:
        return AutoModelForCausalLM.from_pretrained(self.root, dtype=torch.float32).to(self.device).eval()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def routes(self) -> list[str]:
        return [route for route, _ in self.calls]

    # ---- lifecycle ------------------------------------------------------------------------

    # ---- ASGI -----------------------------------------------------------------------------

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        raw = await read_body(receive)
        body = json.loads(raw) if raw else {}
        route = scope["path"]
        if route == "/v1/chat/completions":
            status, payload = await self._chat(body)
        elif route == "/v1/models":
            status, payload = 200, self._models()
        elif route in ("/v1/load_lora_adapter", "/v1/unload_lora_adapter") or (self.dev_mode and route in DEV_ROUTES):
            self.calls.append((route, body))
            status, payload = await asyncio.to_thread(self._control, route, body)
        else:
            status, payload = 404, {"detail": "Not Found"}
        await send_json(send, status, payload)

    def _models(self) -> dict[str, Any]:
        data = [{"id": self.name, "object": "model", "root": self.root, "parent": None, "max_model_len": 2048}]
        data += [{"id": n, "object": "model", "root": p, "parent": self.name} for n, p in self.lora_paths.items()]
        return {"object": "list", "data": data}

    async def _chat(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        local = self.models.get(body.get("model", ""))
        if local is None:
            return 404, error(f"The model `{body.get('model')}` does not exist.", "NotFoundError", code="404")
        sampling = SamplingArgs(
            max_tokens=body.get("max_tokens"),
            temperature=body.get("temperature", 1.0),
            top_p=body.get("top_p", 1.0),
            seed=body.get("seed"),
            stop=body.get("stop"),
            logprobs=True,
        )
        c = await local.chat(body["messages"], sampling)
        ids = list(c.token_ids or [])
        self.sampled.append(ids)
        as_ids = self.token_ids and body.get("return_tokens_as_token_ids")
        content = [
            {"token": f"token_id:{t}" if as_ids else self.tokenizer.decode([t]), "logprob": lp, "top_logprobs": []}
            for t, lp in zip(ids, c.logprobs or [])
        ]
        choice: dict[str, Any] = {
            "index": 0,
            "message": {"role": "assistant", "content": c.text},
            "finish_reason": c.finish_reason,
            "logprobs": {"content": content} if body.get("logprobs") else None,
        }
        payload: dict[str, Any] = {
            "id": f"chatcmpl-{len(self.sampled)}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body["model"],
            "choices": [choice],
            "usage": {"prompt_tokens": c.usage.prompt_tokens, "completion_tokens": c.usage.completion_tokens},
        }
        if self.token_ids and body.get("return_token_ids"):
            choice["token_ids"] = ids
            payload["prompt_token_ids"] = c.prompt_token_ids
        return 200, payload

    # ---- control routes (in a thread: they load models and may wait for a file) -------------

    def _control(self, route: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        if route == "/v1/load_lora_adapter":
            name, path = body["lora_name"], body["lora_path"]
            if self.refuse_lora:
                return 400, error("LoRA is not enabled on this server (--enable-lora)", "BadRequestError")
            if name in self.models:
                return 400, error(f"The lora adapter '{name}' has already been loaded.", "InvalidUserInput")
            from peft import PeftModel

            with quiet_peft():
                merged = PeftModel.from_pretrained(self._load(), path).merge_and_unload().eval()
            self.models[name] = LocalModel(name, model=merged, tokenizer=self.tokenizer)
            self.lora_paths[name] = path
            return 200, {"message": f"Success: LoRA adapter '{name}' added successfully."}
        if route == "/v1/unload_lora_adapter":
            name = body["lora_name"]
            if name not in self.lora_paths:
                return 404, error(f"The lora adapter '{name}' cannot be found.", "NotFoundError")
            del self.models[name], self.lora_paths[name]
            return 200, {"message": f"Success: LoRA adapter '{name}' removed successfully."}
        if route == "/get_world_size":
            return 200, {"world_size": 1}
        if route == "/init_weight_transfer_engine":
            self.init_info = body["init_info"]
            return 200, {"message": "Weight transfer initialized"}
        if route == "/update_weights":
            self._receive(body["update_info"])
            return 200, {"message": "Weights updated"}
        if route == "/reset_prefix_cache":
            self.models[self.name].clear_cache()
        return 200, {"message": "ok"}

    def _receive(self, info: dict[str, Any]) -> None:
        """Copy the tensors named in `info` into the served model."""
        params = dict(self.model.named_parameters())
        if "ipc_handles_pickled" in info:
            handles = pickle.loads(base64.b64decode(info["ipc_handles_pickled"]))
            index = torch.cuda.current_device()
            uuid = str(torch.cuda.get_device_properties(index).uuid)
            tensors = {}
            for name, handle in zip(info["names"], handles):
                func, args = handle[uuid]
                args = list(args)
                args[6] = index  # the device index, as this process numbers it
                tensors[name] = func(*args)
        else:
            assert self.init_info is not None, "update_weights before init_weight_transfer_engine"
            sent = Path(self.init_info["file"])
            deadline = time.monotonic() + 30
            while not sent.exists():  # the transport sends while this request waits, as NCCL's recv does
                assert time.monotonic() < deadline, "no tensors arrived"
                time.sleep(0.01)
            tensors = load_file(sent)
            sent.unlink()
        assert sorted(tensors) == sorted(info["names"]), "update_info names other tensors than were sent"
        with torch.no_grad():
            for name, tensor in tensors.items():
                params[name].copy_(tensor)
