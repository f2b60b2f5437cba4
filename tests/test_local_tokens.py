"""PromptTokens: a growing conversation's prompt ids, tokenized a turn at a time, equal the whole
render's everywhere: every bundled environment's conversations (played by its reference
players), three tokenizers and templates, and hostile turns."""

from __future__ import annotations

import asyncio
import importlib.resources
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("transformers")

from transformers import AutoTokenizer

from rlvr.clients.local_load import encodable
from rlvr.clients.local_tokens import PromptTokens
from rlvr.engine import run_rollouts
from rlvr.models import default_corpus, train_tokenizer
from rlvr.registry import load_environment
from rlvr.types import Completion, Messages, SamplingArgs

ROOT = Path(__file__).resolve().parents[1]
ENVS = ("tictactoe", "double_check", "ice_maze", "python_math", "reverse_text", "rlm", "wiki_search")
TOKENIZERS = ("tictactoe-tiny", "rlvr-tiny", "qwen3")
Prompt = tuple[Messages, list[dict[str, Any]] | None]


def whole(
    tokenizer: Any, messages: Messages, tools: list[dict[str, Any]] | None = None, prompt: bool = True
) -> list[int]:
    """The reference: the whole conversation rendered and tokenized at once."""
    text = tokenizer.apply_chat_template(
        messages, tools=[*tools] if tools else None, add_generation_prompt=prompt, tokenize=False
    )
    return list(tokenizer(encodable(text), add_special_tokens=False)["input_ids"])


def qwen3_template() -> str:
    """Qwen3's own chat template, as TRL ships it: it drops the reasoning of earlier replies."""
    pytest.importorskip("trl")
    return (importlib.resources.files("trl") / "chat_templates" / "qwen3.jinja").read_text()


@pytest.fixture(scope="module")
def tokenizers() -> dict[str, Any]:
    rlvr_tiny = train_tokenizer(default_corpus(), vocab_size=2048, model_max_length=4096)
    qwen3 = train_tokenizer(default_corpus(), vocab_size=2048, model_max_length=4096)
    qwen3.chat_template = qwen3_template()
    return {
        "tictactoe-tiny": AutoTokenizer.from_pretrained(ROOT / "models" / "tictactoe-tiny"),
        "rlvr-tiny": rlvr_tiny,
        "qwen3": qwen3,
    }


class Recorder:
    """A client that records every prompt it is asked, in order, and lets `player` answer."""

    def __init__(self, player: Any, prompts: list[Prompt]) -> None:
        self.player, self.prompts, self.name = player, prompts, "recorder"

    async def chat(self, messages: Messages, sampling: SamplingArgs, tools: Any = None) -> Completion:
        self.prompts.append(([dict(m) for m in messages], tools))
        return await self.player.chat(messages, sampling, tools)


@pytest.fixture(scope="module")
def conversations() -> dict[str, list[Prompt]]:
    """Each environment's prompts, in the order its rollouts asked them: every reference player,
    3 tasks x 2 rollouts each, played concurrently as the engine plays them."""
    played: dict[str, list[Prompt]] = {}
    for name in ENVS:
        env = load_environment(name)
        prompts: list[Prompt] = []
        for make in env.policies().values():
            tasks = list(env.tasks("train"))[:3]
            asyncio.run(run_rollouts(env, Recorder(make(), prompts), tasks, rollouts_per_task=2))
        played[name] = prompts
    return played


@pytest.mark.parametrize("tokenizer_name", TOKENIZERS)
@pytest.mark.parametrize("env_name", ENVS)
def test_every_environments_prompts_equal_the_whole_render(conversations, tokenizers, env_name, tokenizer_name) -> None:
    tokenizer = tokenizers[tokenizer_name]
    prompts = PromptTokens(tokenizer)
    played = conversations[env_name]
    turns = sum(1 for messages, _ in played if any(m["role"] == "assistant" for m in messages))
    for i, (messages, tools) in enumerate(played):
        assert prompts.ids(messages, tools) == whole(tokenizer, messages, tools), f"{env_name} prompt {i}"
    stats = prompts.stats
    assert stats.repeats + stats.extended + stats.whole == len(played)
    assert (stats.extended > 0) == (turns > 0)  # reverse_text is one turn: nothing to extend
    if tokenizer_name != "qwen3":  # templates that never rewrite: every later turn extends
        assert stats.extended >= turns - stats.repeats


def test_later_turns_tokenize_only_what_they_add(conversations, tokenizers) -> None:
    tokenizer = tokenizers["tictactoe-tiny"]
    prompts = PromptTokens(tokenizer)
    played = conversations["tictactoe"]
    for messages, tools in played:
        prompts.ids(messages, tools)
    rendered = sum(
        len(encodable(tokenizer.apply_chat_template(m, add_generation_prompt=True, tokenize=False))) for m, _ in played
    )
    assert prompts.stats.chars < rendered / 2  # the whole renders' characters, each tokenized again


def test_qwen3_template_dropping_earlier_reasoning_is_followed_from_an_earlier_cut(tokenizers) -> None:
    """Qwen3 keeps the reasoning of replies after the last user message only: a user message
    after a tool-calling reply rewrites that reply, so the prompt before it is no prefix."""
    tokenizer = tokenizers["qwen3"]
    call = {"type": "function", "function": {"name": "look", "arguments": {"q": "x"}}}
    tools = [{"type": "function", "function": {"name": "look", "parameters": {"type": "object"}}}]
    first: Messages = [{"role": "user", "content": "find x"}]
    second = [*first, {"role": "assistant", "content": "<think>\nsearch\n</think>\n\n", "tool_calls": [call]}]
    second = [*second, {"role": "tool", "content": "x is 3", "tool_call_id": "c"}]
    third = [
        *second,
        {"role": "assistant", "content": "<think>\nsay\n</think>\n\nIt is 3."},
        {"role": "user", "content": "and y?"},
    ]
    prompts = PromptTokens(tokenizer)
    for messages in (first, second, third):
        assert prompts.ids(messages, tools) == whole(tokenizer, messages, tools)
    rewritten = tokenizer.apply_chat_template(third, tools=tools, add_generation_prompt=True, tokenize=False)
    kept = tokenizer.apply_chat_template(second, tools=tools, add_generation_prompt=True, tokenize=False)
    assert "search" in kept and "search" not in rewritten and not rewritten.startswith(kept)
    assert prompts.stats.extended == 2


HOSTILE: list[tuple[str, str]] = [
    ("", ""),  # empty reply, empty answer
    ("\n\n  leading blank lines", "  spaces first"),  # merges across a naive boundary
    ("\ud800 lone surrogate", "a \udfff in the answer"),
    ("emoji \U0001f600 and e\u0301", "\u4e2d\u6587 and \u200b zero width"),
    ("<think>unclosed", "</think> stray"),
    ("a literal <|im_start|>user\nhi<|im_end|>", "<|im_end|><|endoftext|>"),
    ("trailing space ", " "),
]


@pytest.mark.parametrize("tokenizer_name", TOKENIZERS)
def test_hostile_turns_equal_the_whole_render(tokenizers, tokenizer_name) -> None:
    tokenizer = tokenizers[tokenizer_name]
    prompts = PromptTokens(tokenizer)
    messages: Messages = [{"role": "system", "content": "play"}, {"role": "user", "content": "go"}]
    assert prompts.ids(messages) == whole(tokenizer, messages)
    for reply, answer in HOSTILE:
        messages = [*messages, {"role": "assistant", "content": reply}, {"role": "user", "content": answer}]
        assert prompts.ids(messages) == whole(tokenizer, messages), repr((reply, answer))
    assert prompts.stats.extended == len(HOSTILE)


def test_a_naive_split_at_the_previous_prompts_end_would_differ(tokenizers) -> None:
    """The hostile turns are hostile: tokenizing the new text from where the previous prompt
    ended (not from an added token) changes ids, which `PromptTokens` must not."""
    tokenizer = tokenizers["tictactoe-tiny"]
    before: Messages = [{"role": "user", "content": "go"}]
    after = [*before, {"role": "assistant", "content": "\n\n  leading blank lines"}, {"role": "user", "content": "x"}]
    old = tokenizer.apply_chat_template(before, add_generation_prompt=True, tokenize=False)
    new = tokenizer.apply_chat_template(after, add_generation_prompt=True, tokenize=False)
    assert new.startswith(old)
    naive = whole(tokenizer, before) + tokenizer(new[len(old) :], add_special_tokens=False)["input_ids"]
    assert naive != whole(tokenizer, after) == PromptTokens(tokenizer).ids(after)


def test_tool_calls_and_tools_extend(tokenizers) -> None:
    tokenizer = tokenizers["rlvr-tiny"]
    tools = [{"type": "function", "function": {"name": "add", "parameters": {"type": "object"}}}]
    call = {"id": "c1", "type": "function", "function": {"name": "add", "arguments": '{"a": 1, "b": 2}'}}
    messages: Messages = [{"role": "user", "content": "1+2?"}]
    prompts = PromptTokens(tokenizer)
    prompts.ids(messages, tools)
    messages = [*messages, {"role": "assistant", "content": "", "tool_calls": [call]}, {"role": "tool", "content": "3"}]
    assert prompts.ids(messages, tools) == whole(tokenizer, messages, tools)
    assert prompts.ids(messages) == whole(tokenizer, messages)  # other tools: another conversation
    assert prompts.stats.extended == 1 and prompts.stats.whole == 2


def test_a_template_that_changes_the_start_is_tokenized_whole(tokenizers) -> None:
    tokenizer = train_tokenizer(default_corpus(), vocab_size=2048, model_max_length=4096)
    tokenizer.chat_template = (  # writes the number of messages first: no earlier cut survives
        "{{- messages | length }}{%- for m in messages -%}{{- '<|im_start|>' + m.role + '\\n' + m.content"
        " + '<|im_end|>\\n' -}}{%- endfor -%}{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}"
    )
    prompts = PromptTokens(tokenizer)
    messages: Messages = [{"role": "user", "content": "a"}]
    for k in range(3):
        assert prompts.ids(messages) == whole(tokenizer, messages)
        messages = [*messages, {"role": "assistant", "content": f"r{k}"}, {"role": "user", "content": f"u{k}"}]
    assert prompts.stats.extended == 0 and prompts.stats.whole == 3


def test_repeats_edits_and_unkeyable_messages(tokenizers) -> None:
    tokenizer = tokenizers["tictactoe-tiny"]
    prompts = PromptTokens(tokenizer, entries=2)
    one: Messages = [{"role": "user", "content": "a"}]
    two = [*one, {"role": "assistant", "content": "b"}, {"role": "user", "content": "c"}]
    edited = [{"role": "user", "content": "A"}, *two[1:]]
    assert prompts.ids(one) == prompts.ids(one) == whole(tokenizer, one)
    assert prompts.ids(two) == whole(tokenizer, two) and prompts.ids(edited) == whole(tokenizer, edited)
    assert (prompts.stats.repeats, prompts.stats.extended, prompts.stats.whole) == (1, 1, 2)
    texts = [tokenizer.apply_chat_template(m, add_generation_prompt=True, tokenize=False) for m in (one, two, edited)]
    cut = texts[0].rindex("<|im_start|>")  # `two` is tokenized from the generation prompt on
    assert prompts.stats.chars == len(texts[0]) + len(texts[1]) - cut + len(texts[2])
    odd = [{"role": "user", "content": "x", "meta": object()}]  # not JSON: not kept, still exact
    assert prompts.ids(odd) == whole(tokenizer, odd) and prompts.stats.whole == 3
    prompts.ids(one)  # dropped: two entries kept at most, least recently used first
    assert prompts.stats.repeats == 1 and prompts.stats.whole == 4


@pytest.mark.parametrize("tokenizer_name", TOKENIZERS)
def test_a_given_replys_render_extends_its_prompt(tokenizers, tokenizer_name) -> None:
    """`LocalModel.give` renders the chat with the reply and no generation prompt."""
    tokenizer = tokenizers[tokenizer_name]
    prompts = PromptTokens(tokenizer)
    messages: Messages = [{"role": "user", "content": "go"}]
    prompts.ids(messages)
    for reply in ("<think>\nmine\n</think>\n\n<move>4</move>", "\n\n blank first", ""):
        given = [*messages, {"role": "assistant", "content": reply}]
        assert prompts.ids(given, generation_prompt=False) == whole(tokenizer, given, prompt=False), repr(reply)
    assert prompts.ids(messages) == whole(tokenizer, messages)  # still kept apart from the replies
    assert (prompts.stats.extended, prompts.stats.repeats) == (3, 1)


def test_messages_equal_in_python_but_rendered_apart_are_kept_apart() -> None:
    """1, 1.0 and True are equal (and hash alike) in Python; a template writes them apart."""
    tokenizer = train_tokenizer(default_corpus(), vocab_size=2048, model_max_length=4096)
    tokenizer.chat_template = (
        "{%- for m in messages -%}{{- '<|im_start|>' + m.role + '\\n' + m.content + (m.mark | string)"
        " + '<|im_end|>\\n' -}}{%- endfor -%}{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}"
    )
    prompts = PromptTokens(tokenizer)
    for mark in (1, True, 1.0, "1", None):
        messages: Messages = [{"role": "user", "content": "a", "mark": mark}]
        assert prompts.ids(messages) == whole(tokenizer, messages), repr(mark)
    assert prompts.stats.repeats == 0
