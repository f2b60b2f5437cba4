"""rlvr.train.chat_tokens: loss masks over chat conversations and sampled rollouts."""

from __future__ import annotations

import pytest

pytest.importorskip("transformers")

from rlvr.errors import ModelError
from rlvr.models import default_corpus, train_tokenizer
from rlvr.train.chat_tokens import (
    TokenizedChat,
    TurnTokens,
    rollout_tokens,
    tokenize_chat,
    tokenize_chat_turns,
)

# A Qwen3-like template: assistant turns before the last user message lose their <think> part.
THINK_STRIPPING_TEMPLATE = """\
{%- set ns = namespace(last_user=-1) -%}
{%- for m in messages -%}{%- if m.role == 'user' -%}{%- set ns.last_user = loop.index0 -%}\
{%- endif -%}{%- endfor -%}
{%- for m in messages -%}
{%- set content = m.content -%}
{%- if m.role == 'assistant' and loop.index0 < ns.last_user and '</think>' in content -%}
{%- set content = content.split('</think>')[-1].lstrip('\\n') -%}
{%- endif -%}
{{- '<|im_start|>' + m.role + '\\n' + content + '<|im_end|>\\n' -}}
{%- endfor -%}
{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}
"""

# A template that drops earlier assistant turns altogether: no single sequence can follow it.
DROPPING_TEMPLATE = """\
{%- for m in messages -%}
{%- if m.role != 'assistant' or loop.last -%}
{{- '<|im_start|>' + m.role + '\\n' + m.content + '<|im_end|>\\n' -}}
{%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}
"""


def _tokenizer(template: str | None = None):
    tokenizer = train_tokenizer(default_corpus(), vocab_size=2048, model_max_length=4096)
    if template is not None:
        tokenizer.chat_template = template
    return tokenizer


@pytest.fixture(scope="module")
def tokenizer():
    return _tokenizer()


def _runs(tokenizer, chat: TokenizedChat, masked: int = 1) -> list[str]:
    """Decoded text of each maximal run of tokens whose mask equals `masked`."""
    runs: list[list[int]] = []
    previous = None
    for token, m in zip(chat.input_ids, chat.loss_mask, strict=True):
        if m == masked:
            if previous != masked:
                runs.append([])
            runs[-1].append(token)
        previous = m
    return [tokenizer.decode(run) for run in runs]


CONVERSATION = [
    {"role": "system", "content": "You add numbers."},
    {"role": "user", "content": "What is 12+30?"},
    {
        "role": "assistant",
        "content": "<think>\nadd them\n</think>\nI will call the tool.",
        "tool_calls": [
            {
                "id": "c1",
                "type": "function",
                "function": {"name": "add", "arguments": '{"a": 12, "b": 30}'},
            }
        ],
    },
    {"role": "tool", "tool_call_id": "c1", "content": "42"},
    {"role": "assistant", "content": "<answer>42</answer>"},
    {"role": "user", "content": "And 1+1?"},
    {"role": "assistant", "content": "<answer>2</answer>"},
]
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "add",
            "description": "Add a and b.",
            "parameters": {"type": "object", "properties": {}},
        },
    }
]


def test_mask_covers_exactly_the_assistant_turns(tokenizer) -> None:
    chat = tokenize_chat(tokenizer, CONVERSATION, tools=TOOLS)
    assert _runs(tokenizer, chat) == [
        (
            "<think>\nadd them\n</think>\nI will call the tool.\n"
            '<tool_call>{"name": "add", "arguments": {"a": 12, "b": 30}}</tool_call><|im_end|>'
        ),
        "<answer>42</answer><|im_end|>",
        "<answer>2</answer><|im_end|>",
    ]
    unmasked = "".join(_runs(tokenizer, chat, masked=0))
    for message in CONVERSATION:
        if message["role"] != "assistant":
            assert message["content"] in unmasked
    assert unmasked.count("<|im_start|>assistant\n") == 3  # headers are never trained
    assert not chat.history_rewritten


def test_template_without_rewrites_gives_the_final_render(tokenizer) -> None:
    chat = tokenize_chat(tokenizer, CONVERSATION, tools=TOOLS)
    rendered = tokenizer.apply_chat_template(CONVERSATION, tools=TOOLS, tokenize=False)
    assert chat.input_ids == tokenizer.encode(rendered)
    assert len(chat.loss_mask) == len(chat.input_ids)


def test_conversation_ending_with_a_user_turn(tokenizer) -> None:
    messages = CONVERSATION[:2] + [
        {"role": "assistant", "content": "Hm."},
        {"role": "user", "content": "Well?"},
    ]
    chat = tokenize_chat(tokenizer, messages)
    assert _runs(tokenizer, chat) == ["Hm.<|im_end|>"]
    assert tokenizer.decode(chat.input_ids).endswith("<|im_start|>user\nWell?<|im_end|>\n")


def test_no_assistant_turn_means_no_trained_token(tokenizer) -> None:
    chat = tokenize_chat(tokenizer, CONVERSATION[:2])
    assert chat.input_ids and set(chat.loss_mask) == {0}


def test_truncation_keeps_ids_and_mask_aligned(tokenizer) -> None:
    full = tokenize_chat(tokenizer, CONVERSATION)
    cut = len(full.input_ids) // 2
    short = tokenize_chat(tokenizer, CONVERSATION, max_length=cut)
    assert short.input_ids == full.input_ids[:cut]
    assert short.loss_mask == full.loss_mask[:cut]
    with pytest.raises(ValueError, match="max_length"):
        tokenize_chat(tokenizer, CONVERSATION, max_length=0)


def test_think_stripping_template_keeps_each_turn_as_generated() -> None:
    tokenizer = _tokenizer(THINK_STRIPPING_TEMPLATE)
    messages = [
        {"role": "user", "content": "q1"},
        {"role": "assistant", "content": "<think>a</think>X"},
        {"role": "user", "content": "q2"},
        {"role": "assistant", "content": "<think>b</think>Y"},
    ]
    final = tokenizer.apply_chat_template(messages, tokenize=False)
    assert "<think>a" not in final  # the template does rewrite history
    chat = tokenize_chat(tokenizer, messages)
    assert chat.history_rewritten
    assert _runs(tokenizer, chat) == ["<think>a</think>X<|im_end|>", "<think>b</think>Y<|im_end|>"]
    assert tokenizer.decode(chat.input_ids) == (
        "<|im_start|>user\nq1<|im_end|>\n<|im_start|>assistant\n<think>a</think>X<|im_end|>\n"
        "<|im_start|>user\nq2<|im_end|>\n<|im_start|>assistant\n<think>b</think>Y<|im_end|>\n"
    )


def test_think_stripping_template_per_turn_samples_match_inference() -> None:
    tokenizer = _tokenizer(THINK_STRIPPING_TEMPLATE)
    messages = [
        {"role": "user", "content": "q1"},
        {"role": "assistant", "content": "<think>a</think>X"},
        {"role": "user", "content": "q2"},
        {"role": "tool", "content": "t"},
        {"role": "assistant", "content": "<think>b</think>Y"},
    ]
    first, second = tokenize_chat_turns(tokenizer, messages)
    for sample, end, reply in [(first, 1, "<think>a</think>X"), (second, 4, "<think>b</think>Y")]:
        prompt = tokenizer.apply_chat_template(messages[:end], tokenize=False, add_generation_prompt=True)
        assert tokenizer.decode(sample.input_ids) == prompt + reply + "<|im_end|>"
        assert _runs(tokenizer, sample) == [reply + "<|im_end|>"]
    assert "<think>a" not in tokenizer.decode(second.input_ids)  # as the model saw it


def test_template_dropping_turns_is_reported() -> None:
    tokenizer = _tokenizer(DROPPING_TEMPLATE)
    messages = [
        {"role": "user", "content": "q1"},
        {"role": "assistant", "content": "X"},
        {"role": "user", "content": "q2"},
        {"role": "assistant", "content": "Y"},
    ]
    with pytest.raises(ModelError, match="tokenize_chat_turns"):
        tokenize_chat(tokenizer, messages)
    samples = tokenize_chat_turns(tokenizer, messages)
    assert [_runs(tokenizer, s) for s in samples] == [["X<|im_end|>"], ["Y<|im_end|>"]]


def test_tokenizer_without_template_is_a_model_error() -> None:
    tokenizer = _tokenizer()
    tokenizer.chat_template = None
    with pytest.raises(ModelError, match="no chat template"):
        tokenize_chat(tokenizer, CONVERSATION[:2])


# ---------------------------------------------------------------------------- rollouts


def test_rollout_tokens_masks_exactly_the_sampled_ids(tokenizer) -> None:
    prompt = tokenizer.apply_chat_template(CONVERSATION[:2], add_generation_prompt=True, tokenize=False)
    prompt_ids = tokenizer.encode(prompt)
    # Sampled ids need not be the canonical tokenisation of their text: one byte at a time.
    first = [tokenizer.convert_tokens_to_ids(c) for c in "ab"] + [tokenizer.eos_token_id]
    env = tokenizer.encode("\n<|im_start|>tool\n42<|im_end|>\n<|im_start|>assistant\n")
    second = tokenizer.encode("<answer>42</answer>") + [tokenizer.eos_token_id]
    turns = [TurnTokens(prompt_ids=[], completion_ids=first), TurnTokens(env, second)]

    input_ids, loss_mask = rollout_tokens(prompt_ids, turns)

    assert input_ids == prompt_ids + first + env + second
    assert [t for t, m in zip(input_ids, loss_mask, strict=True) if m] == first + second
    assert loss_mask == [0] * len(prompt_ids) + [1] * 3 + [0] * len(env) + [1] * len(second)


def test_rollout_tokens_truncation_keeps_masks_aligned() -> None:
    turns = [TurnTokens([], [10, 11, 12]), TurnTokens([20, 21], [30, 31])]
    full_ids, full_mask = rollout_tokens([1, 2, 3], turns)
    for cut in range(1, len(full_ids) + 2):
        ids, mask = rollout_tokens([1, 2, 3], turns, max_length=cut)
        assert (ids, mask) == (full_ids[:cut], full_mask[:cut])
    assert rollout_tokens([1, 2, 3], turns, max_length=6) == (
        [1, 2, 3, 10, 11, 12],
        [0, 0, 0, 1, 1, 1],
    )


def test_rollout_tokens_accepts_integer_like_ids_and_rejects_others() -> None:
    torch = pytest.importorskip("torch")
    ids, mask = rollout_tokens(torch.tensor([1, 2]).tolist(), [TurnTokens([], torch.tensor([5]))])
    assert (ids, mask) == ([1, 2, 5], [0, 0, 1]) and all(type(i) is int for i in ids)
    for bad in [-1, 2.0, "7", True]:
        with pytest.raises(ValueError, match="non-negative ints"):
            rollout_tokens([1], [TurnTokens([], [bad])])
