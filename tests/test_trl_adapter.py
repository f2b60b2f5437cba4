"""rlvr environments in TRL's GRPOTrainer (rlvr.train.trl_adapter): a few steps on the CPU with a
tiny model, single-turn (TRL samples, the rubric scores) and multi-turn (rlvr plays whole
episodes through rollout_func, the environment's tokens masked)."""

from __future__ import annotations

import pytest

pytest.importorskip("trl")
pytest.importorskip("datasets")

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer
from trl import GRPOConfig, GRPOTrainer

from rlvr.envs.multiturn import MultiTurnEnv, SingleTurnEnv
from rlvr.models import build_tiny_model
from rlvr.rubric import Rubric
from rlvr.train.trl_adapter import TASK_KEY, TRLEnv, _episode_tokens
from rlvr.types import Completion, Messages, Rollout, State, Turn

pytestmark = [
    pytest.mark.usefixtures("one_thread"),
    # TRL 1.16 calls transformers 5's deprecated gradient_checkpointing names
    pytest.mark.filterwarnings("ignore:`.*gradient_checkpointing.*` is deprecated:FutureWarning"),
]


def vowels(completion: Messages) -> float:
    """Share of vowels in the model's replies: differs from sample to sample, so every group
    has a reward spread and GRPO an update to make."""
    text = "".join(m["content"] for m in completion if m["role"] == "assistant")
    return sum(c in "aeiou" for c in text) / max(len(text), 1)


def replies(completion: Messages) -> float:
    return float(sum(m["role"] == "assistant" for m in completion))


class TwoTurns(MultiTurnEnv[State]):
    async def env_response(self, messages: Messages, state: State) -> Messages:
        return [{"role": "user", "content": "and once more"}]


TASKS = [{"id": f"t{i}", "question": f"say something about {w}"} for i, w in enumerate(["rain", "snow", "sun", "wind"])]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return build_tiny_model(tmp_path_factory.mktemp("trl") / "tiny")


def train(adapter: TRLEnv, tiny, tmp_path, monkeypatch) -> tuple[GRPOTrainer, bool]:
    monkeypatch.setenv("TRL_EXPERIMENTAL_SILENCE", "1")  # rollout_func is experimental in TRL 1.16
    model = AutoModelForCausalLM.from_pretrained(tiny)
    before = [p.detach().clone() for p in model.parameters()]
    config = GRPOConfig(
        output_dir=str(tmp_path / "out"),
        max_steps=2,
        per_device_train_batch_size=4,
        num_generations=2,
        max_completion_length=12,
        learning_rate=1e-2,
        use_cpu=True,
        report_to=[],
        logging_steps=1,
        save_strategy="no",
        disable_tqdm=True,
        seed=0,
        reward_weights=adapter.reward_weights,
    )
    trainer = GRPOTrainer(
        model=model, processing_class=AutoTokenizer.from_pretrained(tiny), args=config, **adapter.trainer_kwargs()
    )
    trainer.train()
    changed = any(not torch.equal(a, b) for a, b in zip(before, model.parameters()))
    return trainer, changed


def test_single_turn_env_trains_with_the_rubric_as_reward_functions(tiny, tmp_path, monkeypatch) -> None:
    env = SingleTurnEnv(TASKS, rubric=Rubric([vowels, replies], weights=[1.0, 0.0]))
    adapter = TRLEnv(env)
    assert [f.__name__ for f in adapter.reward_funcs] == ["vowels", "replies"] and adapter.reward_weights == [1.0, 0.0]
    assert "rollout_func" not in adapter.trainer_kwargs()
    trainer, changed = train(adapter, tiny, tmp_path, monkeypatch)
    logs = [h for h in trainer.state.log_history if "rewards/replies/mean" in h]
    assert len(logs) == 2 and all(h["rewards/replies/mean"] == 1.0 for h in logs)  # one reply each, scored by rlvr
    assert changed  # a reward spread within groups: the policy moved


def test_multi_turn_env_trains_on_whole_episodes(tiny, tmp_path, monkeypatch) -> None:
    env = TwoTurns(TASKS, rubric=Rubric([vowels, replies], weights=[1.0, 0.0]), max_turns=2)
    adapter = TRLEnv(env)
    assert adapter.dataset()[0]["prompt"][0][TASK_KEY] == "t0"
    trainer, changed = train(adapter, tiny, tmp_path, monkeypatch)
    logs = [h for h in trainer.state.log_history if "rewards/replies/mean" in h]
    assert len(logs) == 2 and all(h["rewards/replies/mean"] == 2.0 for h in logs)  # two model turns per episode
    assert changed


def test_episode_tokens_mask_the_environments_reply(tiny) -> None:
    tokenizer = AutoTokenizer.from_pretrained(tiny)
    # turn 2's prompt = turn 1's prompt + its sampled ids + the env's reply (ids 7, 8): one sequence
    rollout = Rollout(
        task_id="t",
        rollout_index=0,
        seed=0,
        prompt=[{"role": "user", "content": "hi"}],
        turns=[
            Turn(Completion("a", token_ids=[5, 6], logprobs=[-0.5, -0.25], prompt_token_ids=[1, 2])),
            Turn(Completion("b", token_ids=[9], logprobs=[-1.0], prompt_token_ids=[1, 2, 5, 6, 7, 8])),
        ],
    )
    prompt, completion, logprobs, mask = _episode_tokens(rollout, tokenizer)
    assert (prompt, completion, mask) == ([1, 2], [5, 6, 7, 8, 9], [1, 1, 0, 0, 1])
    assert logprobs == [-0.5, -0.25, 0.0, 0.0, -1.0]
    failed = Rollout(task_id="t", rollout_index=0, seed=0, prompt=[{"role": "user", "content": "hi"}], error="X: y")
    prompt, completion, logprobs, mask = _episode_tokens(failed, tokenizer)
    assert prompt and completion == [tokenizer.eos_token_id] and mask == [0]  # nothing to train on


def test_a_lone_surrogate_in_a_prompt_is_read_as_the_replacement_character(tiny) -> None:
    """A task's text may hold a lone surrogate (a Python string can; UTF-8 cannot): the TRL
    dataset (Arrow, UTF-8 only) and a failed episode's prompt ids take U+FFFD in its place."""
    tokenizer = AutoTokenizer.from_pretrained(tiny)
    env = SingleTurnEnv([{"id": "s", "question": "rain \ud800 snow"}], rubric=Rubric([vowels]))
    assert TRLEnv(env).dataset()[0]["prompt"][-1]["content"] == "rain \ufffd snow"
    failed = Rollout(
        task_id="s", rollout_index=0, seed=0, prompt=[{"role": "user", "content": "a \udfff b"}], error="X"
    )
    want = tokenizer.apply_chat_template([{"role": "user", "content": "a \ufffd b"}], add_generation_prompt=True)
    prompt, _, _, _ = _episode_tokens(failed, tokenizer)
    assert prompt == list(want["input_ids"] if isinstance(want, dict) else want)
