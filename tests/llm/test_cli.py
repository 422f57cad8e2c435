"""``termrl model`` commands."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from termrl.llm.cli import model
from termrl.llm.models import default_model_dir


def test_tiny_writes_a_model_folder(tmp_path) -> None:
    result = CliRunner().invoke(model, ["tiny", str(tmp_path / "m"), "--seed", "2"])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "m" / "model.safetensors").is_file()


@pytest.mark.slow
@pytest.mark.ci
def test_prepare_reports_the_default_model_folder() -> None:
    # Converts once per cache (20-40 s the first time), then only checks the folder.
    result = CliRunner().invoke(model, ["prepare"])
    assert result.exit_code == 0, result.output
    assert str(default_model_dir()) in result.output
    assert (default_model_dir() / "model.safetensors").stat().st_size > 400_000_000
