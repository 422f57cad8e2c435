"""VerifyConfig: every problem reported at once; judge specs resolved in one place."""

from __future__ import annotations

import pytest

from components.verify.config import CHECKS, VerifyConfig
from termrl.errors import ConfigError


def test_defaults_validate_and_require_every_sandbox_check(tmp_path):
    (tmp_path / "t.parquet").write_bytes(b"")
    config = VerifyConfig(tasks=str(tmp_path / "t.parquet"), out="v.parquet", admitted="a.parquet")
    config.validate()
    assert set(config.require) == set(CHECKS) - {"judges"}


def test_every_problem_is_listed_at_once():
    config = VerifyConfig(
        tasks="/nope/tasks.parquet",
        out="x.parquet",
        admitted="x.parquet",
        repeats=0,
        concurrency=0,
        require=("noop", "vibes"),
        judge_aggregation="unanimous",
        judges=("openai/m@ftp://host", "@http://h"),
        inert_step_patterns=("(",),
    )
    with pytest.raises(ConfigError) as caught:
        config.validate()
    text = str(caught.value)
    for fragment in (
        "no such file",
        "must be different",
        "repeats must be >= 1",
        "concurrency must be >= 1",
        "unknown check(s) vibes",
        "judge_aggregation",
        "base URL",
        "names no model",
        "is not a regex",
    ):
        assert fragment in text
    assert len(caught.value.problems) == 9


def test_judges_required_with_an_empty_panel_is_a_problem():
    config = VerifyConfig(tasks="t", out="v", admitted="a", judges=(), require=("judges",))
    with pytest.raises(ConfigError, match="panel is empty"):
        config.validate(check_inputs=False)


def test_judge_specs_become_litellm_models_and_endpoints():
    config = VerifyConfig(
        judges=("local", "anthropic/claude-x", "openai/qwen@http://10.0.0.5:8000/v1"),
        model_proxy_url="http://127.0.0.1:9000/v1",
    )
    assert [(e.model, e.api_base) for e in config.judge_endpoints()] == [
        ("openai/policy", "http://127.0.0.1:9000/v1"),
        ("anthropic/claude-x", None),
        ("openai/qwen", "http://10.0.0.5:8000/v1"),
    ]
