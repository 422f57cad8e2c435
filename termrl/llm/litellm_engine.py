"""The litellm engine: any OpenAI-compatible endpoint or API model.

API models take messages, not token ids, so this engine only accepts chat
prompts. It asks for logprobs and, vLLM-style, for the token ids
(``return_token_ids``, ``return_tokens_as_token_ids``); servers that honour
them (vLLM, termrl's ModelProxy) give back exact ids and the trajectory can
be trained on. Otherwise ``exact_tokens`` is False and the agent marks the
episode not trainable — fine for eval and judging.

OpenAI servers cut the matched stop string from the text; when a response
ends inside an unclosed ``<tool_call>``, the closing tag is put back so the
agent parses the call the model wrote.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Sequence
from typing import Any

from termrl.errors import ModelError, NetworkError
from termrl.llm.engine import (
    TOOL_CALL_END,
    Engine,
    FinishReason,
    Generation,
    ParamsArg,
    Prompt,
    SamplingParams,
    per_prompt_params,
)

__all__ = ["LiteLLMEngine"]


def _get(obj: Any, name: str, default: Any = None) -> Any:
    """Read a field from a litellm object or dict, including provider extras."""
    if isinstance(obj, dict):
        return obj.get(name, default)
    value = getattr(obj, name, None)
    if value is None:
        extra = getattr(obj, "model_extra", None) or {}
        value = extra.get(name)
    return default if value is None else value


class LiteLLMEngine(Engine):
    """Chat completions through ``litellm.acompletion``, one request per prompt, concurrently."""

    name = "litellm"
    accepts_token_ids = False

    def __init__(
        self,
        model: str,
        *,
        api_base: str | None = None,
        api_key: str | None = None,
        context_window: int = 8192,
        timeout_sec: float = 120.0,
        request_token_ids: bool = True,
        extra_headers: dict[str, str] | None = None,
    ) -> None:
        # litellm fetches a price list from GitHub on import unless told not to;
        # offline that costs ~7 s of retries per process.
        os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
        try:
            import litellm  # noqa: F401 - fail at construction, not at the first episode
        except ImportError as exc:
            raise ModelError("the litellm engine needs the 'litellm' package") from exc
        self.model = model
        self.model_name = model
        self.api_base = api_base
        self.api_key = api_key
        self.context_window = context_window
        self.timeout_sec = timeout_sec
        self.request_token_ids = request_token_ids
        self.extra_headers = dict(extra_headers or {})

    async def generate(self, prompts: Sequence[Prompt], params: ParamsArg) -> list[Generation]:
        for p in prompts:
            if not p or not isinstance(p[0], dict):
                raise ModelError("the litellm engine takes chat messages, not token ids")
        per_row = per_prompt_params(params, len(prompts))
        return list(
            await asyncio.gather(
                *(self._one(list(p), sp) for p, sp in zip(prompts, per_row, strict=True))
            )
        )

    async def _one(self, messages: list[dict[str, Any]], params: SamplingParams) -> Generation:
        import litellm

        kwargs: dict[str, Any] = {
            "model": self.model,
            "messages": messages,
            "max_tokens": params.max_new_tokens,
            "temperature": params.temperature,
            "top_p": params.top_p,
            "logprobs": True,
            "timeout": self.timeout_sec,
            "num_retries": 0,
        }
        if params.stop:
            kwargs["stop"] = list(params.stop)
        if params.seed is not None:
            kwargs["seed"] = params.seed
        if self.api_base:
            kwargs["api_base"] = self.api_base
        if self.api_key:
            kwargs["api_key"] = self.api_key
        if self.extra_headers:
            kwargs["extra_headers"] = self.extra_headers
        if self.request_token_ids:
            kwargs["extra_body"] = {"return_token_ids": True, "return_tokens_as_token_ids": True}
        started = time.perf_counter()
        try:
            response = await litellm.acompletion(**kwargs)
        except (
            litellm.APIConnectionError,
            litellm.Timeout,
            litellm.RateLimitError,
            litellm.ServiceUnavailableError,
            litellm.InternalServerError,
        ) as exc:
            raise NetworkError(f"{self.model}: {type(exc).__name__}: {exc}") from exc
        except litellm.APIError as exc:
            raise ModelError(f"{self.model}: {type(exc).__name__}: {exc}") from exc
        return self._to_generation(response, params, (time.perf_counter() - started) * 1000.0)

    @staticmethod
    def _to_generation(response: Any, params: SamplingParams, gen_ms: float) -> Generation:
        choice = _get(response, "choices")[0]
        message = _get(choice, "message")
        text = _get(message, "content", "") or ""
        finish = _get(choice, "finish_reason", "stop")
        if finish == "stop" and TOOL_CALL_END in params.stop:
            opened, closed = text.rfind("<tool_call>"), text.rfind(TOOL_CALL_END)
            if opened > closed:
                text += TOOL_CALL_END
        reason: FinishReason = "length" if finish == "length" else "stop"
        content = _get(_get(choice, "logprobs", {}), "content", []) or []
        logprobs = [float(_get(c, "logprob", 0.0)) for c in content] or None
        token_ids = _get(choice, "token_ids")
        if (
            token_ids is None
            and content
            and all(str(_get(c, "token", "")).startswith("token_id:") for c in content)
        ):
            token_ids = [int(str(_get(c, "token")).split(":", 1)[1]) for c in content]
        prompt_ids = _get(response, "prompt_token_ids")
        exact = (
            token_ids is not None
            and prompt_ids is not None
            and (logprobs is None or len(logprobs) == len(token_ids))
        )
        return Generation(
            text=text,
            token_ids=[int(t) for t in token_ids or []],
            logprobs=logprobs,
            finish_reason=reason,
            prompt_ids=[int(t) for t in prompt_ids] if prompt_ids is not None else None,
            exact_tokens=exact,
            gen_ms=gen_ms,
            meta={"finish_reason_raw": finish},
        )
