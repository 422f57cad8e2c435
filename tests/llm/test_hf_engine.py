"""The transformers engines on the tiny model: batching, stops, logprobs, seeds.

Every test runs on the whole-batch engine and on its continuous-batching
subclass: both promise the same rows when the continuous engine decodes in
float32 (its bf16 weights are close, not equal: test_trainer_mismatch.py).
"""

from __future__ import annotations

import pytest
import torch

from termrl.errors import ModelError
from termrl.llm.continuous import ContinuousEngine
from termrl.llm.engine import SamplingParams, prompt_token_ids
from termrl.llm.hf_engine import TransformersEngine, _draw, sample_next, sample_rows


@pytest.fixture(scope="module", params=[TransformersEngine, ContinuousEngine])
def engine(request, tiny_model_dir) -> TransformersEngine:
    if request.param is ContinuousEngine:
        return ContinuousEngine(tiny_model_dir, weights_dtype="float32")
    return request.param(tiny_model_dir)


def full_forward_logprobs(engine: TransformersEngine, prompt: list[int], response: list[int]):
    with torch.no_grad():
        logits = engine.model(torch.tensor([prompt + response])).logits[0, len(prompt) - 1 : -1]
    return torch.log_softmax(logits, -1).gather(-1, torch.tensor(response)[:, None]).squeeze(-1)


async def test_logprobs_match_a_full_forward_pass(engine) -> None:
    prompt = [{"role": "user", "content": "list the files"}]
    [gen] = await engine.generate([prompt], SamplingParams(max_new_tokens=16, seed=1))
    assert gen.prompt_ids == prompt_token_ids(engine.tokenizer, prompt)
    assert len(gen.token_ids) == len(gen.logprobs) == 16 and gen.finish_reason == "length"
    expected = full_forward_logprobs(engine, gen.prompt_ids, gen.token_ids)
    assert torch.allclose(torch.tensor(gen.logprobs), expected, atol=1e-4)
    assert gen.text == engine.tokenizer.decode(gen.token_ids)


async def test_left_padded_batch_equals_single_greedy_runs(engine) -> None:
    prompts = [[1, 2, 3], list(range(100, 140)), [{"role": "user", "content": "hi"}]]
    greedy = SamplingParams(max_new_tokens=12, temperature=0)
    batched = await engine.generate(prompts, greedy)
    for prompt, gen in zip(prompts, batched, strict=True):
        [single] = await engine.generate([prompt], greedy)
        assert gen.token_ids == single.token_ids
        assert gen.logprobs == pytest.approx(single.logprobs, abs=1e-4)


async def test_a_seed_makes_sampling_reproducible(engine) -> None:
    params = SamplingParams(max_new_tokens=10, seed=5, top_p=0.9, top_k=50)
    a = await engine.generate([[5, 6, 7]] * 2, params)
    b = await engine.generate([[5, 6, 7]] * 2, params)
    assert [g.token_ids for g in a] == [g.token_ids for g in b]


async def test_stop_strings_and_eos_end_a_row(engine) -> None:
    # A seeded sample is replayed exactly until the row stops, so stopping on
    # the text of the first sampled token must end the row right after it.
    [probe] = await engine.generate([[1, 2, 3]], SamplingParams(max_new_tokens=8, seed=3))
    first_piece = engine.tokenizer.decode(probe.token_ids[:1])
    [gen] = await engine.generate(
        [[1, 2, 3]], SamplingParams(max_new_tokens=20, seed=3, stop=(first_piece,))
    )
    assert gen.finish_reason == "stop" and gen.token_ids == probe.token_ids[:1]
    # Declare the first token that differs from the first one an end-of-turn token.
    k = next(i for i, t in enumerate(probe.token_ids) if t != probe.token_ids[0])
    engine.eos_ids = frozenset({probe.token_ids[k]})
    try:
        [gen] = await engine.generate(
            [[1, 2, 3]], SamplingParams(max_new_tokens=20, seed=3, stop=())
        )
    finally:
        engine.eos_ids = frozenset({engine.tokenizer.eos_token_id})
    assert gen.finish_reason == "eos" and gen.token_ids == probe.token_ids[: k + 1]
    assert gen.text == engine.tokenizer.decode(probe.token_ids[:k])  # eos not in the text


@pytest.mark.parametrize("kind", [TransformersEngine, ContinuousEngine])
async def test_budget_is_clamped_to_the_context_window(tiny_model_dir, kind) -> None:
    engine = kind(tiny_model_dir, context_window=40)
    [gen] = await engine.generate([list(range(1, 31))], SamplingParams(max_new_tokens=100))
    assert len(gen.token_ids) == 10 and gen.finish_reason == "length"
    with pytest.raises(ModelError, match="no room"):
        await engine.generate([list(range(1, 41))], SamplingParams())


def test_top_k_one_is_greedy_and_logprob_is_of_the_untruncated_distribution() -> None:
    logits = torch.tensor([[0.0, 2.0, 1.0], [3.0, 0.0, 0.0]])
    gen = torch.Generator().manual_seed(0)
    tokens, logp = sample_next(logits, SamplingParams(top_k=1), gen)
    assert tokens.tolist() == [1, 0]
    # log softmax([0, 2, 1])[1] = 2 - log(e^0 + e^2 + e^1) = 2 - 2.4076 = -0.4076
    assert logp[0].item() == pytest.approx(-0.40761, abs=1e-4)


def test_top_p_keeps_only_the_nucleus() -> None:
    # probs ≈ [0.665, 0.245, 0.090]; top_p 0.5 keeps only token 0
    logits = torch.tensor([[2.0, 1.0, 0.0]]).repeat(64, 1)
    tokens, _ = sample_next(logits, SamplingParams(top_p=0.5), torch.Generator().manual_seed(0))
    assert set(tokens.tolist()) == {0}
    tokens, _ = sample_next(logits, SamplingParams(top_p=0.8), torch.Generator().manual_seed(0))
    assert set(tokens.tolist()) == {0, 1}


def test_draws_follow_the_distribution_and_never_pick_a_token_without_mass() -> None:
    probs = torch.tensor([[0.0, 0.1, 0.0, 0.6, 0.3, 0.0]])
    draws = 100_000
    uniforms = torch.rand(draws, generator=torch.Generator().manual_seed(0))
    picked = _draw(probs.expand(draws, -1), uniforms)
    frequency = torch.bincount(picked, minlength=6).float() / draws
    # Binomial standard error at 100k draws is at most 0.0016: 0.01 is > 6 of them.
    assert torch.allclose(frequency, probs[0], atol=0.01)
    assert frequency[[0, 2, 5]].sum() == 0
    # The edges: a draw of 0 takes the first token with mass; one that rounds up to the
    # total takes the last token with mass, not one past the end or a zero-mass tail.
    assert _draw(probs, torch.tensor([0.0])).tolist() == [1]
    assert _draw(probs, torch.tensor([1.0])).tolist() == [4]


def test_a_seeded_row_samples_the_same_tokens_whatever_else_is_in_the_batch() -> None:
    logits = torch.randn(3, 500, generator=torch.Generator().manual_seed(1))
    params = [SamplingParams(temperature=1.0)] * 3

    def run(rows: list[int]) -> list[list[int]]:
        gens = {r: torch.Generator().manual_seed(100 + r) for r in rows}
        out: dict[int, list[int]] = {r: [] for r in rows}
        for _ in range(20):
            tokens, _ = sample_rows(logits[rows], params[: len(rows)], [gens[r] for r in rows])
            for r, t in zip(rows, tokens.tolist(), strict=True):
                out[r].append(t)
        return [out[r] for r in rows]

    alone, batched = run([1]), run([0, 1, 2])
    assert alone[0] == batched[1]
    assert len(set(batched[0] + batched[1] + batched[2])) > 20  # they do sample


def test_a_missing_model_is_a_model_error(tmp_path) -> None:
    with pytest.raises(ModelError):
        TransformersEngine(tmp_path)
