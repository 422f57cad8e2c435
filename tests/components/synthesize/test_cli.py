"""The `synthesize` command: options reach the stage, the table is printed, the artifact is written."""

from __future__ import annotations

import subprocess
import sys

from click.testing import CliRunner

from components.synthesize.cli import synthesize
from termrl.artifacts import load_tasks


def test_cli_writes_tasks_and_prints_the_table(tmp_path):
    out = tmp_path / "tasks.parquet"
    result = CliRunner().invoke(
        synthesize,
        [
            "--count",
            "8",
            "--seed",
            "4",
            "--families",
            "git,sql-sqlite",
            "--difficulty",
            "easy",
            "--difficulty",
            "hard",
            "--no-progress",
            "--out",
            str(out),
        ],
    )
    assert result.exit_code == 0, result.output
    tasks = load_tasks(out)
    assert len(tasks) == 8
    assert {t.family for t in tasks} == {"git", "sql-sqlite"} and {t.difficulty for t in tasks} == {
        "easy",
        "hard",
    }
    assert "family" in result.output and "total" in result.output and "8 tasks" in result.output


def test_cli_reports_config_problems(tmp_path):
    result = CliRunner().invoke(
        synthesize, ["--count", "3", "--families", "nope", "--out", str(tmp_path / "t.parquet")]
    )
    assert (
        result.exit_code == 1 and "unknown families" in result.output
    )  # a one-line error, no traceback


def test_python_dash_m_runs_the_same_command(tmp_path):
    out = tmp_path / "t.parquet"
    r = subprocess.run(
        [sys.executable, "-m", "components.synthesize", "--count", "3", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    assert len(load_tasks(out)) == 3
