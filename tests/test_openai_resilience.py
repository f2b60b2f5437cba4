"""OpenAIClient against slow, refusing and leaky servers: streamed requests after a timeout,
no piling of work on a server that queues, the server's reasons shown, the API key redacted
from completions too (a key refused again and again: tests/test_eval_http.py)."""

from __future__ import annotations

import asyncio

import pytest
from openai_server import OpenAIServer, Reply
from test_openai_client import ADD_SCHEMA, HI, client_for

from rlvr.errors import ClientError
from rlvr.types import SamplingArgs

KEY = "sk-test-0123456789abcdef"


def tool_then_text(messages, tools):
    if messages[-1]["role"] == "tool":
        return "the sum is 5"
    return Reply(text="let me add", tool_calls=[("add", {"a": 2, "b": 3})])


async def test_a_streamed_reply_is_the_same_completion(openai_server) -> None:
    openai_server.reset(tool_then_text)
    sampling = SamplingArgs(logprobs=True, max_tokens=100)
    async with client_for(openai_server) as client:
        plain = await client.chat(HI, sampling, [ADD_SCHEMA])
        client.endpoints.endpoints[0].stream = True
        streamed = await client.chat(HI, sampling, [ADD_SCHEMA])
    assert openai_server.bodies[-1]["stream"] is True and "stream" not in openai_server.bodies[0]
    assert streamed.tool_calls[0].id == "call_2_0"  # the server numbers its calls by request
    streamed.tool_calls[0].id = plain.tool_calls[0].id
    assert streamed == plain and plain.token_ids and plain.logprobs and plain.tool_calls
    assert plain.usage.completion_tokens > 0 and plain.finish_reason == "tool_calls"


async def test_a_server_that_queues_is_not_sent_the_same_work_again_and_again(openai_server) -> None:
    """Like `transformers serve`: one request at a time, and a plain request is computed to the
    end even after the client hung up. 8 requests of 0.3 s each with a 1.05 s timeout: the
    first wave times out from the fourth on; then the client streams (a stream it hangs up on
    is dropped) and halves its requests in flight, so every request gets its answer and the
    server computes each at most about twice. (Sized so that a loaded machine's delays of tens of
    milliseconds stay well inside the 0.15 s between an answer and the timeout.)"""
    openai_server.reset(delay_s=0.3, sequential=True)
    async with client_for(openai_server, timeout_s=1.05, max_retries=6, concurrency=8) as client:
        replies = await asyncio.gather(
            *(client.chat([{"role": "user", "content": str(i)}], SamplingArgs()) for i in range(8))
        )
    assert [r.text for r in replies] == [f"echo: {i}" for i in range(8)]
    [endpoint] = client.endpoints.endpoints
    assert endpoint.stream and endpoint.failures["timeout"] > 0
    assert openai_server.counts["computed"] <= 14, openai_server.counts  # 8 answers + the first wave's 5 at most


async def test_the_servers_reason_is_shown(openai_server) -> None:
    openai_server.reset(refuse_key=True, echo_key="not-a-key")
    async with client_for(openai_server, max_retries=0) as client:
        with pytest.raises(ClientError, match="HTTP 401: Incorrect API key provided: not-a-key. .check the API key"):
            await client.chat(HI, SamplingArgs())


async def test_an_echoed_key_is_redacted_from_the_completion_and_the_error(openai_server, monkeypatch) -> None:
    monkeypatch.setenv("RLVR_TEST_KEY", KEY)
    openai_server.reset(lambda m, t: f"your key is {KEY}")
    async with client_for(openai_server, api_key_var="RLVR_TEST_KEY", max_retries=0) as client:
        assert (await client.chat(HI, SamplingArgs())).text == "your key is [API key redacted]"
        openai_server.reset(refuse_key=True, echo_key=KEY)
        with pytest.raises(ClientError) as info:
            await client.chat(HI, SamplingArgs())
    assert KEY not in str(info.value) and "Incorrect API key provided: [API key redacted]." in str(info.value)


def test_streaming_server_helper_splits_and_rejoins() -> None:
    """The test server's stream carries exactly the plain completion (a check on the helper)."""
    server = OpenAIServer(tool_then_text)
    body = {"messages": HI, "tools": [ADD_SCHEMA], "logprobs": True, "return_token_ids": True}
    status, completion = server._answer(body)
    assert status == 200
    from openai_wire import stream_chunks

    chunks = stream_chunks(completion, {**body, "stream_options": {"include_usage": True}})
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
    ids = [i for c in chunks if c["choices"] for i in c["choices"][0].get("token_ids") or []]
    assert text == "let me add" and ids == completion["choices"][0]["token_ids"]
    assert chunks[-1]["usage"] == completion["usage"]
