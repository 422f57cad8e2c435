"""RolloutConfig: every problem reported at once; derived values."""

from __future__ import annotations

from pathlib import Path

import pytest

from components.rollout.behaviour import Penalties
from components.rollout.config import RolloutConfig
from termrl.errors import ConfigError


def test_validate_lists_every_problem(tmp_path):
    config = RolloutConfig(
        tasks=tmp_path / "missing.parquet",
        out=Path("t.csv"),
        mode="batch",
        engine="paged",
        weights_dtype="fp16",
        group_size=0,
        redundancy=-1,
        drop_ratio_limit=1.5,
        max_new_tokens=512,
        context_window=256,
    )
    with pytest.raises(ConfigError) as error:
        config.validate()
    text = "\n".join(error.value.problems)
    for fragment in (
        "mode must be one of",
        "engine must be one of",
        "weights_dtype must be one of",
        "group_size must be at least 1",
        "redundancy must not",
        "drop_ratio_limit",
        "context_window must be larger",
        ".parquet",
        "does not exist",
    ):
        assert fragment in text
    assert len(error.value.problems) == 9


def test_derived_values(tmp_path):
    config = RolloutConfig(out=tmp_path / "traj.parquet", groups=3, redundancy=2, max_turns=5)
    assert config.parts_dir == tmp_path / "traj.parquet.parts"
    assert config.metrics_path == tmp_path / "rollout_metrics.parquet"
    assert config.groups_started == 5
    assert config.agent.max_turns == 5 and config.agent.lifetime_sec == config.episode_lifetime_sec


def test_penalties_and_quarantine(tmp_path):
    tasks = tmp_path / "tasks.parquet"
    tasks.touch()
    config = RolloutConfig(
        tasks=tasks, loop_penalty=-0.1, test_access_penalty=-1.0, quarantine=("a", "")
    )
    with pytest.raises(ConfigError) as error:
        config.validate()
    assert len(error.value.problems) == 3
    assert "loop_penalty must not be negative" in error.value.problems[0]
    assert "test_access_penalty must not be negative" in error.value.problems[1]
    assert "quarantine must hold task ids" in error.value.problems[2]
    # off by default; the weights reach the penalties
    assert RolloutConfig().penalties == Penalties(0.0, 0.0, 0.0)
    assert RolloutConfig(destructive_penalty=0.1).penalties.destructive == 0.1


def test_the_health_checks_rollout_settings_are_fields():
    # components/health names these options; a name it emits that the config lacks would be refused
    from components.health.verdict import PENALTY_SETTINGS, QUARANTINE
    from termrl.settings import build_config

    options = {
        key.removeprefix("rollout."): value
        for key, value in [
            *((k, 0.1) for k in PENALTY_SETTINGS.values()),
            (QUARANTINE, ["t1", "t2"]),
        ]
    }
    config = build_config(RolloutConfig, {}, options)
    assert (config.loop_penalty, config.destructive_penalty, config.test_access_penalty) == (
        0.1,
        0.1,
        0.1,
    )
    assert config.quarantine == ("t1", "t2")  # the verdict's JSON list, typed back to a tuple
