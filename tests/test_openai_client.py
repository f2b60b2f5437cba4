"""OpenAIClient against a real HTTP server (tests/openai_server.py) through the real openai SDK."""

from __future__ import annotations

import asyncio
import gc
import json
import socket
import time
from types import SimpleNamespace

import pytest
from openai_server import Faults, OpenAIServer, Reply, render_prompt
from openai_wire import token_logprob

from rlvr.clients.base import ChatClient, RemoteClient
from rlvr.clients.openai import OpenAIClient
from rlvr.clients.openai_response import sampled_tokens
from rlvr.clients.openai_session import POOL_SIZE
from rlvr.clients.policy import Policy
from rlvr.clients.resolve import make_client
from rlvr.errors import ClientClosedError, ClientError, PromptTooLongError, UsageError
from rlvr.types import SamplingArgs

HI = [{"role": "user", "content": "hi"}]


def client_for(server: OpenAIServer, **kwargs) -> OpenAIClient:
    kwargs = {"api_key_var": "RLVR_TEST_NO_SUCH_KEY", "backoff_s": 0.001, **kwargs}
    return OpenAIClient("scripted", base_url=server.base_url, **kwargs)


async def test_plain_reply_and_request_parameters(openai_server) -> None:
    sampling = SamplingArgs(max_tokens=50, temperature=0.7, top_p=0.9, seed=123, stop=["\n\n"])
    async with client_for(openai_server) as client:
        assert isinstance(client, ChatClient) and client.name == "scripted"
        completion = await client.chat(HI, sampling)
    assert completion.text == "echo: hi"
    assert completion.finish_reason == "stop" and completion.tool_calls == []
    assert completion.usage.prompt_tokens == len(render_prompt(HI))
    assert completion.usage.completion_tokens == len("echo: hi")
    assert completion.token_ids is None and completion.logprobs is None  # not asked for
    body = openai_server.bodies[-1]
    assert body["model"] == "scripted" and body["messages"] == HI
    assert (body["max_tokens"], body["temperature"], body["top_p"], body["seed"], body["stop"]) == (
        50,
        0.7,
        0.9,
        123,
        ["\n\n"],
    )
    assert "logprobs" not in body and "return_token_ids" not in body and "tools" not in body


async def test_max_tokens_gives_length_finish(openai_server) -> None:
    async with client_for(openai_server) as client:
        completion = await client.chat(HI, SamplingArgs(max_tokens=3))
    assert (completion.text, completion.finish_reason) == ("ech", "length")


def add(a: int, b: int) -> int:
    return a + b


ADD_SCHEMA = {
    "type": "function",
    "function": {
        "name": "add",
        "description": "Add.",
        "parameters": {
            "type": "object",
            "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
            "required": ["a", "b"],
        },
    },
}


def calculator(messages, tools):
    """Calls `add` once, then answers with the tool's result."""
    if messages[-1]["role"] == "tool":
        return f"the sum is {messages[-1]['content']}"
    assert tools and tools[0]["function"]["name"] == "add"
    return Reply(tool_calls=[("add", {"a": 2, "b": 3})])


async def test_tool_calls_out_and_in(openai_server) -> None:
    openai_server.reset(calculator)
    async with client_for(openai_server) as client:
        first = await client.chat(HI, SamplingArgs(), tools=[ADD_SCHEMA])
        assert first.finish_reason == "tool_calls" and first.text == ""
        [call] = first.tool_calls
        assert call.name == "add" and json.loads(call.arguments) == {"a": 2, "b": 3} and call.id
        result = {
            "role": "tool",
            "tool_call_id": call.id,
            "content": str(add(**json.loads(call.arguments))),
        }
        second = await client.chat([*HI, first.message(), result], SamplingArgs(), tools=[ADD_SCHEMA])
    assert second.text == "the sum is 5" and second.tool_calls == []
    sent = openai_server.bodies[-1]
    assert sent["tools"] == [ADD_SCHEMA]
    assert sent["messages"][1]["tool_calls"][0]["function"] == {
        "name": "add",
        "arguments": call.arguments,
    }
    assert sent["messages"][2]["tool_call_id"] == call.id


async def test_logprobs_and_token_ids_when_served(openai_server) -> None:
    async with client_for(openai_server) as client:
        completion = await client.chat(HI, SamplingArgs(logprobs=True))
    assert completion.token_ids == [ord(c) for c in "echo: hi"]
    assert completion.logprobs == [token_logprob(i) for i in range(len("echo: hi"))]
    assert completion.prompt_token_ids == [ord(c) for c in render_prompt(HI)]
    body = openai_server.bodies[-1]
    assert body["logprobs"] is True and body["return_token_ids"] and body["return_tokens_as_token_ids"]


async def test_server_that_refuses_token_fields_still_gives_logprobs(openai_server) -> None:
    openai_server.reset(strict=True)  # like api.openai.com: unknown fields are a 400
    async with client_for(openai_server, max_retries=0) as client:
        first = await client.chat(HI, SamplingArgs(logprobs=True))
        second = await client.chat(HI, SamplingArgs(logprobs=True))
    for completion in (first, second):
        assert completion.text == "echo: hi" and completion.token_ids is None
        assert completion.logprobs == [token_logprob(i) for i in range(len("echo: hi"))]
    # one request refused, then the fields are never sent again
    assert openai_server.counts["requests"] == 3
    assert client.omit == {"return_token_ids", "return_tokens_as_token_ids"} and client.retries == 0


async def test_max_tokens_becomes_max_completion_tokens_where_refused(openai_server) -> None:
    openai_server.reset(reasoning=True)  # like OpenAI's reasoning models
    async with client_for(openai_server, max_retries=0) as client:
        first = await client.chat(HI, SamplingArgs(max_tokens=3))
        second = await client.chat(HI, SamplingArgs(max_tokens=4))
        with pytest.raises(ClientError, match="'temperature' does not support 0.5"):
            await client.chat(HI, SamplingArgs(temperature=0.5))  # a real refusal: no resend
    assert (first.text, second.text, second.finish_reason) == ("ech", "echo", "length")
    assert [sorted(set(b) & {"max_tokens", "max_completion_tokens"}) for b in openai_server.bodies] == [
        ["max_tokens"],
        ["max_completion_tokens"],
        ["max_completion_tokens"],
        [],
    ]


def test_token_ids_read_from_logprob_tokens_and_misaligned_ones_dropped() -> None:
    def lp(*tokens):
        return SimpleNamespace(content=[SimpleNamespace(token=t, logprob=-1.0) for t in tokens])

    assert sampled_tokens(SimpleNamespace(logprobs=lp("token_id:7", "token_id:9"))) == (
        [-1.0, -1.0],
        [7, 9],
    )
    assert sampled_tokens(SimpleNamespace(logprobs=lp("a", "b"))) == ([-1.0, -1.0], None)
    assert sampled_tokens(SimpleNamespace(logprobs=lp("a", "b"), token_ids=[1, 2, 3])) == (None, [1, 2, 3])
    assert sampled_tokens(SimpleNamespace(logprobs=None, token_ids=[1, 2])) == (None, [1, 2])


@pytest.mark.parametrize("max_retries", [0, 1, 3])
async def test_retry_count_is_exact(openai_server, max_retries) -> None:
    openai_server.reset(permanent=lambda messages: True)  # every request gets a 500
    async with client_for(openai_server, max_retries=max_retries) as client:
        with pytest.raises(ClientError) as info:
            await client.chat(HI, SamplingArgs())
    assert openai_server.counts["requests"] == max_retries + 1 == client.requests
    assert client.retries == max_retries
    message = str(info.value)
    assert "\n" not in message and f"failed {max_retries + 1} times" in message and "HTTP 500" in message


@pytest.mark.parametrize("faults", [["429", "500"], ["malformed"], ["500", "malformed", "429", "500"]])
async def test_faults_then_success(openai_server, faults) -> None:
    openai_server.force(faults)
    async with client_for(openai_server, max_retries=len(faults)) as client:
        completion = await client.chat(HI, SamplingArgs())
    assert completion.text == "echo: hi"
    assert openai_server.counts["requests"] == len(faults) + 1 and client.retries == len(faults)


async def test_timeout_then_success(openai_server) -> None:
    # 3 s: the retry's answer must arrive within the timeout on a loaded machine too (at 0.3 s it
    # once did not, with two test workers and a training run on 2 cores); the hang lasts 30 s
    openai_server.force(["hang"])
    async with client_for(openai_server, timeout_s=3.0, max_retries=1) as client:
        t0 = time.monotonic()
        completion = await client.chat(HI, SamplingArgs())
    assert completion.text == "echo: hi" and 3.0 <= time.monotonic() - t0 < 25
    assert openai_server.counts["hang"] == 1 and openai_server.counts["requests"] == 2


async def test_timeouts_until_retries_run_out(openai_server) -> None:
    openai_server.force(["hang", "hang"])
    async with client_for(openai_server, timeout_s=0.2, max_retries=1) as client:
        with pytest.raises(ClientError, match=r"failed 2 times; last: no answer within 0\.2 s"):
            await client.chat(HI, SamplingArgs())


async def test_unreachable_endpoint_is_retried_then_a_client_error() -> None:
    # a port bound but not listening: refused, and held so that no other test's server (pytest
    # -n 2) takes it meanwhile (once, a freed port was reused and the client hung to the timeout)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        client = OpenAIClient("m", base_url=f"http://127.0.0.1:{port}/v1", max_retries=2, backoff_s=0.001)
        async with client:
            with pytest.raises(ClientError, match="failed 3 times; last: connection failed"):
                await client.chat(HI, SamplingArgs())
    assert client.requests == 3


async def test_context_length_is_prompt_too_long_and_not_retried(openai_server) -> None:
    openai_server.reset(max_context=10)
    async with client_for(openai_server) as client:
        with pytest.raises(PromptTooLongError, match="maximum context length is 10 tokens"):
            await client.chat(HI, SamplingArgs())
    assert openai_server.counts["requests"] == 1


async def test_other_client_errors_are_not_retried(openai_server) -> None:
    client = OpenAIClient("m", base_url=openai_server.base_url + "/nowhere", backoff_s=0.001)
    async with client:
        with pytest.raises(ClientError, match="refused the request: HTTP 404: no route POST"):
            await client.chat(HI, SamplingArgs())
    assert openai_server.counts["requests"] == 0 and client.requests == 1


def test_missing_key_variable_names_the_variable(monkeypatch) -> None:
    monkeypatch.delenv("RLVR_TEST_KEY", raising=False)
    with pytest.raises(ClientError, match="RLVR_TEST_KEY is not set; export RLVR_TEST_KEY=.* -k NAME"):
        OpenAIClient("gpt-x", api_key_var="RLVR_TEST_KEY")
    with pytest.raises(ClientError, match="RLVR_TEST_KEY"):
        OpenAIClient("gpt-x", base_url="https://api.example.com/v1", api_key_var="RLVR_TEST_KEY")
    assert OpenAIClient("m", base_url="http://localhost:8000/v1", api_key_var="RLVR_TEST_KEY").api_key == "EMPTY"
    monkeypatch.setenv("RLVR_TEST_KEY", "sk-test-0123456789")
    assert OpenAIClient("gpt-x", api_key_var="RLVR_TEST_KEY").api_key == "sk-test-0123456789"


def test_bad_settings_are_usage_errors() -> None:
    for kwargs in ({"concurrency": 0}, {"max_retries": -1}, {"timeout_s": 0}):
        with pytest.raises(UsageError):
            OpenAIClient("m", base_url="http://127.0.0.1:1/v1", **kwargs)


async def test_concurrency_limit_per_client(openai_server) -> None:
    openai_server.reset(delay_s=0.05)
    async with client_for(openai_server, concurrency=3) as client:
        replies = await asyncio.gather(
            *(client.chat([{"role": "user", "content": str(i)}], SamplingArgs()) for i in range(12))
        )
    assert [r.text for r in replies] == [f"echo: {i}" for i in range(12)]
    assert openai_server.max_in_flight == 3


async def test_many_requests_in_flight_share_small_connection_pools(openai_server) -> None:
    """40 requests at once go out at once, over ceil(40 / POOL_SIZE) SDK clients (an HTTP pool
    looks at each of its connections per request); a later one reuses the first, warm pool."""
    openai_server.reset(delay_s=0.3)
    client = client_for(openai_server, concurrency=40)
    replies = await asyncio.gather(
        *(client.chat([{"role": "user", "content": str(i)}], SamplingArgs()) for i in range(40))
    )
    assert [r.text for r in replies] == [f"echo: {i}" for i in range(40)]
    assert openai_server.max_in_flight == 40
    assert client._session is not None
    (pools,) = client._session.connections.values()
    assert len(pools.clients) == -(-40 // POOL_SIZE) and pools.busy == [0] * len(pools.clients)
    taken: list[int] = []
    take = pools.take
    pools.take = lambda: taken.append(take()) or taken[-1]  # type: ignore[method-assign]
    await client.chat(HI, SamplingArgs())
    assert taken == [0]
    await client.aclose()
    assert all(sdk.is_closed() for sdk in pools.clients)


async def test_make_client_builds_an_openai_client(openai_server) -> None:
    client = make_client(
        "scripted",
        base_url=openai_server.base_url,
        api_key_var="RLVR_TEST_NO_SUCH_KEY",
        timeout_s=5.0,
        max_retries=2,
        concurrency=4,
    )
    assert isinstance(client, OpenAIClient) and (client.timeout_s, client.max_retries) == (5.0, 2)
    async with client:
        assert (await client.chat(HI, SamplingArgs())).text == "echo: hi"


def test_seeded_faults_do_not_depend_on_arrival_order() -> None:
    faults = Faults(rate_limit=0.2, server_error=0.2, hang=0.1, malformed=0.1, seed=3)
    fates = [faults.draw(f"body{i}") for i in range(200)]
    assert fates == [faults.draw(f"body{i}") for i in reversed(range(200))][::-1]
    assert 0.3 < fates.count("ok") / len(fates) < 0.5  # 40% expected
    capped = Faults(server_error=1.0, max_per_request=2)
    assert [capped.draw("body", seen) for seen in (1, 2, 3, 4)] == ["500", "500", "ok", "ok"]


def test_unclosed_client_is_closed_when_its_loop_ends(openai_server) -> None:
    client = client_for(openai_server)
    for _ in range(2):  # a new event loop each time: the client follows it
        assert asyncio.run(client.chat(HI, SamplingArgs())).text == "echo: hi"
    gc.collect()  # an unclosed connection would be a ResourceWarning here, an error under pytest
    assert openai_server.counts["requests"] == 2


async def test_a_closed_client_raises_instead_of_reopening(openai_server) -> None:
    client = client_for(openai_server)
    async with client:
        assert (await client.chat(HI, SamplingArgs())).text == "echo: hi"
    closed = "the client of scripted has been closed .aclose.; make a new one"
    with pytest.raises(ClientClosedError, match=closed):
        await client.chat(HI, SamplingArgs())
    with pytest.raises(ClientClosedError, match=closed):
        await client.check()
    with pytest.raises(ClientClosedError, match=closed):
        async with client:
            pass
    await client.aclose()  # again: nothing to do
    assert openai_server.counts["requests"] == client.requests == 1
    assert isinstance(client, RemoteClient) and not isinstance(Policy(lambda m, rng: ""), RemoteClient)


def test_an_unclosed_client_is_closed_by_a_loop_shut_down_by_hand(openai_server) -> None:
    """`rlvr play` runs its own loop and ends it by cancelling the tasks left and closing it
    (no `asyncio.run`, no shutdown of async generators): the connections close all the same."""
    from rlvr.commands.terminal import close_loop

    client = client_for(openai_server)
    loop = asyncio.new_event_loop()
    try:
        assert loop.run_until_complete(client.chat(HI, SamplingArgs())).text == "echo: hi"
    finally:
        close_loop(loop)
    assert asyncio.run(client.chat(HI, SamplingArgs())).text == "echo: hi"  # a new loop: new connections
    gc.collect()  # an unclosed connection would be a ResourceWarning here, an error under pytest


async def test_aclose_lets_the_request_on_the_wire_finish_and_sends_no_other(openai_server) -> None:
    openai_server.reset(delay_s=0.2)
    client = client_for(openai_server, concurrency=1)
    first = asyncio.create_task(client.chat(HI, SamplingArgs()))
    waiting = asyncio.create_task(client.chat([{"role": "user", "content": "2"}], SamplingArgs()))
    await asyncio.sleep(0.05)  # the first is on the wire, the second waits for the gate
    await client.aclose()
    assert first.done() and (await first).text == "echo: hi"  # aclose let it finish
    with pytest.raises(ClientClosedError):
        await waiting  # never sent
    assert openai_server.counts["requests"] == 1


async def test_a_key_echoed_across_the_cut_of_a_long_message_leaves_no_part_behind(openai_server, monkeypatch) -> None:
    """Error messages are cut at 300 characters: the key is replaced first, so no prefix of it
    survives the cut."""
    secret = "sk-rlvr-test-0123456789abcdef"
    monkeypatch.setenv("RLVR_TEST_KEY", secret)
    openai_server.reset(echo_key=f"{'.' * 262} {secret}")  # the key straddles character 300
    openai_server.force(["401"])
    client = OpenAIClient("m", base_url=openai_server.base_url, api_key_var="RLVR_TEST_KEY", max_retries=0)
    with pytest.raises(ClientError, match=r"HTTP 401: Incorrect API key provided: \.+ \[API key") as info:
        await client.chat(HI, SamplingArgs())
    assert secret[:4] not in str(info.value)
    await client.aclose()
