"""SynthesizeConfig.validate reports every problem at once."""

from __future__ import annotations

import pytest

from components.synthesize.config import SynthesizeConfig
from termrl.errors import ConfigError


def test_defaults_are_valid():
    SynthesizeConfig().validate()
    assert len(SynthesizeConfig().selected_families()) >= 10


def test_every_problem_is_listed():
    bad = SynthesizeConfig(
        count=-1,
        families=("nope",),
        difficulties=("insane",),
        perturbation_rate=2.0,
        dedup_threshold=0.0,
        llm_model="openai/x",
        llm_count=0,
        out="",
    )
    with pytest.raises(ConfigError) as err:
        bad.validate()
    text = "\n".join(err.value.problems)
    for fragment in [
        "count must be",
        "unknown families ['nope']",
        "unknown difficulties ['insane']",
        "perturbation_rate",
        "dedup_threshold",
        "llm_count",
        "out",
    ]:
        assert fragment in text
    assert len(err.value.problems) == 7
