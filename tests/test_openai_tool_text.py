"""Tool calls a server leaves in the reply's text, and a server that fails to parse them.

A request of a tool-free env carries no `tools` and its reply's text is kept as written,
`<tool_call>` and all. A request with tools whose reply has `<tool_call>` blocks in its text
and no structured calls (a server without a tool-call parser, or `transformers serve` with the
response template `rlvr model new` writes) gets them split off, as `LocalModel` does.
`transformers serve`'s 400 for a `<tool_call>` it could not parse is one line saying what to do.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from openai_server import OpenAIServer

from rlvr.clients.openai import OpenAIClient
from rlvr.errors import ClientError
from rlvr.types import SamplingArgs

HI = [{"role": "user", "content": "hi"}]
TOOL = {"type": "function", "function": {"name": "add", "parameters": {"type": "object", "properties": {}}}}
WRITTEN = 'Adding.<tool_call>{"name": "add", "arguments": {"a": 2}}</tool_call>'


def writes_a_tool_call(messages, tools) -> str:
    return WRITTEN


async def test_a_tool_free_request_sends_no_tools_and_keeps_the_text() -> None:
    with OpenAIServer(writes_a_tool_call) as server:
        async with OpenAIClient("m", base_url=server.base_url) as client:
            completion = await client.chat(HI, SamplingArgs())
        assert "tools" not in server.bodies[-1]
    assert (completion.text, completion.tool_calls, completion.finish_reason) == (WRITTEN, [], "stop")


async def test_tool_calls_left_in_the_text_are_split_off_when_tools_were_offered() -> None:
    with OpenAIServer(writes_a_tool_call) as server:
        async with OpenAIClient("m", base_url=server.base_url) as client:
            completion = await client.chat(HI, SamplingArgs(), tools=[TOOL])
        assert server.bodies[-1]["tools"] == [TOOL]
    [call] = completion.tool_calls
    assert (completion.text, call.name, json.loads(call.arguments)) == ("Adding.", "add", {"a": 2})
    assert completion.finish_reason == "tool_calls" and call.id


class FailsToParseToolCalls(OpenAIServer):
    """Answers as transformers serve 5.x does when its response parser meets a broken `<tool_call>`."""

    def _answer(self, body: dict[str, Any]) -> tuple[Any, Any]:
        self.counts["requests"] += 1
        detail = "json parser could not parse region as JSON.\nContent: '{bad'\nError: Expecting property name"
        return 400, {"detail": detail}


async def test_the_servers_tool_call_parse_failure_says_what_to_do() -> None:
    with FailsToParseToolCalls() as server:
        async with OpenAIClient("m", base_url=server.base_url, backoff_s=0.001) as client:
            with pytest.raises(ClientError) as err:
                await client.chat(HI, SamplingArgs())
        assert server.counts["requests"] == 1  # not retried: the same seed writes the same reply
    message = str(err.value)
    assert "\n" not in message and "wrote a <tool_call> that the server could not parse (HTTP 400" in message
    assert "response_template" in message and "drop -b" in message


def test_a_tiny_model_folder_has_transformers_serve_read_replies_as_text(tmp_path) -> None:
    """What transformers serve does with a reply of a model `rlvr model new` built: it parses
    it by the tokenizer's response template, which keeps a broken `<tool_call>` as text."""
    pytest.importorskip("transformers")
    from transformers import AutoTokenizer

    from rlvr.models import build_tiny_model

    tokenizer = AutoTokenizer.from_pretrained(build_tiny_model(tmp_path / "tiny", preset="tiny"))
    if not hasattr(tokenizer, "parse_response"):
        pytest.skip("this transformers has no response templates (transformers serve parses nothing)")
    assert tokenizer.response_template is not None  # read back from tokenizer_config.json
    prefix = tokenizer.apply_chat_template(HI, add_generation_prompt=True, tokenize=True, return_dict=True)
    reply = " <think>x</think> <tool_call>{no json</tool_call>\n"
    ids = tokenizer.encode(reply, add_special_tokens=False) + [tokenizer.convert_tokens_to_ids("<|im_end|>")]
    parsed = tokenizer.parse_response(ids, tokenizer.response_template, prefix=prefix["input_ids"])
    assert parsed == {"role": "assistant", "content": reply}
