"""Every stage command takes --set FIELD=VALUE through the one parser: typed, and a misspelt
field is refused with the config's own field names before any work starts."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from pipelines.cli import main

REQUIRED = {
    "synthesize": ["--out", "t.parquet"],
    "verify": ["--tasks", "t.parquet", "--out", "v.parquet", "--admitted", "a.parquet"],
    "demonstrate": ["--tasks", "t.parquet", "--out", "d.parquet"],
    "rollout": [
        "--tasks",
        "t.parquet",
        "--group-size",
        "1",
        "--groups",
        "1",
        "--max-turns",
        "1",
        "--out",
        "r.parquet",
    ],
    "train": ["--trajectories", "t.parquet", "--out", "ckpt"],
    "eval": ["--tasks", "t.parquet", "--out", "e.parquet"],
    "health": ["--rollout-metrics", "m.parquet", "--train", "ckpt", "--out", "h.json"],
}


@pytest.mark.parametrize("stage", sorted(REQUIRED))
def test_a_misspelt_setting_is_refused_by_name(stage, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for name in ("t.parquet", "m.parquet"):
        (tmp_path / name).write_bytes(b"")  # options that must exist do; the setting fails first
    (tmp_path / "ckpt").mkdir()
    result = CliRunner().invoke(
        main, ["stage", stage, *REQUIRED[stage], "--set", "no_such_field=1"]
    )
    assert result.exit_code != 0
    assert "unknown setting 'no_such_field'" in result.output, result.output
    assert "Traceback" not in result.output


@pytest.mark.parametrize("stage", sorted(REQUIRED))
def test_a_misspelt_field_in_a_config_file_is_refused_by_name(stage, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for name in ("t.parquet", "m.parquet"):
        (tmp_path / name).write_bytes(b"")
    (tmp_path / "ckpt").mkdir()
    (tmp_path / "c.yaml").write_text("no_such_field: 1\n")
    result = CliRunner().invoke(main, ["stage", stage, *REQUIRED[stage], "--config", "c.yaml"])
    assert result.exit_code != 0
    assert "c.yaml: unknown" in result.output and "field 'no_such_field'" in result.output, (
        result.output
    )
    assert "Traceback" not in result.output


def test_config_file_then_options_then_set(tmp_path, monkeypatch):
    """defaults < --config < options given < --set, seen through rollout's validation."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "t.parquet").write_bytes(b"")  # read after validation: a valid config fails there
    (tmp_path / "c.yaml").write_text("group_size: 0\nmax_turns: 2\n")
    base = ["stage", "rollout", "--tasks", "t.parquet", "--out", "r.parquet", "--config", "c.yaml"]

    def error(*extra: str) -> str:
        result = CliRunner().invoke(main, [*base, *extra])
        assert result.exit_code != 0 and "Traceback" not in result.output
        return result.output

    assert "group_size must be at least 1, not 0" in error()  # the file's value, over the default
    assert "Parquet file size is 0 bytes" in error("--group-size", "2")  # the option, over the file
    assert "group_size must be at least 1, not 0" in error(
        "--group-size", "2", "--set", "group_size=0"
    )
    # an option left at its click default does not override the file
    (tmp_path / "c.yaml").write_text("concurrency: 0\n")
    assert "concurrency" in error()
