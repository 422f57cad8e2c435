"""Pick an engine by name: the one place stage configs turn into engines.

make_engine("transformers", model=None)      # the default policy, prepared once
make_engine("vllm", model="/ckpt/step-10")   # GPU only; EngineUnavailable elsewhere
make_engine("litellm", model="openai/gpt-4o-mini", api_base=..., api_key=...)
"""

from __future__ import annotations

import os
from typing import Any, Literal

from termrl.errors import ConfigError
from termrl.llm.engine import Engine
from termrl.llm.models import resolve_model_path

__all__ = ["ENGINE_KINDS", "EngineKind", "make_engine"]

EngineKind = Literal["transformers", "vllm", "litellm"]
ENGINE_KINDS: tuple[str, ...] = ("transformers", "vllm", "litellm")


def make_engine(kind: str, model: str | os.PathLike | None = None, **options: Any) -> Engine:
    """Build an engine; ``model`` None means the embedded default policy (local engines)."""
    if kind == "transformers":
        from termrl.llm.hf_engine import TransformersEngine

        return TransformersEngine(resolve_model_path(model), **options)
    if kind == "vllm":
        from termrl.llm.vllm_engine import VLLMEngine

        return VLLMEngine(resolve_model_path(model), **options)
    if kind == "litellm":
        if model is None:
            raise ConfigError("the litellm engine needs a model name, e.g. openai/gpt-4o-mini")
        from termrl.llm.litellm_engine import LiteLLMEngine

        return LiteLLMEngine(str(model), **options)
    raise ConfigError(f"unknown engine {kind!r}; choose one of {', '.join(ENGINE_KINDS)}")
