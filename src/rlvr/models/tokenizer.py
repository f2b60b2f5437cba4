"""A small byte-level BPE tokenizer with a ChatML chat template, trained offline.

Choices:

- Byte-level BPE (GPT-2 style): any text encodes, and decoding gives back the exact text.
- Digits are split into single characters before BPE, so `12` is always `1`, `2` and a board
  cell or a number tokenises the same way wherever it appears.
- ChatML turn markers `<|im_start|>` and `<|im_end|>` and the pad token `<|endoftext|>` are
  special tokens (one id each, dropped by `decode(..., skip_special_tokens=True)`).
  `<think>`, `</think>`, `<tool_call>` and `</tool_call>` are ordinary added tokens: one id each,
  kept by every decode, like Qwen's.
- The chat template (`CHAT_TEMPLATE`) is Qwen/Hermes-like: tools are listed as JSON in the
  system turn, tool calls are `<tool_call>{"name": ..., "arguments": {...}}</tool_call>` inside
  the assistant turn, and tool results are a `tool` turn. It never rewrites earlier turns, so
  rendering the first k messages is always a prefix of rendering k + 1.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, processors
from tokenizers.trainers import BpeTrainer
from transformers import PreTrainedTokenizerFast

IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
ENDOFTEXT = "<|endoftext|>"
SPECIAL_TOKENS = (ENDOFTEXT, IM_START, IM_END)
"""Special tokens, with ids 0, 1, 2: pad/bos, start of turn, end of turn (eos)."""
TAG_TOKENS = ("<think>", "</think>", "<tool_call>", "</tool_call>")
"""Tags that get one id each but stay in decoded text."""

RESPONSE_TEMPLATE = {
    "defaults": {"role": "assistant"},
    "start_anchor": f"{IM_START}assistant\n",
    "fields": {"content": {"close_pattern": r"<\|im_end\|>|<\|endoftext\|>", "content_args": {"strip": False}}},
}
"""How `transformers serve` reads a reply: all of it as text, as `LocalModel` gets it. Without one,
it parses a Qwen-type model's `<think>` and `<tool_call>` by its own template, tools or not, and
answers HTTP 400 when a `<tool_call>` holds no JSON (an untrained model writes such)."""

CHAT_TEMPLATE = """\
{%- macro text(content) -%}
{%- if content is none or content is undefined -%}
{%- elif content is string -%}{{- content -}}
{%- else -%}{%- for part in content -%}{{- part.text if part.text is defined else '' -}}{%- endfor -%}
{%- endif -%}
{%- endmacro -%}
{%- macro tool_call(call) -%}
{%- set fn = call.function if call.function is defined else call -%}
{{- '<tool_call>{"name": ' + (fn.name | tojson) + ', "arguments": ' -}}
{%- if fn.arguments is string -%}{{- fn.arguments -}}{%- else -%}{{- fn.arguments | tojson -}}{%- endif -%}
{{- '}</tool_call>' -}}
{%- endmacro -%}
{%- if messages and messages[0].role == 'system' -%}
{%- set system = text(messages[0].content) -%}{%- set rest = messages[1:] -%}
{%- else -%}
{%- set system = none -%}{%- set rest = messages -%}
{%- endif -%}
{%- if tools -%}
{{- '<|im_start|>system\\n' -}}
{%- if system -%}{{- system + '\\n\\n' -}}{%- endif -%}
{{- '# Tools\\nYou may call these functions:\\n<tools>\\n' -}}
{%- for tool in tools -%}{{- (tool | tojson) + '\\n' -}}{%- endfor -%}
{{- '</tools>\\nTo call one, answer with <tool_call>{"name": <name>, "arguments": <JSON object>}'
    + '</tool_call>.<|im_end|>\\n' -}}
{%- elif system is not none -%}
{{- '<|im_start|>system\\n' + system + '<|im_end|>\\n' -}}
{%- endif -%}
{%- for message in rest -%}
{%- if message.role == 'assistant' -%}
{{- '<|im_start|>assistant\\n' + text(message.content) -}}
{%- if message.tool_calls -%}
{%- for call in message.tool_calls -%}
{%- if not loop.first or text(message.content) -%}{{- '\\n' -}}{%- endif -%}
{{- tool_call(call) -}}
{%- endfor -%}
{%- endif -%}
{{- '<|im_end|>\\n' -}}
{%- elif message.role in ['system', 'user', 'tool'] -%}
{{- '<|im_start|>' + message.role + '\\n' + text(message.content) + '<|im_end|>\\n' -}}
{%- else -%}
{{- raise_exception('unknown chat role: ' + message.role) -}}
{%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}
"""

# Text the chat template itself writes, added to every corpus so that its words get merges.
_TEMPLATE_TEXT = (
    "system\nuser\nassistant\ntool\n",
    "# Tools\nYou may call these functions:\n<tools>\n</tools>\n",
    'To call one, answer with <tool_call>{"name": <name>, "arguments": <JSON object>}</tool_call>.',
    (
        '{"type": "function", "function": {"name": "f", "description": "", "parameters": '
        '{"type": "object", "properties": {"x": {"type": "string"}}, "required": ["x"]}}}'
    ),
)


def train_tokenizer(corpus: Iterable[str], *, vocab_size: int, model_max_length: int) -> PreTrainedTokenizerFast:
    """Train a byte-level BPE on `corpus` and wrap it with special tokens and the chat template.

    `vocab_size` is an upper bound: a small corpus yields fewer merges. Training is
    deterministic for a given corpus.
    """
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Digits(individual_digits=True),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
        ]
    )
    bpe.decoder = decoders.ByteLevel()
    bpe.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=2,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    bpe.train_from_iterator(_with_template_text(corpus), trainer=trainer)
    bpe.add_tokens([AddedToken(tag, special=False, normalized=False) for tag in TAG_TOKENS])
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=bpe,
        bos_token=ENDOFTEXT,
        eos_token=IM_END,
        pad_token=ENDOFTEXT,
        clean_up_tokenization_spaces=False,
        model_max_length=model_max_length,
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    tokenizer.response_template = RESPONSE_TEMPLATE
    return tokenizer


def _with_template_text(corpus: Iterable[str]) -> Iterator[str]:
    yield from _TEMPLATE_TEXT
    for text in corpus:
        if not isinstance(text, str):
            raise TypeError(f"corpus items must be str, got {type(text).__name__}: {text!r:.80}")
        yield text
