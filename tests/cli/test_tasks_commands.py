"""`termrl tasks ...` through a real subprocess, as a user runs it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from termrl.artifacts import load_tasks

FIXTURES = Path(__file__).parents[1] / "fixtures" / "tasks"


def termrl(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "pipelines.cli", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=120,
    )


def test_every_command_has_help():
    for command in ([], ["tasks"], ["tasks", "import"], ["tasks", "export"], ["tasks", "show"]):
        result = termrl(*command, "--help")
        assert result.returncode == 0, result.stderr
        assert "Usage:" in result.stdout


def test_import_show_export_round_trip(tmp_path):
    out = tmp_path / "tasks.parquet"
    result = termrl("tasks", "import", str(FIXTURES), "--out", str(out))
    assert result.returncode == 0, result.stderr
    assert "imported 6 task(s) (3 harbor, 3 legacy)" in result.stdout
    shown = termrl("tasks", "show", str(out))
    assert shown.returncode == 0
    assert (
        "hello-file" in shown.stdout
        and "text-processing" in shown.stdout
        and "6 task(s)" in shown.stdout
    )
    assert termrl("tasks", "export", str(out), "--out", str(tmp_path / "exported")).returncode == 0
    again = tmp_path / "again.parquet"
    assert (
        termrl("tasks", "import", str(tmp_path / "exported"), "--out", str(again)).returncode == 0
    )

    def rows(path):
        return sorted((t.to_row() for t in load_tasks(path)), key=lambda r: r["id"])

    assert rows(again) == rows(out)


def test_bad_folders_fail_the_import_and_write_nothing_unless_skipped(tmp_path):
    bad = tmp_path / "tree" / "broken"
    (bad / "tests").mkdir(parents=True)
    (bad / "task.toml").write_text('version = "1.0"\n')
    good = tmp_path / "tree" / "fine"
    (good / "environment").mkdir(parents=True)
    (good / "environment" / "Dockerfile").write_text("FROM termrl/base:bookworm\n")
    (good / "instruction.md").write_text("Do it.")
    (good / "task.toml").write_text('version = "1.0"\n')
    (good / "tests").mkdir()
    (good / "tests" / "test.sh").write_text("#!/bin/bash\n")
    out = tmp_path / "tasks.parquet"

    result = termrl("tasks", "import", str(tmp_path / "tree"), "--out", str(out))
    assert result.returncode == 1
    assert f"invalid task: {bad}: no instruction" in result.stderr
    assert "nothing written" in result.stderr
    assert not out.exists()

    result = termrl("tasks", "import", str(tmp_path / "tree"), "--out", str(out), "--skip-invalid")
    assert result.returncode == 0, result.stderr
    assert "imported 1 task(s) (1 harbor); skipped 1 invalid" in result.stdout
    assert [t.id for t in load_tasks(out)] == ["fine"]


def test_show_on_a_non_task_artifact_fails_with_a_clear_message(tmp_path):
    bogus = tmp_path / "x.parquet"
    bogus.write_bytes(b"nope")
    result = termrl("tasks", "show", str(bogus))
    assert result.returncode == 1
    assert "cannot read Parquet file" in result.stderr
