"""rlvr.models: tiny models and their tokenizer load back like hub models."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from rlvr.errors import UsageError
from rlvr.models import (
    build_tiny_model,
    count_parameters,
    default_corpus,
    init_model,
    train_tokenizer,
)

AutoModelForCausalLM = transformers.AutoModelForCausalLM
AutoTokenizer = transformers.AutoTokenizer


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_model(tmp_path_factory.mktemp("tiny"), preset="tiny", seed=0)


@pytest.fixture(scope="module")
def tokenizer(tiny_dir: Path):
    return AutoTokenizer.from_pretrained(tiny_dir)


def _logits(model, ids: list[int]):
    with torch.no_grad():
        return model(torch.tensor([ids])).logits


def test_saved_model_loads_with_auto_classes_and_same_logits(tiny_dir: Path, tokenizer) -> None:
    loaded = AutoModelForCausalLM.from_pretrained(tiny_dir)
    fresh = init_model(tokenizer, preset="tiny", seed=0)  # the same weights, never saved
    other_seed = init_model(tokenizer, preset="tiny", seed=1)
    ids = tokenizer.encode("<think>the board</think><move>5</move>")
    assert torch.equal(_logits(loaded, ids), _logits(fresh, ids))
    assert not torch.allclose(_logits(loaded, ids), _logits(other_seed, ids))
    assert loaded.config.tie_word_embeddings
    assert loaded.get_input_embeddings().weight is loaded.get_output_embeddings().weight
    assert loaded.config.max_position_embeddings >= 2048
    assert loaded.config.vocab_size == len(tokenizer)


def test_resaved_model_round_trips(tiny_dir: Path, tmp_path: Path) -> None:
    model = AutoModelForCausalLM.from_pretrained(tiny_dir)
    model.save_pretrained(tmp_path)
    again = AutoModelForCausalLM.from_pretrained(tmp_path)
    ids = [1, 5, 9, 2]
    assert torch.equal(_logits(model, ids), _logits(again, ids))


def test_init_leaves_global_rng_alone(tokenizer) -> None:
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    init_model(tokenizer, preset="tiny", seed=0)
    assert torch.equal(torch.rand(3), expected)


@pytest.mark.parametrize(("preset", "low", "high"), [("tiny", 1e6, 3e6), ("small", 10e6, 30e6)])
def test_parameter_count_in_preset_range(tokenizer, preset: str, low: float, high: float) -> None:
    assert low <= count_parameters(init_model(tokenizer, preset=preset)) <= high


def test_bad_arguments_are_usage_errors(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="'huge'.*'small', 'tiny'"):
        build_tiny_model(tmp_path, preset="huge")
    with pytest.raises(UsageError, match="vocab_size must be at least 512"):
        build_tiny_model(tmp_path, vocab_size=100)


def test_special_tokens_and_generation_config(tiny_dir: Path, tokenizer) -> None:
    assert (tokenizer.eos_token, tokenizer.pad_token) == ("<|im_end|>", "<|endoftext|>")
    assert tokenizer.bos_token is not None
    assert tokenizer("hi")["input_ids"] == tokenizer.encode("hi", add_special_tokens=False)
    generation = json.loads((tiny_dir / "generation_config.json").read_text())
    assert tokenizer.eos_token_id in generation["eos_token_id"]
    assert generation["pad_token_id"] == tokenizer.pad_token_id
    # servers (transformers serve) start from this file: without do_sample they decode greedily
    # at any temperature, and every rollout of a group is the same
    assert generation["do_sample"] is True


def test_generate_stops_at_end_of_turn(tiny_dir: Path, tokenizer) -> None:
    model = AutoModelForCausalLM.from_pretrained(tiny_dir)
    end_of_turn = tokenizer.convert_tokens_to_ids("<|im_end|>")

    class OnlyEndOfTurn(transformers.LogitsProcessor):
        def __call__(self, input_ids, scores):
            forced = torch.full_like(scores, -float("inf"))
            forced[:, end_of_turn] = 0.0
            return forced

    prompt = tokenizer.apply_chat_template(
        [{"role": "user", "content": "hi"}], add_generation_prompt=True, return_tensors="pt"
    )
    out = model.generate(**prompt, max_new_tokens=8, do_sample=False, logits_processor=[OnlyEndOfTurn()])
    # The saved generation config alone must stop generation at the end-of-turn token.
    assert out[0, prompt["input_ids"].shape[1] :].tolist() == [end_of_turn]


@pytest.mark.parametrize(
    "text",
    [
        "<think>\nI take 5.\n</think>\n<move>5</move>",
        "<answer>3.14159</answer> x=12, y=-7",
        '<tool_call>{"name": "add", "arguments": {"a": 1}}</tool_call>',
        "  leading and trailing  \n\t tabs ",
        "Ünïcødé 🙂 and <unknown_tag/>",
        "| X | O | . |\n---+---\n 1 | 2 | 3 ",
    ],
)
def test_tokenizer_is_lossless(tokenizer, text: str) -> None:
    assert tokenizer.decode(tokenizer.encode(text)) == text


def test_digits_are_single_tokens(tokenizer) -> None:
    tokens = tokenizer.convert_ids_to_tokens(tokenizer.encode("cell 12 and 345"))
    assert [t for t in tokens if any(c.isdigit() for c in t)] == ["1", "2", "3", "4", "5"]


def test_markers_and_tags_are_single_tokens(tokenizer) -> None:
    for marker in [
        "<|im_start|>",
        "<|im_end|>",
        "<|endoftext|>",
        "<think>",
        "</think>",
        "<tool_call>",
        "</tool_call>",
    ]:
        assert len(tokenizer.encode(marker)) == 1, marker
    ids = tokenizer.encode("<|im_start|>user\n<think>a</think><|im_end|>")
    assert tokenizer.decode(ids, skip_special_tokens=True) == "user\n<think>a</think>"


def test_corpus_shapes_the_vocabulary() -> None:
    plain = train_tokenizer(default_corpus(), vocab_size=2048, model_max_length=128)
    custom = train_tokenizer(["quixotic zephyr "] * 50, vocab_size=2048, model_max_length=128)
    assert len(custom.encode("quixotic zephyr")) <= 2 < len(plain.encode("quixotic zephyr"))
    with pytest.raises(TypeError, match="corpus items must be str"):
        train_tokenizer(["ok", 3], vocab_size=300, model_max_length=128)  # type: ignore[list-item]


def test_tokenizer_training_is_deterministic() -> None:
    a = train_tokenizer(default_corpus(), vocab_size=2048, model_max_length=128)
    b = train_tokenizer(default_corpus(), vocab_size=2048, model_max_length=128)
    assert a.get_vocab() == b.get_vocab()
    text = " ".join(default_corpus())
    assert a.encode(text) == b.encode(text)


# ---------------------------------------------------------------------------- chat template

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "add",
            "description": "Add two integers.",
            "parameters": {"type": "object", "properties": {"a": {"type": "integer"}}},
        },
    }
]


def test_chat_template_renders_every_role_and_tool_calls(tokenizer) -> None:
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "1+2?"},
        {
            "role": "assistant",
            "content": "Let me add.",
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "add", "arguments": '{"a": 1, "b": 2}'},
                },
                {
                    "id": "c2",
                    "type": "function",
                    "function": {"name": "add", "arguments": {"a": 3}},
                },
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "3"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"type": "function", "function": {"name": "add", "arguments": {"a": 0}}}],
        },
        {"role": "assistant", "content": "<answer>3</answer>"},
    ]
    text = tokenizer.apply_chat_template(messages, tools=TOOLS, tokenize=False)
    tools_json = json.dumps(TOOLS[0], ensure_ascii=False)
    assert text == (
        "<|im_start|>system\nBe brief.\n\n# Tools\nYou may call these functions:\n<tools>\n"
        f"{tools_json}\n</tools>\n"
        'To call one, answer with <tool_call>{"name": <name>, "arguments": <JSON object>}'
        "</tool_call>.<|im_end|>\n"
        "<|im_start|>user\n1+2?<|im_end|>\n"
        "<|im_start|>assistant\nLet me add.\n"
        '<tool_call>{"name": "add", "arguments": {"a": 1, "b": 2}}</tool_call>\n'
        '<tool_call>{"name": "add", "arguments": {"a": 3}}</tool_call><|im_end|>\n'
        "<|im_start|>tool\n3<|im_end|>\n"
        '<|im_start|>assistant\n<tool_call>{"name": "add", "arguments": {"a": 0}}</tool_call>'
        "<|im_end|>\n"
        "<|im_start|>assistant\n<answer>3</answer><|im_end|>\n"
    )


def test_chat_template_without_tools_or_system(tokenizer) -> None:
    user = [{"role": "user", "content": "hi"}]
    assert tokenizer.apply_chat_template(user, tokenize=False) == "<|im_start|>user\nhi<|im_end|>\n"
    with_system = [{"role": "system", "content": "S"}, *user]
    assert tokenizer.apply_chat_template(with_system, tokenize=False).startswith(
        "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\n"
    )
    tools_only = tokenizer.apply_chat_template(user, tools=TOOLS, tokenize=False)
    assert tools_only.startswith("<|im_start|>system\n# Tools\n")


def test_add_generation_prompt_appends_assistant_header(tokenizer) -> None:
    user = [{"role": "user", "content": "hi"}]
    plain = tokenizer.apply_chat_template(user, tokenize=False)
    prompted = tokenizer.apply_chat_template(user, tokenize=False, add_generation_prompt=True)
    assert prompted == plain + "<|im_start|>assistant\n"


def test_chat_template_rejects_unknown_role(tokenizer) -> None:
    with pytest.raises(Exception, match="unknown chat role: robot"):
        tokenizer.apply_chat_template([{"role": "robot", "content": "x"}], tokenize=False)


def test_tools_from_python_functions(tokenizer) -> None:
    def multiply(a: int, b: int) -> int:
        """Multiply two integers.

        Args:
            a: first factor
            b: second factor
        """
        return a * b

    text = tokenizer.apply_chat_template([{"role": "user", "content": "2*3?"}], tools=[multiply], tokenize=False)
    assert '"name": "multiply"' in text and '"description": "Multiply two integers."' in text
