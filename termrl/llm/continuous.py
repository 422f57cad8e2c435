"""Continuous batching for the transformers engine, with KV reuse across turns.

The batching front (``batching.py``) sends whole batches: every request of a
batch waits for its longest member, and requests that arrive meanwhile wait
for the whole batch. Here one scheduler thread keeps a running batch and
changes it between decode steps:

    generate() ─► waiting ─► admit: prefill the prompt (only its new tokens, see
                              below) and add the row to the running batch
                             step: sample one token per row; finished rows
                              leave (their futures resolve, their KV is kept);
                              one decode forward for the rest
                             repeat while any row is running or waiting

Rows are left-padded in one KV cache (a transformers ``DynamicCache`` whose
layer tensors are cut and padded as rows come and go); each row keeps its
own positions, so padding does not shift it. Each request has its own
``torch.Generator`` (seeded when its params carry a seed), so a seeded
request samples the same tokens whatever else runs beside it.

KV reuse: a finished row's keys and values go into a ``PrefixCache``; a new
prompt that extends a stored sequence (the same episode's next turn, or just
the shared system prompt) is prefilled from the longest stored prefix on.

Why not transformers' own continuous batching (``generate_batch`` /
``ContinuousBatchingManager``, 4.57): it samples every request with one
generation config (no per-request temperature, seed or stop string), draws
from the global RNG, applies top-k/top-p before its softmax and does not
return the log-probabilities of the sampled tokens, and its paged cache has
no prefix reuse; the trainer needs exact ids and log μ per token.

Written for Llama-style models (every layer full attention), which is what
the CPU engine serves.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import deque
from collections.abc import Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

from termrl.errors import ModelError
from termrl.llm.engine import (
    FinishReason,
    Generation,
    ParamsArg,
    Prompt,
    SamplingParams,
    per_prompt_params,
    prompt_token_ids,
)
from termrl.llm.hf_engine import TransformersEngine, sample_next
from termrl.llm.prefix_cache import KV, PrefixCache

__all__ = ["ContinuousEngine"]


@dataclass
class _Request:
    prompt: list[int]
    params: SamplingParams
    budget: int
    """Response tokens allowed: max_new_tokens, clamped to the context window."""
    stop_tail: int
    """Tokens to decode when looking for a stop string at the end of the response."""
    generator: Any
    future: Future[Generation] = field(repr=False)
    queued_at: float = field(default_factory=time.perf_counter)


@dataclass
class _Row:
    """A request in the running batch."""

    request: _Request
    reused: int
    """Prompt tokens whose KV came from the prefix cache."""
    admitted_at: float
    prefill_ms: float
    position: int
    """Position of the next token fed to the model."""
    tokens: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    finish: FinishReason | None = None


class ContinuousEngine(TransformersEngine):
    """The transformers engine with continuous batching and prefix KV reuse.

    ``max_batch_size`` caps the running batch; more requests wait their turn.
    ``prefix_cache_tokens`` caps the KV kept for reuse (SmolLM2-135M: 46 kB
    per token in fp32, so the default 32k tokens hold ~1.5 GB).
    """

    name = "transformers-continuous"
    merges_requests = True

    def __init__(
        self, model_path: Any, *, prefix_cache_tokens: int = 32768, **options: Any
    ) -> None:
        super().__init__(model_path, **options)
        self.prefix_cache = PrefixCache(prefix_cache_tokens)
        self._waiting: deque[_Request] = deque()
        self._wake = threading.Condition()
        self._closing = False
        self._thread: threading.Thread | None = None
        # The running batch; only the scheduler thread touches these.
        self._rows: list[_Row] = []
        self._cache: Any = None  # DynamicCache, [B, H, L, D] per layer
        self._mask: Any = None  # [B, L], 0 on left padding
        self._logits: Any = None  # [B, V], each row's next-token logits
        #: Running-batch sizes at each decode step (tests and benchmarks).
        self.step_sizes: list[int] = []

    async def generate(self, prompts: Sequence[Prompt], params: ParamsArg) -> list[Generation]:
        futures = self.submit(prompts, params)
        return [await asyncio.wrap_future(f) for f in futures]

    def generate_sync(self, prompts: Sequence[Prompt], params: ParamsArg) -> list[Generation]:
        return [f.result() for f in self.submit(prompts, params)]

    def submit(self, prompts: Sequence[Prompt], params: ParamsArg) -> list[Future[Generation]]:
        """Queue the prompts for the running batch; one future per prompt."""
        import torch

        ids = [prompt_token_ids(self.tokenizer, p) for p in prompts]
        requests = []
        for prompt, p in zip(ids, per_prompt_params(params, len(ids)), strict=True):
            if not prompt:
                raise ModelError("an empty prompt cannot be generated from")
            if len(prompt) >= self.context_window:
                raise ModelError(
                    f"prompt of {len(prompt)} tokens leaves no room in a "
                    f"{self.context_window}-token context"
                )
            seed = p.seed if p.seed is not None else int(torch.randint(0, 2**62, (1,)))
            tail = (
                max(
                    (len(self.tokenizer.encode(s, add_special_tokens=False)) for s in p.stop),
                    default=0,
                )
                + 2
            )
            requests.append(
                _Request(
                    prompt,
                    p,
                    min(p.max_new_tokens, self.context_window - len(prompt)),
                    tail,
                    torch.Generator().manual_seed(seed),
                    Future(),
                )
            )
        with self._wake:
            if self._thread is None or not self._thread.is_alive():
                self._closing = False
                self._thread = threading.Thread(
                    target=self._run, name="continuous-batching", daemon=True
                )
                self._thread.start()
            self._waiting.extend(requests)
            self._wake.notify()
        return [r.future for r in requests]

    async def aclose(self) -> None:
        with self._wake:
            self._closing = True
            self._wake.notify()
        if self._thread is not None:
            await asyncio.to_thread(self._thread.join)
            self._thread = None

    # --- the scheduler thread -------------------------------------------------

    def _run(self) -> None:
        import torch

        while True:
            with self._wake:
                while not self._waiting and not self._rows and not self._closing:
                    self._wake.wait()
                if self._closing:
                    self._fail_all(ModelError("the engine was closed"))
                    return
                room = self.max_batch_size - len(self._rows)
                admit = [self._waiting.popleft() for _ in range(min(room, len(self._waiting)))]
            with torch.inference_mode():
                for request in admit:
                    if request.future.cancelled():
                        continue
                    try:
                        self._admit(request)
                    except Exception as exc:  # this request fails, the batch runs on
                        request.future.set_exception(exc)
                try:
                    self._step()
                except Exception as exc:  # every running request must hear about it
                    self._fail_all(exc)

    def _fail_all(self, exc: BaseException) -> None:
        failed = [row.request for row in self._rows] + (
            list(self._waiting) if self._closing else []
        )
        for request in failed:
            if not request.future.done():
                request.future.set_exception(exc)
        self._rows, self._cache, self._mask, self._logits = [], None, None, None

    def _admit(self, request: _Request) -> None:
        """Prefill one prompt from its longest cached prefix and add it to the running batch."""
        import torch
        from transformers import DynamicCache

        started = time.perf_counter()
        prompt = request.prompt
        reused, past = self.prefix_cache.match(prompt)
        cache = DynamicCache(ddp_cache_data=past) if past else DynamicCache()
        out = self.model(
            input_ids=torch.tensor([prompt[reused:]], device=self.device),
            attention_mask=torch.ones((1, len(prompt)), dtype=torch.long, device=self.device),
            position_ids=torch.arange(reused, len(prompt), device=self.device)[None],
            past_key_values=cache,
            use_cache=True,
            **self._last_logits_only,
        )
        logits = out.logits[:, -1, :]  # [1, V]
        mask = torch.ones((1, len(prompt)), dtype=torch.long, device=self.device)  # [1, T]
        if not self._rows:
            self._cache, self._mask, self._logits = cache, mask, logits
        else:
            width = max(self._mask.shape[1], len(prompt))
            for layer, new in zip(self._cache.layers, cache.layers, strict=True):
                layer.keys = torch.cat([_pad_left(layer.keys, width), _pad_left(new.keys, width)])
                layer.values = torch.cat(
                    [_pad_left(layer.values, width), _pad_left(new.values, width)]
                )
            self._mask = torch.cat([_pad_left(self._mask, width), _pad_left(mask, width)])
            self._logits = torch.cat([self._logits, logits])
        now = time.perf_counter()
        self._rows.append(_Row(request, reused, now, (now - started) * 1000.0, len(prompt)))

    def _step(self) -> None:
        """Sample a token for every row, let finished rows go, one decode forward for the rest."""
        import torch

        if not self._rows:
            return
        picked = []
        finished: list[int] = []
        for i, row in enumerate(self._rows):
            request = row.request
            if request.future.cancelled():  # its episode was given up: free the slot
                picked.append(self.pad_id)
                finished.append(i)
                continue
            token, logp = sample_next(
                self._logits[i : i + 1].cpu(), request.params, request.generator
            )
            tok = int(token[0])
            row.tokens.append(tok)
            row.logprobs.append(float(logp[0]))
            picked.append(tok)
            row.finish = self._finish_reason(row)
            if row.finish is not None:
                finished.append(i)
        if finished:
            self._release(finished)
        if not self._rows:
            return
        gone = set(finished)
        keep = [i for i in range(len(picked)) if i not in gone]
        batch = len(self._rows)
        self.step_sizes.append(batch)
        self._mask = torch.cat([self._mask, self._mask.new_ones((batch, 1))], dim=-1)
        out = self.model(
            input_ids=torch.tensor([[picked[i]] for i in keep], device=self.device),  # [B, 1]
            attention_mask=self._mask,
            position_ids=torch.tensor([[row.position] for row in self._rows], device=self.device),
            past_key_values=self._cache,
            use_cache=True,
        )
        self._logits = out.logits[:, -1, :]  # [B, V]
        for row in self._rows:
            row.position += 1

    def _finish_reason(self, row: _Row) -> FinishReason | None:
        request = row.request
        if row.tokens[-1] in self.eos_ids:
            return "eos"
        stop = request.params.stop
        if stop and any(s in self.tokenizer.decode(row.tokens[-request.stop_tail :]) for s in stop):
            return "stop"
        if len(row.tokens) >= request.budget:
            return "length"
        return None

    def _release(self, finished: list[int]) -> None:
        """Resolve finished rows, keep their KV for later turns, drop them from the batch."""
        import torch

        now = time.perf_counter()
        for i in finished:
            row = self._rows[i]
            if row.request.future.cancelled():
                continue
            fed = row.request.prompt + row.tokens[:-1]  # the last sampled token was never fed
            kv: KV = [
                (
                    layer.keys[i : i + 1, :, -len(fed) :].clone(),
                    layer.values[i : i + 1, :, -len(fed) :].clone(),
                )
                for layer in self._cache.layers
            ]
            self.prefix_cache.store(fed, kv)
            row.request.future.set_result(self._generation(row, now))
        gone = set(finished)
        keep = [i for i in range(len(self._rows)) if i not in gone]
        self._rows = [self._rows[i] for i in keep]
        if not keep:
            self._cache, self._mask, self._logits = None, None, None
            return
        index = torch.tensor(keep, device=self.device)
        self._mask = self._mask[index]
        # Columns that are padding for every row left are dropped.
        start = int((self._mask.sum(0) > 0).nonzero()[0])
        self._mask = self._mask[:, start:]
        for layer in self._cache.layers:
            layer.keys = layer.keys[index, :, start:]
            layer.values = layer.values[index, :, start:]
        self._logits = self._logits[index]

    def _generation(self, row: _Row, now: float) -> Generation:
        request, tokens = row.request, row.tokens
        finish = row.finish or "length"
        return Generation(
            # The end-of-turn token is in token_ids but not in the text.
            text=self.tokenizer.decode(tokens[:-1] if finish == "eos" else tokens),
            token_ids=tokens,
            logprobs=row.logprobs,
            finish_reason=finish,
            prompt_ids=request.prompt,
            exact_tokens=True,
            gen_ms=(now - request.queued_at) * 1000.0,
            meta={
                "queue_ms": (row.admitted_at - request.queued_at) * 1000.0 - row.prefill_ms,
                "prefill_ms": row.prefill_ms,
                "decode_ms": (now - row.admitted_at) * 1000.0,
                "reused_tokens": row.reused,
            },
        )


def _pad_left(t: Any, width: int) -> Any:
    """Left-pad dim 2 of a KV tensor [B, H, L, D] (or dim 1 of a mask [B, L]) with zeros to ``width``."""
    import torch

    dim = 2 if t.dim() == 4 else 1
    missing = width - t.shape[dim]
    if missing == 0:
        return t
    shape = list(t.shape)
    shape[dim] = missing
    return torch.cat([t.new_zeros(shape), t], dim=dim)
