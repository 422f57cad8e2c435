"""The transformers engine: batched sampling with a KV cache, on CPU or GPU.

The decoding loop is written out rather than delegated to ``generate()`` so
that each row's stop reason, the exact sampled ids and log μ of every token
come out directly. Prompts are left-padded into one batch; position ids
follow the attention mask so padding does not shift a row's positions. A row
stops at the end-of-turn token, at a stop string (``</tool_call>``) or at
its token budget; the batch stops when every row has.

fp32 on CPU: on CPUs without bf16 units, bf16 matmuls are many times slower.
"""

from __future__ import annotations

import asyncio
import inspect
import os
import threading
import time
from collections.abc import Sequence
from typing import Any

from termrl.errors import ModelError
from termrl.llm import grouped_attention
from termrl.llm.engine import (
    Engine,
    FinishReason,
    Generation,
    ParamsArg,
    Prompt,
    SamplingParams,
    TurnEnd,
    per_prompt_params,
    prompt_token_ids,
)

__all__ = ["TransformersEngine", "sample_next", "sample_rows"]


def sample_next(logits: Any, params: SamplingParams, generator: Any) -> tuple[Any, Any]:
    """Pick one token per row; return (token ids [B], log μ of them [B]).

    μ is the distribution at the sampling temperature before top-k/top-p
    truncation (greedy counts as temperature 1), which is what the trainer
    recomputes for the same tokens. One generator draws for every row.
    """
    probs, logp = _distributions(logits, params)
    if probs is None:
        tokens = logp.argmax(dim=-1)  # [B]
    else:
        import torch

        tokens = _draw(probs, torch.rand(probs.shape[0], generator=generator))  # [B]
    return tokens, logp.gather(-1, tokens[:, None]).squeeze(-1)


def sample_rows(
    logits: Any, params: Sequence[SamplingParams], generators: Sequence[Any]
) -> tuple[Any, Any]:
    """Pick one token per row, row i with ``params[i]`` and its own ``generators[i]``.

    The softmax, top-k and top-p run once for all rows that share their settings; only the
    draw is per row (its own generator: a seeded request samples the same tokens whatever
    else is in the batch). Returns (token ids [B], log μ of them [B]).
    """
    import torch

    tokens = torch.empty(len(params), dtype=torch.long, device=logits.device)  # [B]
    chosen = torch.empty(len(params), dtype=torch.float32, device=logits.device)  # [B]
    groups: dict[SamplingParams, list[int]] = {}
    for i, p in enumerate(params):
        groups.setdefault(p, []).append(i)
    for p, rows in groups.items():
        index = torch.tensor(rows, device=logits.device)
        probs, logp = _distributions(logits[index], p)  # [G, V]
        if probs is None:
            picked = logp.argmax(dim=-1)  # [G]
        else:
            uniforms = torch.cat([torch.rand(1, generator=generators[i]) for i in rows])  # [G]
            picked = _draw(probs, uniforms)  # [G]
        tokens[index] = picked
        chosen[index] = logp.gather(-1, picked[:, None]).squeeze(-1)
    return tokens, chosen


def _distributions(logits: Any, params: SamplingParams) -> tuple[Any, Any]:
    """(the truncated sampling distribution [B, V], or None when greedy; log μ [B, V])."""
    import torch

    logits = logits.float()  # [B, V]
    if params.temperature <= 0:
        return None, torch.log_softmax(logits, dim=-1)
    scaled = logits / params.temperature  # [B, V]
    logp = torch.log_softmax(scaled, dim=-1)  # [B, V]
    filtered = scaled
    if params.top_k > 0:
        kth = torch.topk(filtered, min(params.top_k, filtered.shape[-1]), dim=-1).values[:, -1:]
        filtered = filtered.masked_fill(filtered < kth, float("-inf"))
    if params.top_p < 1.0:
        sorted_logits, order = torch.sort(filtered, descending=True, dim=-1)  # [B, V]
        cum = torch.softmax(sorted_logits, dim=-1).cumsum(dim=-1)  # [B, V]
        # Drop a token when the mass before it already reaches top_p (keeps at least one).
        drop_sorted = (cum - torch.softmax(sorted_logits, dim=-1)) >= params.top_p
        drop = drop_sorted.scatter(-1, order, drop_sorted)
        filtered = filtered.masked_fill(drop, float("-inf"))
    return torch.softmax(filtered, dim=-1), logp


def _draw(probs: Any, uniforms: Any) -> Any:
    """Row i's token where ``uniforms[i]`` (in [0, 1)) falls in its cumulative distribution.

    Inverse-CDF sampling: the same distribution as ``torch.multinomial``, which took ~0.75 ms
    a row on a CPU over a 49k vocabulary (14 % of a batch-8 decode step); this draws 8 rows
    in ~0.2 ms. A token of zero probability is never picked: the first index whose running
    sum passes the draw has mass of its own.
    """
    import torch

    cumulative = probs.cumsum(dim=-1)  # [B, V]
    targets = (uniforms.to(probs.device) * cumulative[:, -1])[:, None]  # [B, 1]
    picked = torch.searchsorted(cumulative, targets, right=True).squeeze(-1)  # [B]
    vocab = probs.shape[-1]
    if bool((picked >= vocab).any()):  # a draw that rounded up to the total: the last with mass
        last = vocab - 1 - (probs.flip(-1) > 0).int().argmax(dim=-1)  # [B]
        picked = torch.minimum(picked, last)
    return picked


def _attention_choice(device: str) -> dict[str, str]:
    """On CPU, SDPA with grouped K/V heads (``termrl.llm.grouped_attention``); elsewhere the default."""
    return {"attn_implementation": grouped_attention.register()} if device == "cpu" else {}


class TransformersEngine(Engine):
    """A Hugging Face causal LM behind the engine interface.

    One generate runs at a time (a lock): on CPU a second concurrent batch
    would only slow both; the batching front merges concurrent requests instead.
    """

    name = "transformers"
    accepts_token_ids = True

    def __init__(
        self,
        model_path: str | os.PathLike,
        *,
        device: str = "cpu",
        dtype: str = "float32",
        max_batch_size: int = 32,
        context_window: int | None = None,
    ) -> None:
        import torch
        from transformers import AutoModelForCausalLM

        from termrl.llm.models import load_tokenizer

        try:
            self.tokenizer = load_tokenizer(model_path)
            try:
                model = AutoModelForCausalLM.from_pretrained(
                    model_path, dtype=getattr(torch, dtype), **_attention_choice(device)
                )
            except ValueError:  # an architecture without the attention interface
                model = AutoModelForCausalLM.from_pretrained(
                    model_path, dtype=getattr(torch, dtype)
                )
            self.model = model.to(device)
        except (OSError, ValueError) as exc:
            raise ModelError(f"cannot load model from {model_path}: {exc}") from exc
        self.model.eval()
        self.device = device
        self.max_batch_size = max_batch_size
        self.model_name = os.path.basename(os.path.normpath(str(model_path)))
        self.context_window = context_window or int(
            getattr(self.model.config, "max_position_embeddings", 8192)
        )
        eos = self.model.generation_config.eos_token_id
        eos_ids = set(eos if isinstance(eos, list) else [eos]) if eos is not None else set()
        if self.tokenizer.eos_token_id is not None:
            eos_ids.add(self.tokenizer.eos_token_id)
        self.eos_ids = frozenset(eos_ids)
        self.pad_id = (
            self.tokenizer.pad_token_id
            if self.tokenizer.pad_token_id is not None
            else next(iter(self.eos_ids))
        )
        self._lock = threading.Lock()
        # The prefill needs the last position's logits only; all of them would be
        # B x T x vocab floats (8 x 730 x 49152 x 4 B = 1.1 GB for SmolLM2).
        takes_keep = "logits_to_keep" in inspect.signature(self.model.forward).parameters
        self._last_logits_only = {"logits_to_keep": 1} if takes_keep else {}

    async def generate(self, prompts: Sequence[Prompt], params: ParamsArg) -> list[Generation]:
        return await asyncio.to_thread(self.generate_sync, prompts, params)

    def generate_sync(self, prompts: Sequence[Prompt], params: ParamsArg) -> list[Generation]:
        """Blocking generate (benchmarks and scripts call it directly)."""
        ids = [prompt_token_ids(self.tokenizer, p) for p in prompts]
        per_row = per_prompt_params(params, len(ids))
        out: list[Generation] = []
        with self._lock:
            for start in range(0, len(ids), self.max_batch_size):
                end = start + self.max_batch_size
                out.extend(self._generate_batch(ids[start:end], per_row[start:end]))
        return out

    def _generate_batch(
        self, prompts: list[list[int]], params: list[SamplingParams]
    ) -> list[Generation]:
        import torch

        if not prompts:
            return []
        longest = self._longest_prompt(prompts)
        budgets = [min(p.max_new_tokens, self.context_window - longest) for p in params]
        started = time.perf_counter()
        batch = len(prompts)
        input_ids, mask, positions = self._left_padded(prompts, longest)  # [B, T] each
        sampler = _Sampler(params)
        turn_ends = [
            TurnEnd(p, self.tokenizer, self.eos_ids, b)
            for p, b in zip(params, budgets, strict=True)
        ]
        tokens: list[list[int]] = [[] for _ in range(batch)]
        logprobs: list[list[float]] = [[] for _ in range(batch)]
        finish: list[FinishReason | None] = [None] * batch
        finished_at = [0.0] * batch
        dev = self.device
        with torch.inference_mode():
            out = self.model(
                input_ids=input_ids.to(dev),
                attention_mask=mask.to(dev),
                position_ids=positions.to(dev),
                use_cache=True,
                **self._last_logits_only,
            )
            prefilled = time.perf_counter()
            last_pos = positions[:, -1]  # [B]
            for _ in range(max(budgets)):
                picked, picked_logp = sampler(out.logits[:, -1, :].cpu())  # [B], [B]
                for row in range(batch):
                    if finish[row] is not None:
                        picked[row] = self.pad_id
                        continue
                    tok = int(picked[row])
                    tokens[row].append(tok)
                    logprobs[row].append(float(picked_logp[row]))
                    finish[row] = turn_ends[row](tokens[row])
                    if finish[row] is not None:
                        finished_at[row] = time.perf_counter()
                if all(f is not None for f in finish):
                    break
                mask = torch.cat([mask, torch.ones((batch, 1), dtype=torch.long)], dim=-1)
                last_pos = last_pos + 1
                out = self.model(
                    input_ids=picked[:, None].to(dev),
                    attention_mask=mask.to(dev),
                    position_ids=last_pos[:, None].to(dev),
                    past_key_values=out.past_key_values,
                    use_cache=True,
                )
        gen_ms = (time.perf_counter() - started) * 1000.0
        return [
            self._generation(
                prompts[row],
                tokens[row],
                logprobs[row],
                finish[row],
                gen_ms,
                # Where the time went (rollout benchmarks): the shared prefill, then this
                # row's own decoding; the rest of gen_ms it waited for longer rows.
                meta={
                    "prefill_ms": (prefilled - started) * 1000.0,
                    "decode_ms": (finished_at[row] - prefilled) * 1000.0,
                    "batch": batch,
                },
            )
            for row in range(batch)
        ]

    def _longest_prompt(self, prompts: list[list[int]]) -> int:
        """The longest prompt's length; ``ModelError`` for an empty prompt or one that fills the context."""
        if any(not p for p in prompts):
            raise ModelError("an empty prompt cannot be generated from")
        longest = max(len(p) for p in prompts)
        if longest >= self.context_window:
            raise ModelError(
                f"prompt of {longest} tokens leaves no room in a {self.context_window}-token context"
            )
        return longest

    def _left_padded(self, prompts: list[list[int]], longest: int) -> tuple[Any, Any, Any]:
        """(input ids, attention mask, position ids) of the prompts padded on the left to ``longest``,
        so every row's next token is at the same column."""
        import torch

        batch = len(prompts)
        input_ids = torch.full((batch, longest), self.pad_id, dtype=torch.long)  # [B, T]
        mask = torch.zeros((batch, longest), dtype=torch.long)  # [B, T]
        for row, p in enumerate(prompts):
            input_ids[row, longest - len(p) :] = torch.tensor(p)
            mask[row, longest - len(p) :] = 1
        positions = (mask.cumsum(-1) - 1).clamp(min=0)  # [B, T]
        return input_ids, mask, positions

    def _generation(
        self,
        prompt: list[int],
        tokens: list[int],
        logprobs: list[float],
        finish: FinishReason | None,
        gen_ms: float,
        meta: dict[str, Any],
    ) -> Generation:
        return Generation(
            # The end-of-turn token is in token_ids but not in the text.
            text=self.tokenizer.decode(tokens[:-1] if finish == "eos" else tokens),
            token_ids=tokens,
            logprobs=logprobs,
            finish_reason=finish or "length",
            prompt_ids=prompt,
            exact_tokens=True,
            gen_ms=gen_ms,
            meta=meta,
        )


class _Sampler:
    """Samples a batch; one vectorised draw when all rows share their settings.

    Rows with their own seed or settings (requests of different episodes
    merged by the batching front) are drawn one by one, each with its own
    generator, so a seeded request gives the same tokens alone or in a batch.
    """

    def __init__(self, params: list[SamplingParams]) -> None:
        import torch

        def make(seed: int | None) -> Any:
            return torch.Generator().manual_seed(
                seed if seed is not None else int(torch.randint(0, 2**62, (1,)))
            )

        self.params = params
        self.shared = all(p == params[0] for p in params) and params[0].seed is None
        self.generators = [make(None)] if self.shared else [make(p.seed) for p in params]

    def __call__(self, logits: Any) -> tuple[Any, Any]:

        if self.shared:
            return sample_next(logits, self.params[0], self.generators[0])
        return sample_rows(logits, self.params, self.generators)
