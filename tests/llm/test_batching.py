"""The batching front merges concurrent requests into batched engine calls."""

from __future__ import annotations

import asyncio

import pytest

from termrl.llm.batching import BatchingEngine
from termrl.llm.engine import SamplingParams
from termrl.llm.hf_engine import TransformersEngine


async def test_concurrent_requests_become_one_batch_with_the_same_results(tiny_model_dir) -> None:
    inner = TransformersEngine(tiny_model_dir)
    batcher = BatchingEngine(inner, max_batch_size=8, max_wait_sec=0.05)
    greedy = SamplingParams(max_new_tokens=6, temperature=0)
    prompts = [[1, 2, 3 + i] for i in range(6)]
    results = await asyncio.gather(*(batcher.generate([p], greedy) for p in prompts))
    assert batcher.batch_sizes == [6]
    for prompt, [gen] in zip(prompts, results, strict=True):
        [direct] = await inner.generate([prompt], greedy)
        assert gen.token_ids == direct.token_ids and gen.prompt_ids == prompt
    await batcher.aclose()


async def test_requests_keep_their_own_params_in_a_shared_capped_batch(tiny_model_dir) -> None:
    inner = TransformersEngine(tiny_model_dir)
    batcher = BatchingEngine(inner, max_batch_size=3, max_wait_sec=0.05)
    params = [SamplingParams(max_new_tokens=2 + i, seed=i) for i in range(5)]
    results = await asyncio.gather(*(batcher.generate([[1, 2, 3]], p) for p in params))
    assert batcher.batch_sizes == [3, 2]
    for p, [gen] in zip(params, results, strict=True):
        # A seeded request samples the same tokens batched as alone.
        [alone] = await inner.generate([[1, 2, 3]], p)
        assert len(gen.token_ids) == p.max_new_tokens and gen.token_ids == alone.token_ids
    await batcher.aclose()


async def test_an_engine_failure_reaches_every_waiter(tiny_model_dir) -> None:
    batcher = BatchingEngine(
        TransformersEngine(tiny_model_dir, context_window=10), max_wait_sec=0.02
    )
    results = await asyncio.gather(
        *(batcher.generate([list(range(1, 20))], SamplingParams()) for _ in range(3)),
        return_exceptions=True,
    )
    assert all(isinstance(r, Exception) and "no room" in str(r) for r in results)
    # The worker survives the failure.
    [ok] = await batcher.generate([[1, 2]], SamplingParams(max_new_tokens=2))
    assert len(ok.token_ids) == 2
    await batcher.aclose()


@pytest.mark.parametrize("round_", [1, 2])
async def test_a_batcher_works_across_event_loops(tiny_model_dir, round_) -> None:
    # Module-level engines are reused by tests that each run their own loop.
    batcher = _shared(tiny_model_dir)
    [gen] = await batcher.generate([[1, 2, round_]], SamplingParams(max_new_tokens=2))
    assert len(gen.token_ids) == 2


_SHARED: dict[str, BatchingEngine] = {}


def _shared(path) -> BatchingEngine:
    return _SHARED.setdefault(str(path), BatchingEngine(TransformersEngine(path)))
