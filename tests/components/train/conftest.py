"""Toy trajectory artifacts for the train stage, written as real Parquet.

Token ids come from the tiny model's (SmolLM2) tokenizer and chat template;
μ (the inference log-probabilities) is computed with the tiny model itself,
as an fp32 rollout engine would, so the mismatch is ~0 unless a test perturbs it.

The toy task: the user asks to list files. A rewarded episode answers with
``GOOD`` and finishes; a penalised one answers with ``BAD``. Each episode has
two chunks (the action, then a final word after the observation).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from termrl.artifacts.trajectories import write_trajectories

GOOD = "<tool_call>ls -la</tool_call>"
BAD = "<tool_call>rm -rf /tmp/x</tool_call>"
OBSERVATION = "<|im_start|>user\n<output>a.txt b.txt</output><|im_end|>\n<|im_start|>assistant\n"
FINAL = "Done.<|im_end|>"


def prompt_ids(tokenizer: Any, task: str = "List the files in /app.") -> list[int]:
    messages = [
        {"role": "system", "content": "You are a shell agent."},
        {"role": "user", "content": task},
    ]
    return list(tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True))


def encode(tokenizer: Any, text: str) -> list[int]:
    return tokenizer.encode(text, add_special_tokens=False)


@torch.no_grad()
def model_logprobs(model: Any, chunks: list[tuple[list[int], list[int]]]) -> list[list[float]]:
    """log p of every response token under ``model`` (the μ a fp32 engine reports)."""
    ids, spans = [], []
    for prompt, response in chunks:
        ids += prompt
        spans.append((len(ids), len(ids) + len(response)))
        ids += response
    logits = model(torch.tensor([ids])).logits[0].float()
    logp = logits.log_softmax(-1)
    out = []
    for start, end in spans:
        out.append([logp[t - 1, ids[t]].item() for t in range(start, end)])
    return out


def episode_rows(
    *,
    episode_id: str,
    group_id: str,
    chunks: list[tuple[list[int], list[int]]],
    logprobs: list[list[float]],
    reward: float,
    task_id: str = "toy",
    success: bool | None = None,
    **flags: Any,
) -> list[dict[str, Any]]:
    """Rows of one episode; ``flags`` may set masked/mask_reason/drop/placeholder/trainable,
    the 1.1 columns: source, anchor, replayed (a list, one flag per chunk), 1.2's shaping and
    1.3's temperature (default 1.0, the rollout's)."""
    success = reward > 0 if success is None else success
    rows = []
    replayed = flags.get("replayed") or [None] * len(chunks)
    for index, ((prompt, response), lp) in enumerate(zip(chunks, logprobs, strict=True)):
        rows.append(
            {
                "source": flags.get("source"),
                "anchor": flags.get("anchor"),
                "replayed": replayed[index],
                "episode_id": episode_id,
                "group_id": group_id,
                "task_id": task_id,
                "policy_version": 0,
                "chunk_index": index,
                "prompt_ids": prompt,
                "response_ids": response,
                "response_logprobs": lp,
                "reward": reward,
                "shaping": flags.get("shaping"),
                "temperature": flags.get("temperature", 1.0),  # 1.3: as a rollout records it
                "success": success,
                "stop_reason": "done",
                "masked": flags.get("masked", False),
                "mask_reason": flags.get("mask_reason"),
                "drop": flags.get("drop", False),
                "placeholder": flags.get("placeholder", False),
                "trainable": flags.get("trainable", True),
                "num_chunks": len(chunks),
                "episode_tokens": sum(len(p) + len(r) for p, r in chunks),
            }
        )
    return rows


def expert_rows(
    episode_id: str, chunks: list[tuple[list[int], list[int]]], task_id: str = "toy"
) -> list[dict]:
    """A demonstration as the contract writes it: every chunk replayed, μ = 0.0, reward 1."""
    return episode_rows(
        episode_id=episode_id,
        group_id=f"expert:{task_id}",
        task_id=task_id,
        chunks=chunks,
        logprobs=[[0.0] * len(r) for _, r in chunks],
        reward=1.0,
        success=True,
        source="expert",
        replayed=[True] * len(chunks),
        temperature=None,  # nothing sampled
    )


def toy_chunks(tokenizer: Any, action: str) -> list[tuple[list[int], list[int]]]:
    return [
        (prompt_ids(tokenizer), encode(tokenizer, action + "<|im_end|>")),
        (encode(tokenizer, "\n" + OBSERVATION), encode(tokenizer, FINAL)),
    ]


def write_toy_set(
    path: Path,
    model_dir: Path,
    *,
    groups: int = 2,
    per_group: int = 4,
    extra: list[dict] | None = None,
) -> Path:
    """``groups`` groups of ``per_group`` episodes, half GOOD (reward 1), half BAD (reward 0)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    rows: list[dict] = []
    for g in range(groups):
        for i in range(per_group):
            good = i % 2 == 0
            chunks = toy_chunks(tokenizer, GOOD if good else BAD)
            rows += episode_rows(
                episode_id=f"g{g}-e{i}",
                group_id=f"g{g}",
                chunks=chunks,
                logprobs=model_logprobs(model, chunks),
                reward=1.0 if good else 0.0,
            )
    rows += extra or []
    write_trajectories(path, rows)
    return path


@pytest.fixture(scope="session")
def toy_trajectories(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_toy_set(tmp_path_factory.mktemp("traj") / "toy.parquet", tiny_model_dir)
