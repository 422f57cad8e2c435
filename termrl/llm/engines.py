"""Pick an engine by name: the one place stage configs turn into engines.

make_engine("transformers", model=None)      # the default policy, prepared once
make_engine("vllm", model="/ckpt/step-10")   # GPU only; EngineUnavailable elsewhere
make_engine("litellm", model="openai/gpt-4o-mini", api_base=..., api_key=...)

cpu_policy_engine(model, batching="continuous", ...)   the policy for many concurrent episodes
                                                       (rollout and eval): see BATCHINGS; a model
                                                       the continuous engine cannot decode (not
                                                       Llama-style) is batched instead
"""

from __future__ import annotations

import os
import sys
from typing import Any, Literal

from termrl.errors import ConfigError, UnsupportedModel
from termrl.llm.decode_step import WEIGHTS_DTYPES
from termrl.llm.engine import Engine
from termrl.llm.models import resolve_model_path

__all__ = [
    "BATCHINGS",
    "ENGINE_KINDS",
    "WEIGHTS_DTYPES",
    "EngineKind",
    "cpu_policy_engine",
    "cpu_engine_problems",
    "make_engine",
]

EngineKind = Literal["transformers", "vllm", "litellm"]
ENGINE_KINDS: tuple[str, ...] = ("transformers", "vllm", "litellm")

BATCHINGS = ("continuous", "batching")
"""How the local CPU engine serves concurrent episodes. ``continuous``: episodes join and leave
one running batch between decode steps, and each turn reuses the KV cache of the episode's
earlier turns (``termrl.llm.continuous``). ``batching``: concurrent turns are merged into
whole-batch ``generate`` calls that wait for their longest member, every prompt prefilled
from scratch (``termrl.llm.batching``). Both sample the same tokens for a seeded request when
the continuous engine decodes in float32 (``weights_dtype``); ``bench/rollout_engine.py``
measures them side by side."""


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


def cpu_engine_problems(batching: str, weights_dtype: str) -> list[str]:
    """What is wrong with a stage's CPU engine settings (``engine``, ``weights_dtype``), each
    problem a sentence; the rollout and eval configs report them with their own."""
    problems = []
    if batching not in BATCHINGS:
        problems.append(f"engine must be one of {', '.join(BATCHINGS)}, not {batching!r}")
    if weights_dtype not in WEIGHTS_DTYPES:
        problems.append(
            f"weights_dtype must be one of {', '.join(WEIGHTS_DTYPES)}, not {weights_dtype!r}"
        )
    elif batching == "batching" and weights_dtype == "bfloat16":
        problems.append(
            "weights_dtype=bfloat16 needs engine=continuous: the batching engine decodes in "
            "float32 only (auto or float32 go with it)"
        )
    return problems


def cpu_policy_engine(
    model: str | os.PathLike | None,
    *,
    batching: str = "continuous",
    max_batch_size: int,
    context_window: int | None = None,
    weights_dtype: str = "auto",
) -> Engine:
    """The policy on the local engine (transformers on CPU) for many concurrent episodes,
    batched as ``batching`` says (``BATCHINGS``); ``model`` None: the embedded default.
    ``weights_dtype`` is the continuous engine's decode weights (``WEIGHTS_DTYPES``: ``auto`` is
    bfloat16 where the CPU has bf16 units); the batching engine is fp32 throughout."""
    problems = cpu_engine_problems(batching, weights_dtype)
    if problems:
        raise ConfigError(problems)
    if batching == "continuous":
        from termrl.llm.continuous import ContinuousEngine

        try:
            return ContinuousEngine(
                resolve_model_path(model),
                max_batch_size=max_batch_size,
                context_window=context_window,
                weights_dtype=weights_dtype,
            )
        except UnsupportedModel as exc:  # its decode step is Llama's: any other model batches
            print(f"[engine] {exc}; batching whole generate calls instead", file=sys.stderr)
    from termrl.llm.batching import BatchingEngine

    engine = make_engine(
        "transformers", model, max_batch_size=max_batch_size, context_window=context_window
    )
    return BatchingEngine(engine, max_batch_size=max_batch_size)
