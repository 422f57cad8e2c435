"""End-to-end train stage on the tiny model: learning direction, masks in metrics, checkpoints."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from components.train.config import TrainConfig
from components.train.trainer import train
from termrl.artifacts.metrics import read_train_metrics
from termrl.errors import ConfigError

from .conftest import (
    BAD,
    GOOD,
    encode,
    episode_rows,
    model_logprobs,
    prompt_ids,
    toy_chunks,
    write_toy_set,
)


@torch.no_grad()
def action_logprob(model_dir: Path, action: str) -> float:
    """Sum of log p(action tokens | toy prompt) under the model in ``model_dir``."""
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    prompt = prompt_ids(tokenizer)
    return sum(model_logprobs(model, [(prompt, encode(tokenizer, action + "<|im_end|>"))])[0])


def run(traj: Path, model: Path, out: Path, **overrides) -> list[dict]:
    settings = dict(
        trajectories=str(traj),
        model=str(model),
        out=str(out),
        learning_rate=1e-2,
        grad_accum_steps=2,
        epochs=2,
        progress=False,
        save_every_steps=0,
    )
    settings.update(overrides)
    train(TrainConfig(**settings))
    return read_train_metrics(out / "train_metrics.parquet").to_pylist()


@pytest.mark.parametrize("finetune", ["lora", "full"])
def test_full_mode_raises_rewarded_and_lowers_penalised(
    tiny_model_dir, toy_trajectories, tmp_path, finetune
):
    lr = 1e-2 if finetune == "lora" else 3e-3
    rows = run(
        toy_trajectories,
        tiny_model_dir,
        tmp_path / "out",
        mode="full",
        finetune=finetune,
        learning_rate=lr,
    )
    good = action_logprob(tmp_path / "out", GOOD) - action_logprob(tiny_model_dir, GOOD)
    bad = action_logprob(tmp_path / "out", BAD) - action_logprob(tiny_model_dir, BAD)
    assert good > 0.5, good
    assert bad < -0.5, bad
    # 8 episodes, 2 per step, 2 epochs; both signs took part
    assert len(rows) == 8
    assert sum(r["advantage/positive"] for r in rows) == 8
    assert sum(r["advantage/negative"] for r in rows) == 8


def test_positive_only_only_raises(tiny_model_dir, toy_trajectories, tmp_path):
    rows = run(toy_trajectories, tiny_model_dir, tmp_path / "pos", mode="positive-only")
    run(toy_trajectories, tiny_model_dir, tmp_path / "full", mode="full", max_steps=len(rows))
    start_good, start_bad = (
        action_logprob(tiny_model_dir, GOOD),
        action_logprob(tiny_model_dir, BAD),
    )
    good = action_logprob(tmp_path / "pos", GOOD) - start_good
    bad_positive_only = action_logprob(tmp_path / "pos", BAD) - start_bad
    bad_full = action_logprob(tmp_path / "full", BAD) - start_bad
    assert good > 0.5, good
    # negatives were never trained on: no step had one, and BAD was not pushed down the way full mode does
    assert all(r["advantage/negative"] == 0 for r in rows)
    assert all(r["advantage/positive"] > 0 for r in rows)
    assert bad_positive_only > bad_full + 0.5, (bad_positive_only, bad_full)
    # still RL: the same clipped ratio machinery ran (ratios moved off 1 in the second epoch)
    assert any(abs(r["ratio/mean"] - 1) > 1e-3 for r in rows)


def test_masks_are_counted_and_excluded(tiny_model_dir, tmp_path):
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
    chunks = toy_chunks(tokenizer, GOOD)
    mu = model_logprobs(model, chunks)
    shifted = [mu[0], [x - 1.0 for x in mu[1]]]  # chunk 1's μ is 1 nat off: masked whole
    extra = []
    for name, flags in {
        "ph": {"placeholder": True, "masked": True},
        "dr": {"drop": True},
        "mt": {"masked": True, "mask_reason": "max_turns"},
        "un": {"trainable": False},
    }.items():
        extra += episode_rows(
            episode_id=name, group_id="gx", chunks=chunks, logprobs=mu, reward=1.0, **flags
        )
    # a failed episode rollout masked as over long, in a group with a success
    long_chunks = [(chunks[0][0], encode(tokenizer, " ls" * 40))]
    extra += episode_rows(
        episode_id="long",
        group_id="gl",
        chunks=long_chunks,
        logprobs=model_logprobs(model, long_chunks),
        reward=0.0,
        masked=True,
        mask_reason="long_failure",
    )
    extra += episode_rows(episode_id="short", group_id="gl", chunks=chunks, logprobs=mu, reward=1.0)
    extra += episode_rows(
        episode_id="shifted", group_id="gl", chunks=chunks, logprobs=shifted, reward=1.0
    )
    traj = write_toy_set(tmp_path / "t.parquet", tiny_model_dir, groups=1, extra=extra)
    rows = run(traj, tiny_model_dir, tmp_path / "out", mode="full", epochs=1)
    first = rows[0]
    # one naming scheme: the step's identity flat, every metric namespaced (no flat duplicates)
    assert {k for k in first if "/" not in k} == {"step", "mode", "epoch", "objective", "loss"}
    assert first["mask/placeholder"] == 1
    assert first["mask/drop"] == 1
    assert first["mask/max_turns"] == 1
    assert first["mask/untrainable"] == 1
    assert first["mask/long_failure"] == 1
    assert first["data/failed_max_response_tokens"] == len(
        long_chunks[0][1]
    )  # it still counts as a failure
    assert first["mask/mismatch"] == 1
    assert first["mismatch/max"] == pytest.approx(1.0, abs=1e-4)
    # group gl: rewards [0 (long), 1, 1] -> the long failure still sets the baseline, but is not trained;
    # trained: 4 toy episodes + short + shifted = 6 episodes, 2 per step -> 3 steps
    assert len(rows) == 3


def test_checkpoint_loads_as_is(tiny_model_dir, toy_trajectories, tmp_path):
    run(toy_trajectories, tiny_model_dir, tmp_path / "merged", mode="full", max_steps=1)
    merged = AutoModelForCausalLM.from_pretrained(tmp_path / "merged")
    assert merged.config.num_hidden_layers == 2
    # (recomputing activations in backward must not change the update)
    run(
        toy_trajectories,
        tiny_model_dir,
        tmp_path / "adapter",
        mode="full",
        max_steps=1,
        export="adapter",
        gradient_checkpointing=True,
    )
    # transformers loads an adapter folder through peft, finding the base from adapter_config.json
    adapted = AutoModelForCausalLM.from_pretrained(tmp_path / "adapter")
    ids = torch.tensor([[1, 2, 3, 4]])
    with torch.no_grad():
        assert torch.allclose(merged(ids).logits, adapted(ids).logits, atol=1e-5)
    assert (tmp_path / "merged" / "training_state" / "optimizer.pt").is_file()


def test_refuses_to_overwrite_checkpoints(tiny_model_dir, toy_trajectories, tmp_path):
    run(toy_trajectories, tiny_model_dir, tmp_path / "out", max_steps=1)
    with pytest.raises(ConfigError, match="--resume"):
        run(toy_trajectories, tiny_model_dir, tmp_path / "out", max_steps=1)
