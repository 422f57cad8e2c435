"""The colocated round on CPU: rollout and train in one process, the engine closed around the
train step and rebuilt from the new checkpoint (vLLM's sleep and wake need CUDA; everything
else is the path a GPU pod runs). Real podman sandboxes, the tiny model, a real train step."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import pytest
import torch

from components.rollout.config import RolloutConfig
from components.train.config import TrainConfig
from pipelines.colocated import run_round
from termrl.artifacts import read_trajectories, save_tasks, write_trajectories
from termrl.errors import ConfigError
from tests.components.rollout.policy import word_task
from tests.components.train.conftest import GOOD, expert_rows, toy_chunks
from tests.llm.stream_logprobs import episode_logprobs


def _stream_logprobs(model_dir: Path, rows: list[dict]) -> tuple[list[float], list[float]]:
    """(μ recorded by the rollout, log π recomputed by ``model_dir``) over one episode."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    mu, pi, _ = episode_logprobs(model, rows)
    return mu, pi


@pytest.mark.slow
@pytest.mark.podman
def test_a_colocated_round_rolls_out_trains_and_serves_the_new_weights(
    base_images, tiny_model_dir, tiny_tokenizer, tmp_path
) -> None:
    tasks = tmp_path / "tasks.parquet"
    save_tasks(tasks, [word_task(f"co-{w}", w) for w in ("ant", "bee")])
    demos = tmp_path / "demos.parquet"  # the imitation term: something to learn whatever the reward
    write_trajectories(demos, expert_rows("demo-0", toy_chunks(tiny_tokenizer, GOOD)))
    rollout_config = RolloutConfig(
        tasks=tasks,
        out=tmp_path / "trajectories.parquet",
        model=str(tiny_model_dir),
        weights_dtype="float32",  # μ compared with π below to 1e-3
        group_size=2,
        groups=2,
        redundancy=0,
        concurrency=4,
        max_turns=2,
        max_new_tokens=16,
        context_window=2048,
    )
    train_config = TrainConfig(
        model=str(tiny_model_dir),
        out=str(tmp_path / "checkpoint"),
        mode="full",
        finetune="full",
        demonstrations=str(demos),
        learning_rate=1e-2,
        grad_accum_steps=1,
        max_steps=2,
        progress=False,
    )

    summary = run_round(rollout_config, train_config, iterations=2)

    # Rollout, hand-over, train; the engine rebuilt from the checkpoint; again.
    assert [(s.direction, s.how) for s in summary.switches] == [
        ("to train", "engine closed"),
        ("to rollout", "engine rebuilt"),
        ("to train", "engine closed"),
    ]
    assert all(
        s.seconds > 0 and s.memory_before > 0 and s.memory_after > 0 for s in summary.switches
    )
    assert [r.episodes for r in summary.rollouts] == [4, 4]
    assert len(summary.trainings) == 2
    metrics = summary.headline_metrics()
    assert metrics["rollout/episodes"] == 4 and "colocate/to_rollout_sec" in metrics

    first = tmp_path / "checkpoint.iterations" / "0"
    assert (first / "checkpoint" / "config.json").is_file()
    assert (
        tmp_path / "checkpoint" / "config.json"
    ).is_file()  # the last iteration's, as configured
    by_version = {
        row["policy_version"]
        for row in read_trajectories(first / "trajectories.parquet").to_pylist()
    }
    assert by_version == {0}
    episodes: dict[str, list[dict]] = defaultdict(list)
    for row in read_trajectories(rollout_config.out).to_pylist():
        episodes[row["episode_id"]].append(row)
    assert {rows[0]["policy_version"] for rows in episodes.values()} == {1}

    # The second rollout sampled from the trained weights: its μ is the first checkpoint's π,
    # and not the starting model's.
    rows = sorted(next(iter(episodes.values())), key=lambda r: r["chunk_index"])
    mu, trained = _stream_logprobs(first / "checkpoint", rows)
    _, start = _stream_logprobs(tiny_model_dir, rows)
    assert max(abs(a - b) for a, b in zip(mu, trained, strict=True)) < 1e-3
    assert max(abs(a - b) for a, b in zip(mu, start, strict=True)) > 1e-2


def test_a_colocated_round_reports_both_stages_problems_at_once(tmp_path) -> None:
    with pytest.raises(ConfigError) as caught:
        run_round(
            RolloutConfig(tasks=tmp_path / "none.parquet", groups=0),
            TrainConfig(out=str(tmp_path / "c"), mode="sideways"),
            iterations=0,
        )
    text = str(caught.value)
    assert "iterations=0" in text and "groups" in text and "sideways" in text
    assert "trajectories file" not in text  # the round writes them itself
