"""Training with generation on a vLLM server, against a fake server of the same HTTP protocol.

The fake (`tests/vllm_server.py`) generates with a real tiny model and records every control
request, so these tests check that the trainer trains on the ids the server sampled, pushes its
weights after every step (and the server then holds exactly the trainer's weights), and fails
with one clear line where a real deployment would go wrong. No real vLLM runs here.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("uvicorn")

from safetensors.torch import save_file
from test_grpo import config, vowel_env
from transformers import AutoModelForCausalLM
from vllm_server import VLLMServer

from rlvr.cli import main
from rlvr.errors import ClientError, TrainingError, UsageError
from rlvr.models import build_tiny_model
from rlvr.train import grpo, weight_sync
from rlvr.train.config import TrainConfig

pytestmark = pytest.mark.usefixtures("one_thread")

PER_STEP = ["/start_weight_update", "/update_weights", "/finish_weight_update", "/reset_prefix_cache"]


@pytest.fixture
def server(tiny):
    with VLLMServer(tiny) as s:
        yield s


class FileTransport:
    """Stands in for the NCCL data plane on a CPU: the tensors go through a safetensors file the
    fake server waits for, while the HTTP handshake is exactly the NCCL backend's."""

    backend = "nccl"

    def __init__(self) -> None:
        self.file = Path(tempfile.mkdtemp()) / "weights.safetensors"
        self.nccl = weight_sync.NcclTransport()

    def open(self, world_size, device):
        return {**self.nccl.init_info(world_size), "file": str(self.file)}

    def connect(self) -> None:
        return None

    def update_info(self, params):
        return self.nccl.update_info(params)

    def send(self, params) -> None:
        partial = self.file.with_suffix(".partial")
        save_file({name: t.contiguous() for name, t in params}, str(partial))
        os.replace(partial, self.file)


def fit(cfg: TrainConfig, monkeypatch) -> tuple[list[dict[str, float]], list[list[int]]]:
    """Train; return the metrics and the ids of every trained (mask 1) stretch of each step."""
    trained: list[list[int]] = []
    build = grpo.build_sequences

    def spy(rollouts, advantages, trainable):
        trained.extend(t.completion.token_ids for r in rollouts for t in r.turns)
        return build(rollouts, advantages, trainable)

    monkeypatch.setattr(grpo, "build_sequences", spy)
    return grpo.train(cfg, make_env=vowel_env, quiet=True, plots=False), trained


def same_weights(a, b) -> bool:
    sa, sb = a.state_dict(), b.state_dict()
    return sa.keys() == sb.keys() and all(torch.allclose(sa[k], sb[k], atol=1e-6) for k in sa)


def test_lora_run_generates_on_the_server_and_loads_new_adapters_after_every_step(
    tiny, tmp_path, server, monkeypatch
) -> None:
    cfg = config(tiny, tmp_path / "run", steps=2, vllm_url=server.url, lora_rank=4, lr=5e-2, probe_tasks=0)
    history, trained = fit(cfg, monkeypatch)
    # every trained completion is one the server sampled (the check request aside)
    assert trained and all(ids in server.sampled for ids in trained)
    assert len(server.sampled) == 1 + 2 * cfg.batch_size
    loads = [body["lora_name"] for route, body in server.calls if route == "/v1/load_lora_adapter"]
    unloads = [body["lora_name"] for route, body in server.calls if route == "/v1/unload_lora_adapter"]
    assert loads == ["rlvr-lora-step0", "rlvr-lora-step1", "rlvr-lora-step2"]
    assert unloads == ["rlvr-lora-step0", "rlvr-lora-step1"]
    assert list(server.lora_paths) == ["rlvr-lora-step2"]
    # the adapter the server generates with now is the trained one (final/ is the merged model)
    final = AutoModelForCausalLM.from_pretrained(tmp_path / "run" / "final", dtype=torch.float32)
    assert same_weights(server.models["rlvr-lora-step2"].model, final)
    assert not same_weights(server.model, final)  # ... and training changed it
    for step in history:
        assert 0 <= step["logprob/gen_mismatch"] < 1e-3  # same model, same temperature
        assert step["time/weight_sync"] > 0


def test_full_weight_run_follows_the_transfer_handshake_every_step(tiny, tmp_path, server, monkeypatch) -> None:
    monkeypatch.setitem(weight_sync.TRANSPORTS, "nccl", FileTransport)
    cfg = config(tiny, tmp_path / "run", steps=2, vllm_url=server.url, weight_sync="nccl", lr=1e-2)
    _, trained = fit(cfg, monkeypatch)
    assert trained and all(ids in server.sampled for ids in trained)
    assert server.routes() == ["/get_world_size", "/init_weight_transfer_engine"] + PER_STEP * 3
    assert server.init_info is not None and server.init_info["world_size"] == 2
    assert server.init_info["rank_offset"] == 1
    update = [body["update_info"] for route, body in server.calls if route == "/update_weights"][0]
    final = AutoModelForCausalLM.from_pretrained(tmp_path / "run" / "final", dtype=torch.float32)
    assert update["names"] == [name for name, _ in final.named_parameters()]
    assert update["dtype_names"][0] == "float32" and update["packed"] is False
    assert same_weights(server.model, final)


@pytest.mark.heavy
def test_rlvr_train_cli_runs_against_the_server(tiny, tmp_path, server, capsys) -> None:
    pytest.importorskip("rlvr_tictactoe")
    out = tmp_path / "run"
    argv = ["train", "tictactoe", "-m", str(tiny), "-o", str(out), "--vllm-url", server.url, "--lora-rank", "2"]
    argv += ["--steps", "2", "--batch-size", "4", "--group-size", "2", "--max-tokens", "6", "--max-turns", "2"]
    argv += ["--eval-every", "none", "--probe-tasks", "0", "--env-args", '{"opponent": "random", "num_tasks": 8}']
    assert main(argv) == 0, capsys.readouterr().err
    assert "step 2/2" in capsys.readouterr().out
    assert [r for r in server.routes() if r.endswith("load_lora_adapter")] == [
        "/v1/load_lora_adapter",
        "/v1/load_lora_adapter",
        "/v1/unload_lora_adapter",
        "/v1/load_lora_adapter",
        "/v1/unload_lora_adapter",
    ]


# ---- clear errors ------------------------------------------------------------------------------


def run(cfg: TrainConfig) -> None:
    grpo.train(cfg, make_env=vowel_env, quiet=True, plots=False)


def test_unreachable_server_is_one_clear_line(tiny, tmp_path) -> None:
    with VLLMServer(tiny) as gone:
        url = gone.url
    with pytest.raises(ClientError, match="cannot reach the vLLM server at http://127.0.0.1.*vllm serve"):
        run(config(tiny, tmp_path / "run", vllm_url=url, lora_rank=4))


def test_server_without_token_ids_is_refused_before_training(tiny, tmp_path) -> None:
    with VLLMServer(tiny, token_ids=False) as s, pytest.raises(UsageError, match="without prompt_token_ids"):
        run(config(tiny, tmp_path / "run", vllm_url=s.url, lora_rank=4))
    assert not (tmp_path / "run" / "metrics.csv").exists() or "1" not in (tmp_path / "run" / "metrics.csv").read_text()


def test_refused_adapter_names_the_server_flags(tiny, tmp_path) -> None:
    with VLLMServer(tiny, refuse_lora=True) as s, pytest.raises(ClientError) as err:
        run(config(tiny, tmp_path / "run", vllm_url=s.url, lora_rank=4))
    assert "load_lora_adapter failed: HTTP 400: LoRA is not enabled" in str(err.value)
    assert "VLLM_ALLOW_RUNTIME_LORA_UPDATING=True" in str(err.value)


def test_server_of_another_model_is_refused(tiny, tmp_path) -> None:
    other = build_tiny_model(tmp_path / "other", preset="tiny", seed=1)
    with VLLMServer(other, served_name="other") as s, pytest.raises(UsageError) as err:
        run(config(tiny, tmp_path / "run", vllm_url=s.url, lora_rank=4))
    assert f"serves other (from {other})" in str(err.value) and f"vllm serve {tiny}" in str(err.value)


def test_full_weights_need_the_dev_routes(tiny, tmp_path) -> None:
    with VLLMServer(tiny, dev_mode=False) as s, pytest.raises(ClientError, match="VLLM_SERVER_DEV_MODE=1"):
        run(config(tiny, tmp_path / "run", vllm_url=s.url, weight_sync="nccl"))


def test_nccl_and_ipc_say_why_they_cannot_start_before_the_server_waits(tiny, tmp_path, server) -> None:
    with pytest.raises(TrainingError, match="nccl cannot be set up.*does not import vLLM"):
        run(config(tiny, tmp_path / "a", vllm_url=server.url, weight_sync="nccl"))
    with pytest.raises(TrainingError, match="ipc shares CUDA memory.*runs on cpu"):
        run(config(tiny, tmp_path / "b", vllm_url=server.url))  # full fine-tuning: ipc by default
    assert server.routes() == ["/get_world_size", "/get_world_size"]  # no rendezvous was started


def test_weight_sync_must_fit_the_run(tiny, tmp_path) -> None:
    with pytest.raises(UsageError, match="weight_sync is set but vllm_url is not"):
        config(tiny, tmp_path, weight_sync="lora", lora_rank=4)
    with pytest.raises(UsageError, match="weight_sync = ipc does not fit lora_rank = 4"):
        config(tiny, tmp_path, vllm_url="http://localhost:8000", weight_sync="ipc", lora_rank=4)
    with pytest.raises(UsageError, match="unknown weight_sync 'disk'"):
        config(tiny, tmp_path, vllm_url="http://localhost:8000", weight_sync="disk")


def test_local_training_needs_no_openai_client() -> None:
    """The trainer loads the server path's modules (openai, weight sync) only when a server is
    named: on a GPU machine without the openai package, local training ran into an ImportError."""
    import subprocess
    import sys

    code = (
        "import sys; sys.modules['openai'] = None\n"
        "import rlvr.train.grpo, rlvr.train.generation\n"
        "print(sorted(m for m in ('rlvr.clients.openai', 'rlvr.train.weight_sync') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
