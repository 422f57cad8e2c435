"""TrainConfig: validation lists every problem; file + override precedence; derived values."""

from __future__ import annotations

import json

import pytest

from components.train.config import TrainConfig, load_config
from termrl.errors import ConfigError


def test_validate_reports_every_problem_at_once(tmp_path):
    config = TrainConfig(
        mode="negative-only", eps_low=1.5, gamma=0.0, micro_batch_size=0, objective="sft"
    )
    with pytest.raises(ConfigError) as info:
        config.validate()
    text = "\n".join(info.value.problems)
    for needle in (
        "mode=",
        "objective=",
        "eps_low=",
        "gamma=",
        "micro_batch_size=",
        "trajectories is required",
        "out is required",
    ):
        assert needle in text
    assert (
        len(info.value.problems) == 7
    )  # no model is no problem: the embedded default policy, as elsewhere


def test_file_then_overrides(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("mode: full\nnegative_weight: 0.25\nepochs: 3\nadam_betas: [0.9, 0.95]\n")
    config = load_config(path, epochs="5", std_normalise="false", max_steps="null", seed=None)
    assert config.mode == "full" and config.negative_weight == 0.25
    assert config.epochs == 5 and config.std_normalise is False and config.max_steps is None
    assert config.adam_betas == (0.9, 0.95)
    json_path = tmp_path / "c.json"
    json_path.write_text(json.dumps({"eps_high": 0.28}))
    assert load_config(json_path).eps_high == 0.28


def test_unknown_keys_and_bad_values_are_errors(tmp_path):
    with pytest.raises(ConfigError) as info:
        load_config(None, epoch="3", learnin_rate="1")
    assert len(info.value.problems) == 2
    with pytest.raises(ConfigError, match="not a boolean"):
        load_config(None, std_normalise="maybe")


def test_resolved_defaults():
    assert TrainConfig(finetune="lora").resolved()["learning_rate"] == 1e-5
    assert TrainConfig(finetune="full").resolved()["learning_rate"] == 1e-6
    assert TrainConfig(learning_rate=3e-4).resolved()["learning_rate"] == 3e-4
    resolved = TrainConfig().resolved()
    assert resolved["dtype"] == "float32"  # no GPU here: fp32 (bf16 is ~40x slower on this CPU)
    assert resolved["distributed"] == "none"


def test_imitation_schedule_and_its_validation():
    # λ_IL = il_weight · il_decay ** iteration: 2 · 0.5³ = 0.25
    assert TrainConfig(il_weight=2.0, il_decay=0.5, iteration=3).resolved()["il_lambda"] == 0.25
    assert TrainConfig().resolved()["il_lambda"] == 1.0  # iteration 0: il_weight itself
    config = TrainConfig(
        trajectories="",
        model="",
        out="",
        rl_weight=-1.0,
        il_weight=-0.5,
        il_decay=1.5,
        iteration=-1,
    )
    with pytest.raises(ConfigError) as info:
        config.validate()
    text = "\n".join(info.value.problems)
    for needle in ("rl_weight=-1.0", "il_weight=-0.5", "il_decay=1.5", "iteration=-1"):
        assert needle in text
    with pytest.raises(ConfigError, match="both 0"):
        TrainConfig(rl_weight=0.0, il_weight=0.0).validate()
