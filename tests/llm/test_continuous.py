"""Continuous batching: rows join and leave a running batch, later turns reuse their KV."""

from __future__ import annotations

import asyncio
import time

import pytest
import torch

from termrl.llm.continuous import ContinuousEngine
from termrl.llm.engine import SamplingParams
from termrl.llm.hf_engine import TransformersEngine

# The tests that compare tokens with the fp32 model's own forward decode in fp32: bf16 weights
# (``auto`` on a CPU with bf16 units) are close to it, not equal (test_trainer_mismatch.py).
EXACT = "float32"


@pytest.fixture(scope="module")
def recompute(tiny_model_dir) -> TransformersEngine:
    """The whole-batch engine: every prompt prefilled from scratch."""
    return TransformersEngine(tiny_model_dir)


def full_forward_logprobs(
    engine: TransformersEngine, prompt: list[int], response: list[int]
) -> torch.Tensor:
    with torch.no_grad():
        logits = engine.model(torch.tensor([prompt + response])).logits[0, len(prompt) - 1 : -1]
    return torch.log_softmax(logits, -1).gather(-1, torch.tensor(response)[:, None]).squeeze(-1)


@pytest.mark.parametrize(
    "params",
    [
        SamplingParams(max_new_tokens=16, temperature=0, stop=()),
        SamplingParams(max_new_tokens=16, seed=7, top_p=0.95, stop=()),
    ],
)
@pytest.mark.parametrize("prefill", ["kernels", "model"])
async def test_a_cached_kv_turn_equals_a_full_recompute(
    tiny_model_dir, recompute, params, prefill
) -> None:
    engine = ContinuousEngine(tiny_model_dir, weights_dtype=EXACT)
    if prefill == "model":  # the engine's way without the one-call kernels
        engine.decoder.one_call = False
    elif not engine.decoder.can_prefill:
        pytest.skip("no C compiler: the engine prefills through the model")
    first_prompt = list(range(200, 260))
    [first] = await engine.generate([first_prompt], params)
    assert first.meta["reused_tokens"] == 0
    # The next turn: the last prompt and response, then a tool answer.
    second_prompt = first_prompt + first.token_ids + list(range(300, 320))
    [cached] = await engine.generate([second_prompt], params)
    # Everything fed before is reused: the prompt and the response but its last
    # token, which was sampled and never fed.
    assert cached.meta["reused_tokens"] == len(first_prompt) + len(first.token_ids) - 1
    [full] = await recompute.generate([second_prompt], params)
    assert cached.token_ids == full.token_ids
    assert cached.logprobs == pytest.approx(full.logprobs, abs=1e-4)
    expected = full_forward_logprobs(recompute, second_prompt, cached.token_ids)
    # Both params sample at temperature 1 (greedy counts as 1), so μ is the model's softmax.
    assert torch.allclose(torch.tensor(cached.logprobs), expected, atol=1e-4)
    await engine.aclose()


async def test_rows_leave_the_running_batch_when_they_finish(tiny_model_dir, recompute) -> None:
    engine = ContinuousEngine(tiny_model_dir, weights_dtype=EXACT)
    engine.eos_ids = frozenset()  # rows end at their budgets only
    params = [SamplingParams(max_new_tokens=n, seed=n, stop=()) for n in (3, 10, 20)]
    gens = await asyncio.gather(
        *(engine.generate([[1, 2, 3 + n]], p) for n, p in enumerate(params))
    )
    # A row of budget k takes part in k - 1 decode forwards (its last token is not fed), so
    # 2 + 9 + 19 row-forwards in all; rows that stayed until the longest ended would make 3 x 19.
    # How the three share steps depends on when each joined (a loaded machine may start the
    # first step before the others are queued), so only the total is checked.
    assert sum(engine.step_sizes) == 2 + 9 + 19 and max(engine.step_sizes) <= 3
    for n, (p, [gen]) in enumerate(zip(params, gens, strict=True)):
        [alone] = await recompute.generate([[1, 2, 3 + n]], p)
        assert gen.token_ids == alone.token_ids and len(gen.token_ids) == p.max_new_tokens
    await engine.aclose()


async def test_a_request_joins_a_batch_that_is_already_running(tiny_model_dir, recompute) -> None:
    engine = ContinuousEngine(tiny_model_dir, weights_dtype=EXACT)
    engine.eos_ids = frozenset()
    long, short = (
        SamplingParams(max_new_tokens=200, seed=1, stop=()),
        SamplingParams(max_new_tokens=5, seed=2, stop=()),
    )
    [running] = engine.submit([[4, 5, 6]], long)
    deadline = time.monotonic() + 60
    while len(engine.step_sizes) < 3 and time.monotonic() < deadline:  # the long row is decoding
        await asyncio.sleep(0.01)
    [joined] = await engine.generate([list(range(10, 50))], short)
    assert not running.done()  # the short request did not wait for the long one
    assert 2 in engine.step_sizes
    [alone] = await recompute.generate([list(range(10, 50))], short)
    assert joined.token_ids == alone.token_ids
    assert joined.logprobs == pytest.approx(alone.logprobs, abs=1e-4)
    gen = await asyncio.wrap_future(running)
    [alone] = await recompute.generate([[4, 5, 6]], long)
    assert gen.token_ids == alone.token_ids
    await engine.aclose()


async def test_a_cancelled_request_frees_its_row(tiny_model_dir) -> None:
    engine = ContinuousEngine(tiny_model_dir)
    engine.eos_ids = frozenset()
    task = asyncio.ensure_future(
        engine.generate([[7, 8, 9]], SamplingParams(max_new_tokens=10_000, stop=()))
    )
    while not engine.step_sizes:
        await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    [gen] = await engine.generate([[1, 2]], SamplingParams(max_new_tokens=3, stop=()))
    assert len(gen.token_ids) == 3
    assert engine.step_sizes[-2:] == [1, 1]  # the new request ran alone: the cancelled row is gone
    await engine.aclose()


async def test_closing_fails_waiting_requests_and_a_later_call_restarts(tiny_model_dir) -> None:
    engine = ContinuousEngine(tiny_model_dir)
    [gen] = await engine.generate([[1, 2]], SamplingParams(max_new_tokens=2, stop=()))
    await engine.aclose()
    [again] = await engine.generate([[1, 2]], SamplingParams(max_new_tokens=2, stop=()))
    assert len(gen.token_ids) == len(again.token_ids) == 2
    await engine.aclose()
