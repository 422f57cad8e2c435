"""Engine selection by name."""

from __future__ import annotations

import pytest

from termrl.errors import ConfigError, EngineUnavailable
from termrl.llm.engines import make_engine
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
