"""The ModelProxy over real HTTP: OpenAI shape, per-session token records, batching."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest

from termrl.llm.hf_engine import TransformersEngine
from termrl.llm.proxy import ModelProxy
from termrl.llm.toolcalls import TOOLS, ToolCall, render_tool_call

from ..agent.scripted import ScriptedEngine
from .recording import Recording


@pytest.fixture(scope="module")
def tiny_engine(tiny_model_dir) -> TransformersEngine:
    return TransformersEngine(tiny_model_dir)


def assert_session_is_what_was_fed(session, fed: list[list[int]]) -> None:
    stream: list[int] = []
    chunks = session.chunks()
    for chunk, call in zip(chunks, session.calls, strict=True):
        stream += chunk["prompt_ids"]
        assert stream == call.prompt_ids
        assert call.prompt_ids in fed
        stream += chunk["response_ids"]
        assert len(chunk["response_logprobs"]) == len(chunk["response_ids"])


async def test_models_and_a_completion_have_the_openai_shape(tiny_engine) -> None:
    async with (
        ModelProxy(tiny_engine) as proxy,
        httpx.AsyncClient(base_url=proxy.base_url) as client,
    ):
        models = (await client.get("/models")).json()
        assert models["data"][0]["id"] == tiny_engine.model_name
        body = {
            "model": "x",
            "messages": [{"role": "user", "content": "hi"}],
            "max_tokens": 5,
            "logprobs": True,
            "return_token_ids": True,
            "return_tokens_as_token_ids": True,
        }
        reply = (
            await client.post("/chat/completions", json=body, headers={"X-Session-Id": "s1"})
        ).json()
        choice = reply["choices"][0]
        assert choice["finish_reason"] == "length" and choice["message"]["role"] == "assistant"
        assert reply["usage"]["completion_tokens"] == 5 == len(choice["token_ids"])
        assert [f"token_id:{t}" for t in choice["token_ids"]] == [
            c["token"] for c in choice["logprobs"]["content"]
        ]
        recorded = proxy.sessions["s1"].calls[0]
        assert (
            recorded.prompt_ids == reply["prompt_token_ids"]
            and recorded.response_ids == choice["token_ids"]
        )
        session = (await client.get(f"http://{proxy.host}:{proxy.port}/termrl/sessions/s1")).json()
        assert session["trainable"] and len(session["chunks"]) == 1
        for bad, why in [
            ({"stream": True}, "streaming"),
            ({"n": 2}, "n=1"),
            ({"messages": []}, "messages"),
        ]:
            response = await client.post("/chat/completions", json=body | bad)
            assert response.status_code == 400 and why in response.json()["error"]["message"]
        assert (
            await client.get(f"http://{proxy.host}:{proxy.port}/termrl/sessions/nope")
        ).status_code == 404


async def test_tool_calls_round_trip_and_the_stream_is_extended_not_retokenized(
    tiny_tokenizer,
) -> None:
    call = render_tool_call(ToolCall("bash", {"command": "ls  -la"}))
    engine = ScriptedEngine(
        tiny_tokenizer, ["Looking.\n" + call, "All good." + render_tool_call(ToolCall("done"))]
    )
    async with ModelProxy(engine) as proxy, httpx.AsyncClient(base_url=proxy.base_url) as client:
        headers = {"Authorization": "Bearer episode-7"}
        messages = [{"role": "system", "content": "S"}, {"role": "user", "content": "go"}]
        first = (
            await client.post(
                "/chat/completions", headers=headers, json={"messages": messages, "tools": TOOLS}
            )
        ).json()
        choice = first["choices"][0]
        assert choice["finish_reason"] == "tool_calls"
        [tc] = choice["message"]["tool_calls"]
        assert tc["function"]["name"] == "bash" and json.loads(tc["function"]["arguments"]) == {
            "command": "ls  -la"
        }
        assert choice["message"]["content"] == "Looking.\n"
        messages += [
            choice["message"],
            {"role": "tool", "tool_call_id": tc["id"], "content": "a.txt"},
        ]
        second = (
            await client.post(
                "/chat/completions", headers=headers, json={"messages": messages, "tools": TOOLS}
            )
        ).json()
        assert second["choices"][0]["message"]["tool_calls"][0]["function"]["name"] == "done"
    session = proxy.sessions["episode-7"]
    assert session.trainable and [c.extends_previous for c in session.calls] == [True, True]
    assert_session_is_what_was_fed(session, engine.fed)
    # The second prompt holds the model's own sampled tokens, not a re-rendering.
    first_call = session.calls[0]
    assert engine.fed[1][: len(first_call.prompt_ids) + len(first_call.response_ids)] == (
        first_call.prompt_ids + first_call.response_ids
    )
    chunks = session.chunks()
    assert chunks[0]["call_format"] == "tool-call" and "a.txt" in chunks[0]["observation"]


async def test_a_rewritten_history_is_recorded_as_not_trainable(tiny_tokenizer) -> None:
    engine = ScriptedEngine(tiny_tokenizer, ["one", "two"])
    async with ModelProxy(engine) as proxy, httpx.AsyncClient(base_url=proxy.base_url) as client:
        headers = {"X-Session-Id": "r"}
        first = (
            await client.post(
                "/chat/completions",
                headers=headers,
                json={"messages": [{"role": "user", "content": "a"}]},
            )
        ).json()
        edited = [
            {"role": "user", "content": "a (edited)"},
            first["choices"][0]["message"],
            {"role": "user", "content": "b"},
        ]
        await client.post("/chat/completions", headers=headers, json={"messages": edited})
    assert [c.extends_previous for c in proxy.sessions["r"].calls] == [True, False]
    assert not proxy.sessions["r"].trainable


async def test_32_concurrent_sessions_are_batched_and_recorded_exactly(tiny_engine) -> None:
    recording = Recording(tiny_engine)
    async with ModelProxy(recording, max_wait_sec=0.05) as proxy:
        limits = httpx.Limits(max_connections=64)
        async with httpx.AsyncClient(base_url=proxy.base_url, limits=limits, timeout=120) as client:

            async def episode(i: int) -> None:
                messages = [{"role": "user", "content": f"task {i}"}]
                for turn in range(2):
                    r = await client.post(
                        "/chat/completions",
                        headers={"Authorization": f"Bearer key-{i}"},
                        json={"messages": messages, "max_tokens": 4, "seed": i * 10 + turn},
                    )
                    r.raise_for_status()
                    messages += [
                        r.json()["choices"][0]["message"],
                        {"role": "user", "content": f"obs {turn}"},
                    ]

            await asyncio.gather(*(episode(i) for i in range(32)))
        batch_sizes = proxy.engine.batch_sizes
    assert len(proxy.sessions) == 32
    assert sum(batch_sizes) == 64 and max(batch_sizes) > 1  # requests shared generate calls
    for session in proxy.sessions.values():
        assert len(session.calls) == 2 and session.trainable
        assert_session_is_what_was_fed(session, recording.fed)
