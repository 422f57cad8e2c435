"""The CPU engine's log μ against the trainer's log π, per chunk, with the engine's defaults
(``auto``: bfloat16 decode weights where the CPU has bf16 units) and each explicit type.

The trainer masks a chunk whose mean |log π − log μ| exceeds its threshold (0.5 nats), so an
engine that drifted from the trainer's forward would silently lose training data. An episode
of three turns (the later turns reuse the earlier turns' KV) is generated with the default
continuous engine, then the trainer's own ``token_logprobs`` recomputes π over its stream.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from components.train.advantages import chunk_mismatch
from components.train.config import TrainConfig
from components.train.modeling import collate, load_policy, token_logprobs
from termrl.llm.continuous import ContinuousEngine
from termrl.llm.decode_step import resolve_weights_dtype
from termrl.llm.engine import SamplingParams
from termrl.llm.toolcalls import format_tool_responses, system_prompt


def episode_stream(
    engine: ContinuousEngine, turns: int
) -> tuple[list[int], list[int], list[float]]:
    """(token stream, chunk of each token or -1 for prompt tokens, log μ of the response tokens)."""
    tokenizer = engine.tokenizer
    messages = [
        {"role": "system", "content": system_prompt("compact")},
        {"role": "user", "content": "Write the word ant into /app/out.txt."},
    ]
    stream = list(
        tokenizer.apply_chat_template(messages, tokenize=True, add_generation_prompt=True)
    )
    owner = [-1] * len(stream)
    mu: list[float] = []
    for turn in range(turns):
        params = SamplingParams(max_new_tokens=24, seed=turn, top_p=0.95)
        [gen] = engine.generate_sync([stream], params)
        stream += gen.token_ids
        owner += [turn] * len(gen.token_ids)
        mu += gen.logprobs
        answer = tokenizer.encode(
            "<|im_end|>\n<|im_start|>user\n" + format_tool_responses(["out.txt\n[exit 0]"]),
            add_special_tokens=False,
        )
        stream += answer + tokenizer.encode(
            "<|im_end|>\n<|im_start|>assistant\n", add_special_tokens=False
        )
        owner += [-1] * (len(stream) - len(owner))
    return stream, owner, mu


@pytest.mark.parametrize("weights_dtype", ["auto", "float32", "bfloat16"])
def test_engine_logprobs_match_the_trainers_per_chunk(tiny_model_dir, weights_dtype) -> None:
    engine = ContinuousEngine(tiny_model_dir, weights_dtype=weights_dtype)
    assert engine.decoder.weights_dtype == getattr(torch, resolve_weights_dtype(weights_dtype))
    turns = 3
    stream, owner, mu = episode_stream(engine, turns)
    assert engine.prefix_cache.hits >= turns - 1  # later turns decoded on reused KV
    chunk = torch.tensor(owner)  # [T]
    episode = SimpleNamespace(
        input_ids=torch.tensor(stream),
        token_chunk=chunk,
        old_logprobs=torch.tensor(mu),
        chunk_advantages=torch.zeros(turns),
        chunk_keep=torch.ones(turns, dtype=torch.bool),
        chunk_imitate=torch.zeros(turns, dtype=torch.bool),
        reward=0.0,
        num_chunks=turns,
    )
    batch = collate([episode], [torch.zeros(turns)], pad_id=engine.pad_id)
    policy = load_policy(
        str(tiny_model_dir),
        finetune="full",
        lora_rank=4,
        lora_alpha=8,
        lora_target_modules="all-linear",
    )
    with torch.no_grad():
        pi = token_logprobs(policy, batch, torch.device("cpu"), bf16=False)  # [N]
    mismatch = chunk_mismatch(pi, torch.tensor(mu), batch.token_chunk, turns)  # [K]
    assert mismatch.shape == (turns,)
    if resolve_weights_dtype(weights_dtype) == "float32":  # the same model, another kernel order
        assert float(mismatch.max()) < 1e-4, mismatch
    else:  # narrower weights drift, but far less than the trainer masks
        assert float(mismatch.max()) < TrainConfig.mismatch_threshold / 10, mismatch
