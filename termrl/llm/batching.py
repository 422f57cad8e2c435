"""The asynchronous batching front: many episodes, one batched generate.

Rollout runs dozens of episodes as coroutines; each asks for one response at
a time. Sent one by one, a CPU engine would run at single-stream speed
(~10 tok/s for SmolLM2 here); batched, it runs 4–8× faster. ``BatchingEngine``
queues single requests and a worker task turns whatever has queued up into
one ``generate`` call, each request keeping its own ``SamplingParams``:

    episode ─┐                               ┌─► future ─► episode
    episode ─┼─► queue ─► worker ─► engine.generate([p1, p2, ...], params)
    episode ─┘     (waits max_wait_sec after the first request, takes ≤ max_batch_size)

While the engine is busy, new requests pile up and form the next batch, so
throughput adapts to load without tuning.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from termrl.llm.engine import (
    Engine,
    Generation,
    ParamsArg,
    Prompt,
    SamplingParams,
    per_prompt_params,
)

__all__ = ["BatchingEngine"]


@dataclass
class _Request:
    prompt: Prompt
    params: SamplingParams
    future: asyncio.Future[Generation] = field(repr=False)
    queued_at: float = field(default_factory=time.perf_counter)


class BatchingEngine(Engine):
    """Wrap an engine so that concurrent ``generate`` calls are merged into batches."""

    merges_requests = True

    def __init__(
        self,
        engine: Engine,
        *,
        max_batch_size: int = 32,
        max_wait_sec: float = 0.01,
        owns_engine: bool = True,
    ):
        self.engine = engine
        self.owns_engine = owns_engine  # False: closing the front leaves ``engine`` open
        self.name = f"batching({engine.name})"
        self.accepts_token_ids = engine.accepts_token_ids
        self.tokenizer = engine.tokenizer
        self.context_window = engine.context_window
        self.model_name = engine.model_name
        self.max_batch_size = max_batch_size
        self.max_wait_sec = max_wait_sec
        self._queue: asyncio.Queue[_Request] | None = None
        self._worker: asyncio.Task[None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        #: Sizes of the batches sent to the engine (for tests and metrics).
        self.batch_sizes: list[int] = []

    def _ensure_worker(self) -> asyncio.Queue[_Request]:
        loop = asyncio.get_running_loop()
        # A worker belongs to one event loop; a new loop (a new test, a new
        # asyncio.run) needs its own.
        if (
            self._queue is None
            or self._worker is None
            or self._worker.done()
            or self._loop is not loop
        ):
            self._queue = asyncio.Queue()
            self._worker = loop.create_task(self._run(self._queue))
            self._loop = loop
        return self._queue

    async def generate(self, prompts: Sequence[Prompt], params: ParamsArg) -> list[Generation]:
        queue = self._ensure_worker()
        loop = asyncio.get_running_loop()
        per_row = per_prompt_params(params, len(prompts))
        requests = [
            _Request(p, sp, loop.create_future()) for p, sp in zip(prompts, per_row, strict=True)
        ]
        for request in requests:
            queue.put_nowait(request)
        return list(await asyncio.gather(*(r.future for r in requests)))

    async def _run(self, queue: asyncio.Queue[_Request]) -> None:
        while True:
            pending = [await queue.get()]
            if self.max_wait_sec > 0:
                await asyncio.sleep(self.max_wait_sec)
            while len(pending) < self.max_batch_size and not queue.empty():
                pending.append(queue.get_nowait())
            group = [r for r in pending if not r.future.cancelled()]
            if not group:
                continue
            self.batch_sizes.append(len(group))
            sent = time.perf_counter()
            try:
                results = await self.engine.generate(
                    [r.prompt for r in group], [r.params for r in group]
                )
            except Exception as exc:  # every waiter must hear about the failure
                for request in group:
                    if not request.future.done():
                        request.future.set_exception(exc)
                continue
            for request, result in zip(group, results, strict=True):
                if not request.future.done():
                    result.meta["queue_ms"] = (sent - request.queued_at) * 1000.0
                    request.future.set_result(result)

    async def aclose(self) -> None:
        if self._worker is not None:
            self._worker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._worker
            self._worker = None
        if self.owns_engine:
            await self.engine.aclose()
