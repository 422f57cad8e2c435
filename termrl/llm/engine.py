"""The one inference interface every stage talks to.

An engine generates for a *batch* of prompts, with one set of sampling
parameters or one per prompt (a seeded request samples the same tokens alone
or batched with others). A prompt is either token ids (the token-in-token-out path that
training needs: the caller decides every token the model is fed) or a chat
conversation (API models, which only take messages). Each result carries the
text, the response token ids, the per-token log-probabilities under the
sampling distribution (μ), and why generation stopped:

    Engine.generate([Prompt, ...], SamplingParams | [SamplingParams, ...]) -> [Generation, ...]
        ├── TransformersEngine   CPU/GPU, batched, KV cache          (hf_engine)
        ├── VLLMEngine           GPU, offline vllm.LLM               (vllm_engine)
        └── LiteLLMEngine        any OpenAI-compatible endpoint      (litellm_engine)

``BatchingEngine`` (batching.py) sits in front of any of them and merges the
single requests of many concurrent episodes into batched calls.

Stop strings are *kept* in the returned text and token ids: the tokens were
sampled and the trainer must see them (OpenAI servers drop them; the
litellm engine puts them back).
"""

from __future__ import annotations

import abc
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from termrl.llm.toolcalls import call_is_settled

__all__ = [
    "TOOL_CALL_END",
    "ChatMessages",
    "Engine",
    "FinishReason",
    "Generation",
    "ParamsArg",
    "Prompt",
    "SamplingParams",
    "TurnEnd",
    "per_prompt_params",
    "prompt_token_ids",
]

TOOL_CALL_END = "</tool_call>"
"""Where an assistant turn that calls a tool ends: generation stops here."""

_CALL_OPEN = "<tool_call>"

ChatMessages = list[dict[str, Any]]
Prompt = list[int] | ChatMessages
FinishReason = Literal["stop", "eos", "length"]


@dataclass(frozen=True)
class SamplingParams:
    """How to sample. Hashable, so the batching front can group equal requests."""

    max_new_tokens: int = 512
    """Upper bound on generated tokens for this call; the one default of the response budget
    (``AgentConfig.max_new_tokens`` takes it, and lowers it per turn near the context limit)."""
    temperature: float = 1.0
    """0 means greedy. Logprobs are computed from logits / temperature (1.0 when greedy)."""
    top_p: float = 1.0
    """Nucleus sampling mass; 1.0 disables it."""
    top_k: int = 0
    """Keep only the k most likely tokens; 0 disables it."""
    stop: tuple[str, ...] = (TOOL_CALL_END,)
    """Generation stops once the response text contains one of these (kept in the output)."""
    seed: int | None = None
    """Seed for reproducible sampling (per call; None draws fresh randomness)."""
    end_settled_calls: bool = True
    """Stop (reason ``stop``) once the response's tool call is settled: a whole JSON object
    followed by something other than ``</tool_call>``, or text that can no longer become
    JSON (``termrl.llm.toolcalls.call_is_settled``). Such a call is malformed whatever
    follows; a well-formed call is unaffected. Local engines only (transformers)."""


ParamsArg = SamplingParams | Sequence[SamplingParams]
"""One SamplingParams for the whole batch, or one per prompt."""


def per_prompt_params(params: ParamsArg, n: int) -> list[SamplingParams]:
    """Expand ``params`` to one entry per prompt."""
    if isinstance(params, SamplingParams):
        return [params] * n
    out = list(params)
    if len(out) != n:
        raise ValueError(f"{len(out)} sampling params for {n} prompts")
    return out


def prompt_token_ids(tokenizer: Any, prompt: Prompt) -> list[int]:
    """Token ids of a prompt: as given, or the chat template with a generation header."""
    if prompt and isinstance(prompt[0], dict):
        return list(
            tokenizer.apply_chat_template(
                prompt, tokenize=True, add_generation_prompt=True, return_dict=False
            )
        )  # transformers 5 returns a dict by default
    return [int(t) for t in prompt]


class TurnEnd:
    """Why a response ends, asked after each sampled token: eos, a stop string, a settled
    tool call or the budget (the local engines' one stop rule)."""

    def __init__(
        self, params: SamplingParams, tokenizer: Any, eos_ids: frozenset[int], budget: int
    ) -> None:
        self.params, self.tokenizer, self.eos_ids, self.budget = params, tokenizer, eos_ids, budget
        # Tokens to decode when looking for a stop string (or the call's opening tag) at the end.
        longest = max(
            (len(tokenizer.encode(s, add_special_tokens=False)) for s in params.stop), default=0
        )
        self.tail = max(longest, len(tokenizer.encode(_CALL_OPEN, add_special_tokens=False))) + 2
        self.call_from: int | None = None  # a token index at or before the first <tool_call>

    def __call__(self, tokens: list[int]) -> FinishReason | None:
        if tokens[-1] in self.eos_ids:
            return "eos"
        tail = self.tokenizer.decode(tokens[-self.tail :])
        if any(s in tail for s in self.params.stop):
            return "stop"
        if self.params.end_settled_calls:
            if self.call_from is None and _CALL_OPEN in tail:
                self.call_from = max(len(tokens) - self.tail, 0)
            # Only the text from the call on is decoded again each step.
            if self.call_from is not None and call_is_settled(
                self.tokenizer.decode(tokens[self.call_from :])
            ):
                return "stop"
        if len(tokens) >= self.budget:
            return "length"
        return None


@dataclass
class Generation:
    """One response."""

    text: str
    """The decoded response, stop string included, end-of-turn token not."""
    token_ids: list[int]
    """Response tokens exactly as sampled (empty when an API does not say)."""
    logprobs: list[float] | None
    """log μ(token) per response token; None when the engine cannot tell."""
    finish_reason: FinishReason
    """stop: a stop string; eos: the end-of-turn token; length: max_new_tokens reached."""
    prompt_ids: list[int] | None = None
    """The tokens the model was fed, when known (a token prompt, or an endpoint that reports them)."""
    exact_tokens: bool = True
    """False when token_ids/prompt_ids are not what the model really saw and sampled."""
    gen_ms: float = 0.0
    """Wall time of the (batched) call that produced this response."""
    meta: dict[str, Any] = field(default_factory=dict)


class Engine(abc.ABC):
    """Batched generation. Implementations may block: call them from a thread or a batcher."""

    name: str = "engine"
    #: True when prompts may be token ids (the engine owns a tokenizer).
    accepts_token_ids: bool = True
    #: The Hugging Face tokenizer whose ids the engine speaks (None for API engines).
    tokenizer: Any = None
    #: The model's context window in tokens (prompt + response).
    context_window: int = 8192
    #: The model name reported by /v1/models and stored with results.
    model_name: str = "model"
    #: True when concurrent single-prompt calls are already merged into batches
    #: (the batching front, continuous batching): callers need no batching front.
    merges_requests: bool = False

    @abc.abstractmethod
    async def generate(self, prompts: Sequence[Prompt], params: ParamsArg) -> list[Generation]:
        """Generate one response per prompt, in order (params: shared or one per prompt)."""

    async def aclose(self) -> None:  # noqa: B027 - optional hook, most engines hold nothing
        """Release resources (servers, GPU memory)."""

    async def __aenter__(self) -> Engine:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
