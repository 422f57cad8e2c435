"""`termrl tbcompat show | timing` through click (kit's fetch is tested in test_kit)."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from pipelines.tbcompat_cli import tbcompat
from termrl.artifacts.eval_results import write_eval_results

FIXTURES = Path(__file__).parents[1] / "fixtures"


def test_show_lists_stand_ins_differences_and_kits():
    result = CliRunner().invoke(tbcompat, ["show", "--tasks", str(FIXTURES / "terminal-bench")])
    assert result.exit_code == 0, result.output
    assert (
        "FROM ghcr.io/laude-institute/t-bench/python-3-13:20250620 -> termrl/standin:bookworm-py3.13"
        in result.output
    )
    assert (
        "test kit: uv 0.9.5, Python 3.13: pytest==8.4.1 pytest-json-ctrf==0.3.5 pytest (from test.sh)"
        in result.output
    )
    plain = CliRunner().invoke(
        tbcompat, ["show", "--tasks", str(FIXTURES / "tasks" / "legacy" / "csv-total")]
    )
    assert plain.output == "csv-total: runs as written\n"


def _row(task_id: str, agent_sec: float, test_sec: float) -> dict:
    return {
        "run_id": "oracle",
        "task_id": task_id,
        "trial": 0,
        "agent": "oracle",
        "passed": True,
        "reward": 1.0,
        "agent_sec": agent_sec,
        "test_sec": test_sec,
    }


def test_timing_reads_eval_results(tmp_path):
    results = tmp_path / "oracle.parquet"
    # word-frequency: agent timeout 360 s, test timeout 120 s (its task.yaml)
    write_eval_results(
        results, [_row("word-frequency", 300.0, 10.0), _row("sum-column", 1.0, 12.0)]
    )
    result = CliRunner().invoke(
        tbcompat, ["timing", str(results), "--tasks", str(FIXTURES / "terminal-bench")]
    )
    assert result.exit_code == 0, result.output
    assert result.output == (
        "warning: task word-frequency: the oracle solution took 300.0s, 83 % of its 360s timeout "
        "(over 80 %: it may time out under load)\n"
    )
    write_eval_results(results, [_row("sum-column", 1.0, 12.0)])
    quiet = CliRunner().invoke(
        tbcompat, ["timing", str(results), "--tasks", str(FIXTURES / "terminal-bench")]
    )
    assert quiet.output == "no task used more than 80 % of a timeout (1 trial(s))\n"


@pytest.mark.slow
def test_kit_fetches_one_kit_per_distinct_spec():
    """Uses the real termrl cache (and the PyPI mirror when a kit is not cached yet)."""
    result = CliRunner().invoke(tbcompat, ["kit", "--tasks", str(FIXTURES / "terminal-bench")])
    assert result.exit_code == 0, result.output
    kits = [line for line in result.output.splitlines() if not line.startswith("[kit]")]
    assert len(kits) == 3  # word-frequency and active-users need the same kit
    assert any(line.endswith(": active-users, word-frequency") for line in kits), kits
