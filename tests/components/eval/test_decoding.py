"""Eval decodes greedily by default, and the setting reaches the engine (the tiny model, no mock)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from components.eval.agents import PolicyAgent
from components.eval.config import EvalConfig
from termrl.llm.engine import prompt_token_ids

PROMPT = [{"role": "user", "content": "Write hello into /app/hello.txt."}]


def test_policy_agent_decodes_greedily_by_default(tiny_model_dir: Path) -> None:
    import torch

    from termrl.llm.hf_engine import TransformersEngine

    engine = TransformersEngine(tiny_model_dir)
    config = EvalConfig(agent="policy", model=str(tiny_model_dir), max_new_tokens=12)
    assert (config.temperature, config.seed) == (0.0, None)
    sampling = [
        PolicyAgent(engine, config).agent_config(trial, 60.0).sampling for trial in range(2)
    ]
    assert [(p.temperature, p.seed, p.max_new_tokens) for p in sampling] == [(0.0, None, 12)] * 2

    # Greedy takes the most likely token: the model's own argmax on the prompt.
    ids = prompt_token_ids(engine.tokenizer, PROMPT)
    with torch.no_grad():
        expected = int(engine.model(torch.tensor([ids])).logits[0, -1].argmax())
    [first] = engine.generate_sync([PROMPT], dataclasses.replace(sampling[0], max_new_tokens=1))
    assert first.token_ids == [expected]

    # Trials, seeds and batching do not change a greedy response.
    seeded = PolicyAgent(engine, dataclasses.replace(config, seed=7))
    seeded_sampling = [seeded.agent_config(trial, 60.0).sampling for trial in range(2)]
    assert [p.seed for p in seeded_sampling] == [7, 8]
    alone = engine.generate_sync([PROMPT], sampling[0])[0].token_ids
    batched = engine.generate_sync([PROMPT, PROMPT], seeded_sampling)
    assert [g.token_ids for g in batched] == [alone, alone]
    assert alone[0] == expected

    # The knob is live: sampling at temperature 1 with two seeds draws two different responses.
    hot = [dataclasses.replace(p, temperature=1.0) for p in seeded_sampling]
    drawn = engine.generate_sync([PROMPT, PROMPT], hot)
    assert drawn[0].token_ids != drawn[1].token_ids


def test_eval_serves_the_policy_on_the_continuous_engine_with_the_same_greedy_tokens(
    tiny_model_dir: Path,
) -> None:
    """Eval's default engine is rollout's (continuous batching, KV reuse across turns); a
    greedy response is the one the whole-batch engine gives, and a bad name is refused."""
    import asyncio

    import pytest

    from components.eval.agents import open_engine
    from termrl.errors import ConfigError
    from termrl.llm.continuous import ContinuousEngine
    from termrl.llm.engine import SamplingParams

    greedy = SamplingParams(temperature=0.0, max_new_tokens=10)
    responses = {}
    for name in ("continuous", "batching"):
        # eval decodes in float32 by default: the two engines agree token for token
        config = EvalConfig(agent="policy", model=str(tiny_model_dir), engine=name)
        engine = open_engine(config)
        assert isinstance(engine, ContinuousEngine) == (name == "continuous")
        try:
            responses[name] = asyncio.run(engine.generate([PROMPT, PROMPT], greedy))
        finally:
            asyncio.run(engine.aclose())
    assert [g.token_ids for g in responses["continuous"]] == [
        g.token_ids for g in responses["batching"]
    ]
    with pytest.raises(ConfigError, match="engine must be one of"):
        EvalConfig(agent="policy", engine="nope", tasks="t.parquet", out="o.parquet").validate()
    with pytest.raises(ConfigError, match="weights_dtype must be one of"):
        EvalConfig(agent="policy", weights_dtype="fp16", tasks="t", out="o.parquet").validate()
