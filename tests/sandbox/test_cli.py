"""`termrl sandbox` commands."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from termrl.sandbox.cli import sandbox


@pytest.mark.podman
def test_build_base_reports_current_images(base_images):
    result = CliRunner().invoke(sandbox, ["build-base"])
    assert result.exit_code == 0, result.output
    assert (
        "termrl/base:bookworm (current" in result.output and "debian:bookworm-slim" in result.output
    )
    assert (
        "termrl/standin:bookworm-py3.13 (built on first use): python:3.13-bookworm" in result.output
    )


@pytest.mark.podman
def test_stats_after_a_probe(base_images):
    result = CliRunner().invoke(sandbox, ["stats", "--probe", "1"])
    assert result.exit_code == 0, result.output
    lines = dict(line.rsplit(" ", 1) for line in result.output.splitlines())
    assert float(lines["sandbox_created_total{backend=podman}"]) >= 1
    assert float(lines["sandbox_active_sessions{backend=podman}"]) == 0
    prom = CliRunner().invoke(sandbox, ["stats", "--prometheus"])
    assert "# TYPE sandbox_exec_seconds histogram" in prom.output
