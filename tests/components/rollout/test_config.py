"""RolloutConfig: every problem reported at once; derived values."""

from __future__ import annotations

from pathlib import Path

import pytest

from components.rollout.config import RolloutConfig
from termrl.errors import ConfigError


def test_validate_lists_every_problem(tmp_path):
    config = RolloutConfig(tasks=tmp_path / "missing.parquet", out=Path("t.csv"), mode="batch",
                           group_size=0, redundancy=-1, drop_ratio_limit=1.5, max_new_tokens=512,
                           context_window=256)
    with pytest.raises(ConfigError) as error:
        config.validate()
    text = "\n".join(error.value.problems)
    for fragment in ("mode must be one of", "group_size must be at least 1", "redundancy must not",
                     "drop_ratio_limit", "context_window must be larger", ".parquet", "does not exist"):
        assert fragment in text
    assert len(error.value.problems) == 7


def test_derived_values(tmp_path):
    config = RolloutConfig(out=tmp_path / "traj.parquet", groups=3, redundancy=2, max_turns=5)
    assert config.parts_dir == tmp_path / "traj.parquet.parts"
    assert config.metrics_path == tmp_path / "rollout_metrics.parquet"
    assert config.groups_started == 5
    assert config.agent.max_turns == 5 and config.agent.lifetime_s == config.episode_lifetime_s
