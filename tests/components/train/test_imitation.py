"""Demonstrations and anchored episodes: RL only on sampled chunks, imitation on expert chunks.

The first tests run the data path (artifact -> episodes -> chunk masks ->
micro-batch -> loss) with hand-set log-probabilities; the rest train the tiny
model end to end.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from components.train.advantages import token_normalisation
from components.train.config import TrainConfig
from components.train.data import load_episodes
from components.train.loss import ipa_loss, token_level_loss
from components.train.modeling import collate, init_distributed
from components.train.trainer import apply_mismatch_mask, prepare_episodes, set_up
from termrl.artifacts.trajectories import write_trajectories

from .conftest import (
    BAD,
    GOOD,
    encode,
    episode_rows,
    expert_rows,
    model_logprobs,
    prompt_ids,
    toy_chunks,
    write_toy_set,
)
from .test_trainer import run


def three_chunks(offset: int = 0) -> list[tuple[list[int], list[int]]]:
    return [([1, 2], [10 + offset, 11]), ([3], [12, 13, 14]), ([4], [15])]


def load(tmp_path: Path, data: list[dict], **config) -> list:
    write_trajectories(tmp_path / "t.parquet", data)
    episodes = load_episodes(tmp_path / "t.parquet", max_episode_tokens=100)
    prepare_episodes(episodes, TrainConfig(**config))
    return episodes


def test_replayed_chunks_get_no_rl_loss(tmp_path):
    # a group of two episodes resampled from anchor 2 of a demonstration: chunk 1 (1-based) replayed
    data = []
    for name, reward in (("win", 1.0), ("lose", 0.0)):
        data += episode_rows(
            episode_id=name,
            group_id="g",
            chunks=three_chunks(),
            anchor=2,
            replayed=[True, False, False],
            reward=reward,
            logprobs=[[0.0, 0.0], [-1.0] * 3, [-1.0]],
        )  # the replay's μ: 0.0
    episodes = load(tmp_path, data, mode="full")
    for e in episodes:
        assert e.chunk_keep.tolist() == [
            False,
            True,
            True,
        ]  # advantage ±1 on the sampled chunks only
        assert not e.chunk_imitate.any()
        e.old_logprobs = torch.full((e.response_tokens,), -1.0)
    # π_old = −1 everywhere: the replayed chunk's μ of 0.0 would be 1 nat off, but it has no μ
    stats = apply_mismatch_mask(episodes, threshold=0.5)
    assert stats["mask/mismatch"] == 0 and stats["mismatch/max"] == pytest.approx(0.0)
    weights = token_normalisation(
        torch.cat([e.chunk_tokens for e in episodes]),
        torch.cat([e.chunk_keep for e in episodes]),
        torch.zeros(6, dtype=torch.long),
    )
    batch = collate(episodes, list(weights.split(3)), pad_id=0)
    replayed = batch.token_chunk % 3 == 0  # [N] chunk 0 of each episode

    for loss_fn in (ipa_loss, token_level_loss):

        def loss_at(logp, loss_fn=loss_fn):
            loss, _ = loss_fn(
                logp,
                batch.old_logp,
                batch.token_chunk,
                batch.advantages,
                batch.loss_mask,
                normalisation=batch.normalisation,
                eps_low=0.2,
                eps_high=0.2,
            )
            return loss

        base = (batch.old_logp + 0.05).requires_grad_()
        moved = torch.where(
            replayed, batch.old_logp + 3.0, base.detach()
        )  # the replay made far likelier
        loss_at(base).backward()
        # the sampled chunks push (both signs), the replayed ones get exactly nothing
        assert base.grad[~replayed].abs().min() > 0
        assert base.grad[replayed].tolist() == [0.0] * int(replayed.sum())
        assert loss_at(moved).item() == pytest.approx(loss_at(base.detach()).item())


def test_demonstrations_stay_out_of_group_advantages_and_rl(tmp_path):
    # a demonstration filed under the policy's group must not move its baseline:
    # policy rewards [1, 0] -> advantages ±1 (with the demonstration's 1 counted they would not be)
    data = (
        episode_rows(
            episode_id="p1",
            group_id="g",
            chunks=three_chunks(),
            logprobs=[[-1.0] * 2, [-1.0] * 3, [-1.0]],
            reward=1.0,
        )
        + episode_rows(
            episode_id="p2",
            group_id="g",
            chunks=three_chunks(1),
            logprobs=[[-1.0] * 2, [-1.0] * 3, [-1.0]],
            reward=0.0,
        )
        + [dict(row, group_id="g") for row in expert_rows("x", three_chunks(2))]
    )
    by_id = {e.episode_id: e for e in load(tmp_path, data, mode="full")}
    assert by_id["p1"].advantage == pytest.approx(1.0, abs=1e-5)
    assert by_id["p2"].advantage == pytest.approx(-1.0, abs=1e-5)
    expert = by_id["x"]
    assert expert.advantage == 0.0 and not expert.chunk_keep.any()
    assert expert.chunk_imitate.tolist() == [True, True, True]
    # switching a term off excludes its episodes, with a reason
    by_id = {e.episode_id: e for e in load(tmp_path, data, mode="full", il_weight=0.0)}
    assert by_id["x"].exclusion == "imitation_off" and not by_id["x"].chunk_imitate.any()
    assert by_id["p1"].chunk_keep.all()
    by_id = {e.episode_id: e for e in load(tmp_path, data, mode="full", rl_weight=0.0)}
    assert by_id["p1"].exclusion == by_id["p2"].exclusion == "rl_off"
    assert by_id["x"].chunk_imitate.all()


@torch.no_grad()
def mean_token_logprob(model_dir: Path, action: str) -> float:
    """Mean log p over the action's tokens, after the toy prompt."""
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    [logprobs] = model_logprobs(
        model, [(prompt_ids(tokenizer), encode(tokenizer, action + "<|im_end|>"))]
    )
    return sum(logprobs) / len(logprobs)


def demonstrations(model_dir: Path, count: int) -> list[dict]:
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    rows = []
    for i in range(count):
        rows += expert_rows(f"x{i}", toy_chunks(tokenizer, GOOD), task_id=f"toy{i}")
    return rows


def test_imitation_alone_raises_the_expert_actions(tiny_model_dir, tmp_path):
    traj = tmp_path / "experts.parquet"
    write_trajectories(traj, demonstrations(tiny_model_dir, 4))
    rows = run(
        traj,
        tiny_model_dir,
        tmp_path / "out",
        mode="positive-only",
        finetune="full",
        learning_rate=3e-3,
    )
    gain = mean_token_logprob(tmp_path / "out", GOOD) - mean_token_logprob(tiny_model_dir, GOOD)
    assert gain > 0.3, gain
    # 4 demonstrations, 2 per step, 2 epochs: every step was imitation only and still stepped
    assert len(rows) == 4
    for row in rows:
        assert (
            row["advantage/expert"] == 2
            and row["advantage/positive"] == row["advantage/negative"] == 0
        )
        assert row["loss/rl"] == 0.0 and row["loss/il"] > 0
        assert row["tokens/il_share"] == 1.0 and row["tokens/rl_share"] == 0.0
        assert row["optim/grad_norm"] > 0
    assert rows[0]["data/expert"] == 4


def test_demonstrations_train_when_every_advantage_is_zero(tiny_model_dir, tmp_path):
    # every policy episode failed (equal rewards: advantage 0, nothing for positive-only RL),
    # yet the step still has the demonstrations to imitate
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
    chunks = toy_chunks(tokenizer, BAD)
    failures = []
    for i in range(4):
        failures += episode_rows(
            episode_id=f"f{i}",
            group_id="g",
            chunks=chunks,
            logprobs=model_logprobs(model, chunks),
            reward=0.0,
        )
    traj = tmp_path / "t.parquet"
    write_trajectories(traj, failures + demonstrations(tiny_model_dir, 4))
    rows = run(
        traj,
        tiny_model_dir,
        tmp_path / "out",
        mode="positive-only",
        finetune="full",
        learning_rate=3e-3,
    )
    assert len(rows) == 4 and all(r["loss/il"] > 0 and r["advantage/expert"] == 2 for r in rows)
    assert (
        mean_token_logprob(tmp_path / "out", GOOD) > mean_token_logprob(tiny_model_dir, GOOD) + 0.3
    )


def test_term_weights_mix_and_switch_off(tiny_model_dir, tmp_path):
    policy_only = write_toy_set(tmp_path / "p.parquet", tiny_model_dir)
    experts = demonstrations(tiny_model_dir, 4)
    mixed = write_toy_set(tmp_path / "m.parquet", tiny_model_dir, extra=experts)
    experts_only = tmp_path / "x.parquet"
    write_trajectories(experts_only, experts)
    common = dict(mode="full", epochs=1)

    # il_weight 0: the demonstrations are excluded and the run is the policy-only run
    pure_rl = run(mixed, tiny_model_dir, tmp_path / "rl", il_weight=0.0, **common)
    reference = run(policy_only, tiny_model_dir, tmp_path / "ref-rl", **common)
    assert [r["loss"] for r in pure_rl] == pytest.approx([r["loss"] for r in reference], rel=1e-6)
    assert [r["optim/grad_norm"] for r in pure_rl] == pytest.approx(
        [r["optim/grad_norm"] for r in reference], rel=1e-5
    )
    assert all(r["loss/il"] == 0 and r["mask/imitation_off"] == 4 for r in pure_rl)

    # rl_weight 0: the policy's episodes are excluded and the run is the demonstrations-only run
    pure_il = run(mixed, tiny_model_dir, tmp_path / "il", rl_weight=0.0, **common)
    reference = run(experts_only, tiny_model_dir, tmp_path / "ref-il", **common)
    assert [r["loss"] for r in pure_il] == pytest.approx([r["loss"] for r in reference], rel=1e-6)
    assert all(r["loss/rl"] == 0 and r["mask/rl_off"] == 8 for r in pure_il)

    # both: L = rl_weight · L_RL + λ_IL · L_IL with λ_IL = 2 · 0.5² = 0.5
    both = run(
        mixed,
        tiny_model_dir,
        tmp_path / "both",
        rl_weight=0.5,
        il_weight=2.0,
        il_decay=0.5,
        iteration=2,
        **common,
    )
    assert len(both) == 6  # 8 policy + 4 expert episodes, 2 per step
    for row in both:
        assert row["loss/il_lambda"] == 0.5
        assert row["loss"] == pytest.approx(0.5 * row["loss/rl"] + 0.5 * row["loss/il"], abs=1e-6)
        assert row["tokens/rl_share"] + row["tokens/il_share"] == pytest.approx(1.0)
    assert any(r["tokens/il_share"] > 0 for r in both) and any(
        r["tokens/rl_share"] > 0 for r in both
    )


def test_a_step_with_nothing_to_train_does_not_crash(tiny_model_dir, tmp_path):
    traj = write_toy_set(
        tmp_path / "m.parquet", tiny_model_dir, extra=demonstrations(tiny_model_dir, 2)
    )
    config = TrainConfig(
        trajectories=str(traj),
        model=str(tiny_model_dir),
        out=str(tmp_path / "out"),
        mode="full",
        grad_accum_steps=2,
        progress=False,
        save_every_steps=0,
    )
    derived = config.resolved()
    runner = set_up(config, derived, init_distributed(derived["distributed"]))
    for index in runner.steps[0]:
        episode = runner.episodes[index]
        episode.chunk_keep = torch.zeros_like(episode.chunk_keep)
        episode.chunk_imitate = torch.zeros_like(episode.chunk_imitate)
    row = runner.step(0)
    assert row["loss"] == row["loss/rl"] == row["loss/il"] == 0.0
    assert row["tokens/rl_share"] == row["tokens/il_share"] == 0.0
