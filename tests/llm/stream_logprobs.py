"""μ as a rollout recorded it against log π recomputed over the episode's own token stream.

An episode's stream is each chunk's prompt delta followed by its response, in chunk order:
what the policy saw. The trainer recomputes π over that stream and masks chunks whose mean
|log π − log μ| passes its threshold; the tests of engines that record μ check it here.
"""

from __future__ import annotations

from typing import Any

import torch

from components.train.advantages import chunk_mismatch


def episode_logprobs(model: Any, chunks: list[dict]) -> tuple[list[float], list[float], list[int]]:
    """(μ recorded, log π of ``model`` over the stream, the chunk of each response token).

    ``chunks`` are trajectory rows (or the same keys) in chunk order: prompt_ids,
    response_ids, response_logprobs.
    """
    stream: list[int] = []
    mu: list[float] = []
    pi: list[float] = []
    owner: list[int] = []
    for k, chunk in enumerate(chunks):
        stream += chunk["prompt_ids"]
        response = chunk["response_ids"]
        with torch.no_grad():
            logits = model(torch.tensor([stream + response])).logits[0, len(stream) - 1 : -1]
        logp = torch.log_softmax(logits.float(), -1).gather(-1, torch.tensor(response)[:, None])
        pi += logp.squeeze(-1).tolist()
        mu += chunk["response_logprobs"]
        owner += [k] * len(response)
        stream += response
    return mu, pi, owner


def per_chunk_mismatch(model: Any, chunks: list[dict]) -> torch.Tensor:
    """The trainer's mismatch of each chunk: mean |log π − log μ| over its tokens -> [K] nats."""
    mu, pi, owner = episode_logprobs(model, chunks)
    return chunk_mismatch(torch.tensor(pi), torch.tensor(mu), torch.tensor(owner), len(chunks))
