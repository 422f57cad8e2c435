"""Rollout and train agree on log μ when the rollout samples below temperature 1 (the IPA ratio's premise)."""

from __future__ import annotations

import torch

from components.train.data import load_episodes
from components.train.modeling import collate, load_policy, token_logprobs
from termrl.artifacts.trajectories import write_trajectories
from termrl.llm.engine import SamplingParams
from termrl.llm.hf_engine import TransformersEngine

from .conftest import episode_rows

CPU = torch.device("cpu")


async def test_train_takes_log_pi_at_the_temperature_the_rollout_sampled_at(
    tiny_model_dir, tmp_path
):
    engine = TransformersEngine(tiny_model_dir)
    prompt = engine.tokenizer.apply_chat_template(
        [{"role": "user", "content": "list the files"}], add_generation_prompt=True, tokenize=True
    )
    [gen] = await engine.generate(
        [list(prompt)], SamplingParams(temperature=0.7, max_new_tokens=16, seed=5)
    )
    rows = episode_rows(
        episode_id="e",
        group_id="g",
        chunks=[(list(prompt), gen.token_ids)],
        logprobs=[gen.logprobs],
        reward=1.0,
    )
    write_trajectories(tmp_path / "t.parquet", rows)
    [episode] = load_episodes(tmp_path / "t.parquet", max_episode_tokens=10_000)
    batch = collate([episode], [torch.ones(episode.num_chunks)], pad_id=0)
    model = load_policy(
        str(tiny_model_dir),
        finetune="full",
        lora_rank=8,
        lora_alpha=16,
        lora_target_modules="all-linear",
    ).eval()
    with torch.no_grad():
        at_rollout = token_logprobs(model, batch, CPU, bf16=False, temperature=0.7)
        at_one = token_logprobs(model, batch, CPU, bf16=False)
    mu = torch.tensor(gen.logprobs)
    assert torch.allclose(at_rollout, mu, atol=1e-4)
    assert (at_one - mu).abs().max() > 1e-2  # at temperature 1 the ratio would be off


def test_train_reads_the_sampling_temperature_from_the_trajectories(
    tiny_model_dir, toy_trajectories, tmp_path
):
    """No caller restates it: the rollout recorded 0.7 on its rows, train trains at 0.7."""
    import pyarrow as pa

    from components.train.config import TrainConfig
    from components.train.trainer import train
    from termrl.artifacts.checkpoint import read_train_state
    from termrl.artifacts.trajectories import read_trajectories, write_trajectories

    table = read_trajectories(toy_trajectories)
    sampled = table.set_column(
        table.schema.get_field_index("temperature"),
        "temperature",
        pa.array([0.7] * table.num_rows, pa.float64()),
    )
    path = tmp_path / "t07.parquet"
    write_trajectories(path, sampled)
    out = tmp_path / "out"
    config = TrainConfig(
        trajectories=str(path), model=str(tiny_model_dir), out=str(out), max_steps=1, progress=False
    )
    assert config.temperature is None  # unset: the data says
    train(config)
    assert read_train_state(out)["config"]["temperature"] == 0.7
