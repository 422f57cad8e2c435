"""The shared prompt prefix: same log-probabilities as the full forward, run once, never mutated.

Episodes here look like real ones: one long system prompt, a different user
instruction each, then the response chunks (padded to a common length in the
micro-batch).
"""

from __future__ import annotations

import dataclasses

import pytest
import torch

from components.train.data import load_episodes
from components.train.modeling import collate, load_policy, token_logprobs
from components.train.prefix import (
    MIN_SHARED_PREFIX,
    attending,
    encode_shared_prefix,
    shared_prefix_length,
)
from termrl.artifacts.trajectories import write_trajectories

from .conftest import FINAL, OBSERVATION, encode, episode_rows

SYSTEM = (
    "You are a shell agent working in a Linux container. Run one command per turn with a tool call, "
    "read its output, and say Done. when the task is finished."
)
TASKS = ("List the files in /app.", "Count the lines of /etc/passwd, then print the number twice.")
CPU = torch.device("cpu")


@pytest.fixture(scope="module")
def episodes(tiny_model_dir, tiny_tokenizer, tmp_path_factory):
    rows = []
    for i, task in enumerate(TASKS):
        messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": task}]
        prompt = list(
            tiny_tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
        )
        chunks = [
            (
                prompt,
                encode(tiny_tokenizer, f"<tool_call>ls {'-la ' * i}/app</tool_call><|im_end|>"),
            ),
            (encode(tiny_tokenizer, "\n" + OBSERVATION), encode(tiny_tokenizer, FINAL)),
        ]
        rows += episode_rows(
            episode_id=f"e{i}",
            group_id="g",
            chunks=chunks,
            logprobs=[[-1.0] * len(r) for _, r in chunks],
            reward=float(i),
        )
    path = tmp_path_factory.mktemp("prefix") / "t.parquet"
    write_trajectories(path, rows)
    loaded = load_episodes(path, max_episode_tokens=10_000)
    for e in loaded:
        e.old_logprobs = torch.zeros(e.response_tokens)
        e.chunk_advantages = torch.zeros(e.num_chunks)
        e.chunk_keep = torch.ones(e.num_chunks, dtype=torch.bool)
        e.chunk_imitate = torch.zeros(e.num_chunks, dtype=torch.bool)
    return loaded


def batch_of(episodes):
    return collate(episodes, [torch.zeros(e.num_chunks) for e in episodes], pad_id=0)


def test_prefix_is_the_shared_system_prompt(episodes):
    length = shared_prefix_length(episodes)
    # shared: the system turn and the user header, not the instructions (they differ)
    assert length >= MIN_SHARED_PREFIX
    a, b = (e.input_ids for e in episodes)
    assert torch.equal(a[:length], b[:length]) and a[length] != b[length]
    # one episode alone shares its whole prompt, up to the logit of its first response token
    first_trained = int((episodes[0].token_chunk >= 0).nonzero()[0])
    assert shared_prefix_length(episodes[:1]) == first_trained - 1


@pytest.mark.parametrize("finetune", ["full", "lora"])
def test_same_logprobs_with_and_without_the_prefix(tiny_model_dir, episodes, finetune):
    model = load_policy(
        str(tiny_model_dir),
        finetune=finetune,
        lora_rank=4,
        lora_alpha=8,
        lora_target_modules="all-linear",
    )
    model.train()
    batch = batch_of(episodes)
    assert batch.attention_mask[1].sum() != batch.attention_mask[0].sum()  # padded: lengths differ
    prefix = encode_shared_prefix(model, episodes, CPU, bf16=False)
    assert prefix is not None and prefix.length == shared_prefix_length(episodes)
    full = token_logprobs(model, batch, CPU, bf16=False)
    shared = token_logprobs(model, batch, CPU, bf16=False, prefix=prefix)
    assert torch.allclose(full, shared, atol=1e-5)
    # a second micro-batch reuses the prefix as it was: nothing appended to it
    again = token_logprobs(model, batch_of(episodes[1:]), CPU, bf16=False, prefix=prefix)
    assert all(k.shape[-2] == prefix.length for k, _ in prefix.layers)
    assert torch.allclose(again, full[-again.numel() :], atol=1e-5)


def test_the_prefix_gets_no_gradient(tiny_model_dir, episodes):
    # full fine-tuning: the embedding rows of tokens that occur only in the shared prefix
    # get gradient through the full forward, and none with the prefix run without gradients
    # (the head is untied first, so an embedding row's gradient comes from the input side alone)
    model = load_policy(
        str(tiny_model_dir),
        finetune="full",
        lora_rank=4,
        lora_alpha=8,
        lora_target_modules="all-linear",
    )
    model.lm_head.weight = torch.nn.Parameter(model.lm_head.weight.detach().clone())
    batch = batch_of(episodes)
    prefix = encode_shared_prefix(model, episodes, CPU, bf16=False)
    later = set(torch.cat([e.input_ids[prefix.length :] for e in episodes]).tolist())
    only_prefix = [t for t in set(prefix.ids.tolist()) if t not in later]
    assert only_prefix
    rows = {}
    for name, shared in (("full", None), ("prefix", prefix)):
        model.zero_grad()
        token_logprobs(model, batch, CPU, bf16=False, prefix=shared).sum().backward()
        rows[name] = model.get_input_embeddings().weight.grad[only_prefix].abs().sum().item()
    assert rows["full"] > 0 and rows["prefix"] == 0.0


def test_gradient_checkpointing_sees_the_prefix(tiny_model_dir, episodes):
    # checkpointed layers drop past_key_values and recompute in backward; attending() hands the
    # prefix back both times, so the update equals the one without checkpointing
    model = load_policy(
        str(tiny_model_dir),
        finetune="lora",
        lora_rank=4,
        lora_alpha=8,
        lora_target_modules="all-linear",
    )
    model.train()
    batch = batch_of(episodes)

    def grads():
        model.zero_grad()
        prefix = encode_shared_prefix(model, episodes, CPU, bf16=False)
        with attending(model, prefix):
            logp = token_logprobs(model, batch, CPU, bf16=False, prefix=prefix)
            logp.sum().backward()
        return logp.detach(), [p.grad.clone() for p in model.parameters() if p.requires_grad]

    plain_logp, plain = grads()
    model.gradient_checkpointing_enable()
    model.enable_input_require_grads()
    checkpointed_logp, checkpointed = grads()
    assert torch.allclose(plain_logp, checkpointed_logp, atol=1e-6)
    for a, b in zip(plain, checkpointed, strict=True):
        assert torch.allclose(a, b, atol=1e-6)
    # outside attending() the layers would silently miss the prefix: refused
    prefix = encode_shared_prefix(model, episodes, CPU, bf16=False)
    with pytest.raises(RuntimeError, match="attending"):
        token_logprobs(model, batch, CPU, bf16=False, prefix=prefix)


def test_no_prefix_when_too_little_is_shared(tiny_model_dir, episodes):
    model = load_policy(
        str(tiny_model_dir),
        finetune="full",
        lora_rank=4,
        lora_alpha=8,
        lora_target_modules="all-linear",
    )
    ids = episodes[0].input_ids.clone()
    ids[MIN_SHARED_PREFIX - 2] += 1  # the streams now differ within the first 16 tokens
    differs = [dataclasses.replace(episodes[0], input_ids=ids), episodes[1]]
    assert shared_prefix_length(differs) == MIN_SHARED_PREFIX - 2
    assert encode_shared_prefix(model, differs, CPU, bf16=False) is None
