"""Engine selection by name."""

from __future__ import annotations

import pytest

from termrl.errors import ConfigError, EngineUnavailable
from termrl.llm.engines import cpu_engine_problems, cpu_policy_engine, make_engine
from termrl.llm.hf_engine import TransformersEngine
from termrl.llm.vllm_engine import vllm_available


def test_make_engine_builds_each_kind(tiny_model_dir) -> None:
    assert isinstance(make_engine("transformers", tiny_model_dir), TransformersEngine)
    assert (
        make_engine("litellm", "openai/x", api_base="http://127.0.0.1:1/v1").accepts_token_ids
        is False
    )
    if vllm_available() is not None:
        with pytest.raises(EngineUnavailable):
            make_engine("vllm", tiny_model_dir)
    with pytest.raises(ConfigError, match="unknown engine"):
        make_engine("llama.cpp", tiny_model_dir)
    with pytest.raises(ConfigError, match="needs a model name"):
        make_engine("litellm")


def test_a_model_the_continuous_engine_cannot_decode_is_batched_instead(tmp_path, capsys) -> None:
    """The continuous engine's decode step is Llama's (no biases); a Qwen2-style model (biased
    q/k/v projections) still serves the rollout, through the whole-batch engine."""
    import asyncio

    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from termrl.llm.batching import BatchingEngine
    from termrl.llm.engine import SamplingParams
    from termrl.llm.engines import cpu_policy_engine
    from termrl.llm.models import load_default_tokenizer

    tokenizer = load_default_tokenizer()
    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=4096,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=tokenizer.bos_token_id,
    )
    torch.manual_seed(0)
    Qwen2ForCausalLM(config).save_pretrained(tmp_path, safe_serialization=True)
    tokenizer.save_pretrained(tmp_path)

    engine = cpu_policy_engine(tmp_path, max_batch_size=2, context_window=512)
    assert isinstance(engine, BatchingEngine)
    assert "batching whole generate calls instead" in capsys.readouterr().err
    params = SamplingParams(max_new_tokens=4, temperature=1.0, seed=1)
    (generation,) = asyncio.run(engine.generate([[1, 2, 3]], params))
    assert 1 <= len(generation.token_ids) <= 4


def test_engine_settings_that_cannot_run_are_refused_before_the_model_loads(tmp_path) -> None:
    for batching, weights, fragment in [
        ("paged", "auto", "engine must be one of"),
        ("continuous", "int4", "weights_dtype must be one of"),
        ("batching", "bfloat16", "needs engine=continuous"),  # would decode in float32
    ]:
        with pytest.raises(ConfigError, match=fragment):
            cpu_policy_engine(
                tmp_path / "no-model", batching=batching, max_batch_size=1, weights_dtype=weights
            )
    # auto means the best the engine has: float32 on the batching engine.
    assert cpu_engine_problems("batching", "auto") == []
    assert cpu_engine_problems("continuous", "bfloat16") == []
