"""The vLLM engine: unavailable with a clear reason on CPU; a real run where a GPU is."""

from __future__ import annotations

import pytest

from termrl.errors import EngineUnavailable
from termrl.llm.engine import SamplingParams
from termrl.llm.vllm_engine import VLLMEngine, vllm_available

REASON = vllm_available()


@pytest.mark.skipif(REASON is None, reason="vllm can run here")
def test_construction_without_vllm_or_gpu_says_why(tiny_model_dir) -> None:
    with pytest.raises(EngineUnavailable, match="vllm engine cannot run here"):
        VLLMEngine(tiny_model_dir)


@pytest.mark.gpu
@pytest.mark.skipif(REASON is not None, reason=f"vllm unavailable: {REASON}")
async def test_vllm_generates_token_ids_and_logprobs(tiny_model_dir) -> None:
    engine = VLLMEngine(tiny_model_dir, gpu_memory_utilization=0.2)
    prompts = [[1, 2, 3], [{"role": "user", "content": "hi"}]]
    gens = await engine.generate(prompts, SamplingParams(max_new_tokens=8, seed=0))
    for gen in gens:
        assert len(gen.token_ids) == len(gen.logprobs) > 0 and gen.prompt_ids
        assert all(lp <= 0 for lp in gen.logprobs)
    await engine.aclose()
