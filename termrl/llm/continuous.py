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

The prompt is prefilled by the transformers model; the decode steps run
``termrl.llm.decode_step``: a static KV cache with one slot per row (row i's
tokens at columns 0..len-1 of slot i, written in place), fused weights and
one function per step, bound by memory rather than by Python. Each request
has its own ``torch.Generator`` (seeded when its params carry a seed), so a
seeded request samples the same tokens whatever else runs beside it; the
softmax and top-k/top-p run once for the rows that share their settings.

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

from termrl.errors import ModelError, UnsupportedModel
from termrl.llm.decode_step import SlotDecoder
from termrl.llm.engine import (
    FinishReason,
    Generation,
    ParamsArg,
    Prompt,
    SamplingParams,
    TurnEnd,
    per_prompt_params,
    prompt_token_ids,
)
from termrl.llm.hf_engine import TransformersEngine, sample_rows
from termrl.llm.prefix_cache import PrefixCache

__all__ = ["ContinuousEngine"]


@dataclass
class _Request:
    prompt: list[int]
    params: SamplingParams
    turn_end: TurnEnd
    """Why the response ends (its budget: max_new_tokens, clamped to the context window)."""
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

    A request's prompt is prefilled from its longest cached prefix by the decode step's kernels
    (``SlotDecoder.prefill``), or by the transformers model where they cannot run.

    ``max_batch_size`` caps the running batch; more requests wait their turn.
    ``prefix_cache_tokens`` caps the KV kept for reuse (SmolLM2-135M: 46 kB
    per token in fp32, so the default 32k tokens hold ~1.5 GB).
    ``weights_dtype`` is the decode step's weight type (``decode_step.WEIGHTS_DTYPES``; ``auto``
    is bfloat16 where the CPU has bf16 units: half the bytes a step reads, its log μ ~0.01 nats
    a chunk from the trainer's fp32 π; the decode KV cache takes the weights' type) and
    ``compile_decode`` runs the step through
    ``torch.compile``.
    """

    name = "transformers-continuous"
    merges_requests = True

    def __init__(
        self,
        model_path: Any,
        *,
        prefix_cache_tokens: int = 32768,
        weights_dtype: str = "auto",
        compile_decode: bool = False,
        **options: Any,
    ) -> None:
        super().__init__(model_path, **options)
        try:
            self.decoder = SlotDecoder(
                self.model,
                max_rows=self.max_batch_size,
                max_length=self.context_window,
                weights_dtype=weights_dtype,
                compile=compile_decode,
            )
        except ValueError as exc:
            raise UnsupportedModel(
                f"the continuous engine cannot serve {model_path}: {exc}"
            ) from exc
        self.prefix_cache = PrefixCache(prefix_cache_tokens)
        self._waiting: deque[_Request] = deque()
        self._wake = threading.Condition()
        self._closing = False
        self._thread: threading.Thread | None = None
        # The running batch; only the scheduler thread touches these.
        self._rows: list[_Row] = []  # row i's KV is in the decoder's slot i
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
            budget = min(p.max_new_tokens, self.context_window - len(prompt))
            requests.append(
                _Request(
                    prompt,
                    p,
                    TurnEnd(p, self.tokenizer, self.eos_ids, budget),
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
        self._rows, self._logits = [], None
        self.decoder.release()

    def _admit(self, request: _Request) -> None:
        """Prefill one prompt from its longest cached prefix and add it to the running batch."""
        import torch

        started = time.perf_counter()
        prompt = request.prompt
        reused, past = self.prefix_cache.match(prompt)
        slot = len(self._rows)
        if self.decoder.can_prefill:  # in the decode step's kernels, into the row's own slot
            if past:
                self.decoder.load_row(slot, past)
            new = torch.tensor(prompt[reused:], device=self.device)
            logits = self.decoder.prefill(slot, new, reused)  # [1, V]
        else:
            logits = self._model_prefill(prompt, reused, past, slot)
        self._logits = logits if not self._rows else torch.cat([self._logits, logits])
        now = time.perf_counter()
        self._rows.append(_Row(request, reused, now, (now - started) * 1000.0, len(prompt)))

    def _model_prefill(self, prompt: list[int], reused: int, past: Any, slot: int) -> Any:
        """The transformers model's prefill, its KV then copied into ``slot``; logits [1, V]."""
        import torch
        from transformers import DynamicCache

        cache = DynamicCache(ddp_cache_data=past) if past else DynamicCache()
        out = self.model(
            input_ids=torch.tensor([prompt[reused:]], device=self.device),
            attention_mask=torch.ones((1, len(prompt)), dtype=torch.long, device=self.device),
            position_ids=torch.arange(reused, len(prompt), device=self.device)[None],
            past_key_values=cache,
            use_cache=True,
            **self._last_logits_only,
        )
        self.decoder.load_row(slot, [(layer.keys, layer.values) for layer in cache.layers])
        return out.logits[:, -1, :]  # [1, V]

    def _step(self) -> None:
        """Sample a token for every row, let finished rows go, one decode step for the rest."""
        import torch

        if not self._rows:
            return
        requests = [row.request for row in self._rows]
        picked, logp = sample_rows(
            self._logits, [r.params for r in requests], [r.generator for r in requests]
        )  # [B], [B]
        finished: list[int] = []
        for i, (row, tok, lp) in enumerate(
            zip(self._rows, picked.tolist(), logp.tolist(), strict=True)
        ):
            if row.request.future.cancelled():  # its episode was given up: free the slot
                finished.append(i)
                continue
            row.tokens.append(tok)
            row.logprobs.append(lp)
            row.finish = row.request.turn_end(row.tokens)
            if row.finish is not None:
                finished.append(i)
        if finished:
            self._release(finished)
        if not self._rows:
            return
        self.step_sizes.append(len(self._rows))
        # Rows may have moved slots in _release: each row feeds its own last token.
        fed = torch.tensor([row.tokens[-1] for row in self._rows], device=self.device)  # [B]
        positions = torch.tensor([row.position for row in self._rows], device=self.device)  # [B]
        self._logits = self.decoder.step(fed, positions)  # [B, V]
        for row in self._rows:
            row.position += 1

    def _release(self, finished: list[int]) -> None:
        """Resolve finished rows, keep their KV for later turns, drop them from the batch.

        The batch stays dense: the last row moves into a leaving row's slot (its KV, its
        logits), so a release copies at most one row per leaving row.
        """
        now = time.perf_counter()
        for i in finished:
            row = self._rows[i]
            if row.request.future.cancelled():
                continue
            fed = row.request.prompt + row.tokens[:-1]  # the last sampled token was never fed
            self.prefix_cache.store(fed, self.decoder.row_kv(i, len(fed)))
            row.request.future.set_result(self._generation(row, now))
        for i in sorted(finished, reverse=True):
            last = len(self._rows) - 1
            if i != last:
                self.decoder.move_row(last, i, self._rows[last].position)
                self._rows[i] = self._rows[last]
                self._logits[i] = self._logits[last]
            self._rows.pop()
        if not self._rows:
            self._logits = None
            self.decoder.release()
            return
        self._logits = self._logits[: len(self._rows)]

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
