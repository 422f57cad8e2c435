"""The litellm engine against the ModelProxy over loopback: a real HTTP round trip."""

from __future__ import annotations

import pytest

from termrl.agent.loop import AgentConfig, run_episode
from termrl.errors import ModelError, NetworkError
from termrl.llm.engine import SamplingParams
from termrl.llm.hf_engine import TransformersEngine
from termrl.llm.litellm_engine import LiteLLMEngine
from termrl.llm.proxy import ModelProxy

from ..agent.scripted import ScriptedSession
from .recording import Recording


@pytest.fixture(scope="module")
def tiny_engine(tiny_model_dir) -> TransformersEngine:
    return TransformersEngine(tiny_model_dir)


async def test_exact_tokens_and_logprobs_come_back_through_litellm(tiny_engine) -> None:
    async with ModelProxy(tiny_engine) as proxy:
        engine = LiteLLMEngine("openai/tiny", api_base=proxy.base_url, api_key="lite-1")
        prompts = [[{"role": "user", "content": f"hello {i}"}] for i in range(3)]
        gens = await engine.generate(prompts, SamplingParams(max_new_tokens=6, seed=4))
    calls = proxy.sessions["lite-1"].calls
    assert len(calls) == 3
    for gen in gens:
        assert gen.exact_tokens and len(gen.token_ids) == len(gen.logprobs) == 6
        [call] = [c for c in calls if c.prompt_ids == gen.prompt_ids]
        assert gen.token_ids == call.response_ids
        assert gen.logprobs == pytest.approx(call.response_logprobs)
        assert gen.finish_reason == "length"


async def test_an_agent_episode_through_litellm_is_trainable_and_exact(tiny_engine) -> None:
    recording = Recording(tiny_engine)
    async with ModelProxy(recording) as proxy:
        engine = LiteLLMEngine("openai/tiny", api_base=proxy.base_url, api_key="episode-3")
        config = AgentConfig(max_turns=3, max_new_tokens=12, sampling=SamplingParams(seed=1))
        result = await run_episode(engine, ScriptedSession(), "List the files.", config)
    assert result.num_turns == 3 and result.trainable
    stream: list[int] = []
    for chunk, fed in zip(result.chunks, recording.fed, strict=True):
        stream += chunk.prompt_ids
        assert stream == fed
        stream += chunk.response_ids


async def test_without_token_ids_an_episode_is_not_trainable(tiny_engine) -> None:
    async with ModelProxy(tiny_engine) as proxy:
        engine = LiteLLMEngine(
            "openai/tiny", api_base=proxy.base_url, api_key="plain", request_token_ids=False
        )
        [gen] = await engine.generate(
            [[{"role": "user", "content": "x"}]], SamplingParams(max_new_tokens=3)
        )
        assert not gen.exact_tokens and gen.token_ids == [] and len(gen.logprobs) == 3
        result = await run_episode(
            engine, ScriptedSession(), "t", AgentConfig(max_turns=2, max_new_tokens=4)
        )
    assert not result.trainable and result.num_turns == 2


async def test_an_unreachable_endpoint_is_a_network_error() -> None:
    engine = LiteLLMEngine("openai/x", api_base="http://127.0.0.1:9/v1", api_key="k", timeout_sec=5)
    with pytest.raises(NetworkError):
        await engine.generate(
            [[{"role": "user", "content": "x"}]], SamplingParams(max_new_tokens=2)
        )
    with pytest.raises(ModelError, match="chat messages"):
        await engine.generate([[1, 2, 3]], SamplingParams())


def test_a_cut_stop_string_is_put_back() -> None:
    response = {
        "choices": [
            {"message": {"content": '<tool_call>\n{"name": "done"}\n'}, "finish_reason": "stop"}
        ]
    }
    gen = LiteLLMEngine._to_generation(response, SamplingParams(), 1.0)
    assert gen.text.endswith("</tool_call>") and not gen.exact_tokens and gen.logprobs is None
