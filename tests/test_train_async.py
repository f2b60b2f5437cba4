"""Overlap (`rlvr train --async`): the next batch is played during the update, on the weights
before it (tiny model, CPU)."""

from __future__ import annotations

import math
import threading
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from test_grpo import ExploredEnv, _same, config, fit, killed_at_update

from rlvr.cli import main
from rlvr.errors import TrainingError, UsageError
from rlvr.train import batch as train_batch
from rlvr.train import grpo
from rlvr.train.checkpoint import latest_checkpoint
from rlvr.train.config import TrainConfig

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.mark.parametrize("loss", ["grpo", "cispo", "gspo", "lora"])
def test_overlap_trains_one_step_behind_and_logs_it(tiny, tmp_path, loss) -> None:
    changes = {"loss": "cispo", "lora_rank": 4, "lr": 5e-2} if loss == "lora" else {"loss": loss}
    history = fit(config(tiny, tmp_path / "run", steps=3, overlap=True, **changes))
    assert [m["async/staleness"] for m in history] == [0.0, 1.0, 1.0]  # the first step plays its own
    assert all(m["time/rollouts_wait"] >= 0 for m in history)
    assert history[0]["ratio/mean"] == history[0]["ratio/max"] == 1.0  # on-policy: old = new, exactly
    for m in history[1:]:  # the weights moved by one update since the batch was played
        assert m["ratio/max"] > 1.001 and m["ratio/min"] < 0.999
        assert m["is_weight/max"] > 0
    if loss not in ("cispo", "lora"):  # (cispo's cap of 4 is out of reach here)
        assert all(m["clip/frac"] > 0 for m in history[1:])
    # the old log-probs are the sampler's own (the snapshot that played the batch), not the trained weights'
    assert all(m["logprob/gen_mismatch"] < 1e-4 for m in history)


def test_the_snapshot_copies_only_the_trained_weights_and_refreshes_them_in_place(tiny) -> None:
    from rlvr.train.fields import LoraSpec
    from rlvr.train.generation import Snapshot
    from rlvr.train.model import load_trainable

    model = load_trainable(str(tiny), lora=LoraSpec(4), device=torch.device("cpu"))
    snapshot = Snapshot(model)
    pairs = list(zip(snapshot.model.parameters(), model.parameters(), strict=True))
    assert all((mine is theirs) != theirs.requires_grad for mine, theirs in pairs)  # the base is shared
    assert not any(p.requires_grad for p in snapshot.model.parameters())
    trained = [(mine, theirs) for mine, theirs in pairs if theirs.requires_grad]
    assert trained and len(trained) < len(pairs)
    where = [mine.data_ptr() for mine, _ in trained]
    with torch.no_grad():
        for _, theirs in trained:
            theirs.add_(1.0)
    assert not any(torch.equal(mine, theirs) for mine, theirs in trained)
    snapshot.refresh()
    assert all(torch.equal(mine, theirs) for mine, theirs in trained)
    assert [mine.data_ptr() for mine, _ in trained] == where  # in place (CUDA graphs stay valid)


def test_the_batch_played_ahead_comes_from_the_weights_before_the_update(tiny, tmp_path, monkeypatch) -> None:
    """Each update's batch, scored again under the weights before the previous update and under
    those before its own: its sampled log-probs are the former's (staleness 1), not the latter's."""
    before, batches, real_update = [], [], grpo.update_policy

    def recorded(policy, ref, seqs, *args, **kwargs):
        before.append({k: v.detach().clone() for k, v in policy.state_dict().items()})
        batches.append(seqs)
        return real_update(policy, ref, seqs, *args, **kwargs)

    monkeypatch.setattr(grpo, "update_policy", recorded)
    fit(config(tiny, tmp_path / "run", steps=3, overlap=True, temperature=0.7))
    model = transformers.AutoModelForCausalLM.from_pretrained(tiny).eval()

    def gap(weights: dict[str, torch.Tensor], seqs) -> float:
        """Largest |sampled log-prob - log-prob under `weights`| over the sampled tokens."""
        model.load_state_dict(weights)
        worst = 0.0
        with torch.no_grad():
            for s in seqs:
                ids = torch.tensor([s.ids])
                logp = torch.log_softmax(model(ids).logits[0, :-1].float() / 0.7, -1)
                logp = logp.gather(1, ids[0, 1:, None])[:, 0]
                for t, on in enumerate(s.mask[1:]):
                    if on and not math.isnan(s.gen_logprobs[t + 1]):
                        worst = max(worst, abs(float(logp[t]) - s.gen_logprobs[t + 1]))
        return worst

    assert gap(before[0], batches[0]) < 1e-4  # step 1 played its own batch
    for t in (1, 2):
        assert gap(before[t - 1], batches[t]) < 1e-4  # played by the weights one update behind
        assert gap(before[t], batches[t]) > 1e-3  # not by the weights it updates


def test_without_overlap_nothing_changes_and_checkpoints_every_step_leave_nothing_to_overlap(tiny, tmp_path) -> None:
    changes = {"steps": 3, "loss": "cispo", "minibatches": 2, "save_every": 1}
    default = fit(config(tiny, tmp_path / "a", **changes))
    off = fit(config(tiny, tmp_path / "b", overlap=False, **changes))
    every = fit(config(tiny, tmp_path / "c", overlap=True, **changes))  # a checkpoint after each step
    assert all("async/staleness" not in m for m in default + off)
    assert [_same(a, b) for a, b in zip(default, off, strict=True)] == [[], [], []]
    assert [m["async/staleness"] for m in every] == [0.0, 0.0, 0.0]
    assert [_same(a, b) for a, b in zip(default, every, strict=True)] == [[], [], []]


def test_restarts_drawn_ahead_come_from_the_step_just_played(tiny, tmp_path) -> None:
    """Batch t + 1 is drawn during update t, after step t's rollouts offered their restart points:
    the restarts, probes and given replies are those of a run without overlap."""
    changes = {"steps": 4, "loss": "cispo", "restart_frac": 0.5, "restart_below": 1.0, "restart_greedy": 2}
    changes["restart_explore"] = 1

    def run(out: Path, overlap: bool) -> list[dict[str, float]]:
        cfg = config(tiny, out, overlap=overlap, **changes)
        return grpo.train(cfg, make_env=ExploredEnv, quiet=True, plots=False)

    plain, ahead = run(tmp_path / "a", False), run(tmp_path / "b", True)
    assert [m["async/staleness"] for m in ahead] == [0.0, 1.0, 1.0, 1.0]
    assert [m["restart/tasks"] for m in ahead] == [m["restart/tasks"] for m in plain] == [0.0, 1.0, 1.0, 1.0]
    assert [m["restart/given"] for m in ahead] == [m["restart/given"] for m in plain]
    assert all(m["restart/buffer"] > 0 for m in ahead)


def test_a_resumed_overlap_run_replays_the_run_it_resumes(tiny, tmp_path, monkeypatch) -> None:
    """Checkpoint every 2 steps: no batch is in flight when one is written, so the resumed run
    plays what the straight one played, step for step."""
    changes = {"steps": 4, "save_every": 2, "loss": "grpo", "overlap": True}
    straight = fit(config(tiny, tmp_path / "a", **changes))
    assert [m["async/staleness"] for m in straight] == [0.0, 1.0, 0.0, 1.0]
    killed_at_update(4, lambda: fit(config(tiny, tmp_path / "b", **changes)), monkeypatch)  # batch 4 in hand
    assert latest_checkpoint(tmp_path / "b").step == 2
    resumed = fit(config(tiny, tmp_path / "b", **changes), resume=True)
    assert [_same(a, b) for a, b in zip(straight[2:], resumed, strict=True)] == [[], []]
    assert resumed[1]["ratio/max"] != 1.0
    a = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "a" / "final")
    b = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "b" / "final")
    assert all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values()))
    # a run may be resumed with overlap switched off (its checkpoints hold the same state)
    assert len(fit(config(tiny, tmp_path / "b", **{**changes, "steps": 5, "overlap": False}), resume=True)) == 1


def test_the_async_flag_and_what_overlap_cannot_do(tiny, tmp_path, capsys) -> None:
    with pytest.raises(UsageError, match="overlap .* not with sharding = fsdp"):
        TrainConfig(env="vowels", model="m", overlap=True, sharding="fsdp")
    argv = ["train", "reverse_text", "-m", str(tiny), "-o", str(tmp_path / "run"), "--batch-size", "4"]
    argv += ["--group-size", "2", "--max-tokens", "4", "--eval-every", "none", "--probe-tasks", "0", "--steps", "2"]
    pytest.importorskip("reverse_text")
    assert main([*argv, "--async"]) == 0
    assert "async/staleness" in (tmp_path / "run" / "metrics.csv").read_text()
    with pytest.raises(SystemExit):
        main(["train", "--help"])
    assert "--overlap, --no-overlap, --async, --no-async" in capsys.readouterr().out


def test_on_a_vllm_server_each_batch_plays_on_the_adapter_before_the_update_and_the_push_waits_for_it(
    tiny, tmp_path
) -> None:
    pytest.importorskip("uvicorn")
    from vllm_server import VLLMServer

    with VLLMServer(tiny) as server:
        real_chat = server._chat

        async def chat(body):  # the served model of each request, in order with the adapter loads
            server.calls.append(("chat", {"lora_name": body["model"]}))
            return await real_chat(body)

        server._chat = chat
        changes = {"steps": 3, "vllm_url": server.url, "lora_rank": 4, "lr": 5e-2, "probe_tasks": 0, "overlap": True}
        history = fit(config(tiny, tmp_path / "run", **changes))
        kept = ("chat", "/v1/load_lora_adapter")
        events = [(route, body["lora_name"]) for route, body in server.calls if route in kept]
    loaded = [i for i, (route, _) in enumerate(events) if route == "/v1/load_lora_adapter"]
    first = loaded[0]
    chats = [name for route, name in events[first:] if route == "chat"]
    assert chats == ["rlvr-lora-step0"] * 16 + ["rlvr-lora-step1"] * 8  # batches 1-2 on step 0's, batch 3 on step 1's
    loads = [name for route, name in events[first:] if route == kept[1]]
    assert loads == [f"rlvr-lora-step{k}" for k in range(4)]
    order = [route for route, _ in events[first:]]
    assert (
        order
        == ["/v1/load_lora_adapter"]
        + ["chat"] * 16
        + ["/v1/load_lora_adapter"]
        + ["chat"] * 8
        + ["/v1/load_lora_adapter"] * 2
    )  # no push while a batch is played
    assert [m["async/staleness"] for m in history] == [0.0, 1.0, 1.0]
    for m in history[1:]:
        assert m["ratio/max"] > 1.001 and m["logprob/gen_mismatch"] < 1e-3  # the snapshot is the server's adapter


def _overlap_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith("rlvr-overlap")]


def test_an_update_failing_with_a_batch_in_flight_waits_for_the_batch_and_says_its_step(
    tiny, tmp_path, monkeypatch
) -> None:
    """Update 2 fails after batch 3 started: the run ends with update 2's error (its step named),
    batch 3 was played to its end (the event loop is free), and no overlap thread is left."""
    real_update, calls, played = grpo.update_policy, [], []
    real_play = train_batch._play

    def failing(*args, started=None, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            started()
            raise TrainingError("the loss is NaN")
        return real_update(*args, started=started, **kwargs)

    def play(*args):
        out = real_play(*args)
        played.append(out.drawn.step)
        return out

    monkeypatch.setattr(grpo, "update_policy", failing)
    monkeypatch.setattr(train_batch, "_play", play)
    with pytest.raises(TrainingError, match="step 2: the loss is NaN"):
        fit(config(tiny, tmp_path / "run", steps=4, overlap=True))
    assert played == [0, 1, 2]
    assert _overlap_threads() == []


def test_a_batch_played_ahead_that_fails_ends_the_run_with_its_error(tiny, tmp_path, monkeypatch) -> None:
    """An error on the overlap thread (not a failed rollout: those are kept and never trained) is
    raised on the main thread after the update, and the thread is gone."""
    real_play = train_batch._play

    def play(*args):
        if threading.current_thread().name.startswith("rlvr-overlap"):
            raise OSError("the sandbox went away")
        return real_play(*args)

    monkeypatch.setattr(train_batch, "_play", play)
    with pytest.raises(OSError, match="the sandbox went away"):
        fit(config(tiny, tmp_path / "run", steps=3, overlap=True))
    assert _overlap_threads() == []
    monkeypatch.setattr(train_batch, "_play", real_play)
    history = fit(config(tiny, tmp_path / "again", steps=2, overlap=True))  # nothing left behind in the process
    assert [m["async/staleness"] for m in history] == [0.0, 1.0]
