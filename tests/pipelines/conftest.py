"""Fixtures of the pipeline tests: the tiny curriculum run that several modules read."""

from pathlib import Path

import pytest
from click.testing import CliRunner

from pipelines.pipeline_cli import run
from tests.pipelines.test_local import TINY


@pytest.fixture(scope="session")
def first_run(
    tmp_path_factory: pytest.TempPathFactory, tiny_model_dir: Path
) -> tuple[Path, list[str], str]:
    """The tiny curriculum under ``termrl run`` on podman: (runs folder, its arguments, its output).

    Shared by test_local.py and test_run_kubernetes.py (which reruns stages of it on kubernetes)."""
    runs = tmp_path_factory.mktemp("runs")
    args = [
        "--runs-dir",
        str(runs),
        "--name",
        "first",
        "--set",
        f"base_model={tiny_model_dir}",
        *TINY,
    ]
    result = CliRunner().invoke(run, args)
    assert result.exit_code == 0, result.output + repr(result.exception)
    return runs, args, result.output
