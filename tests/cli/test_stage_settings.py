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
    "rollout": ["--tasks", "t.parquet", "--group-size", "1", "--groups", "1", "--max-turns", "1", "--out", "r.parquet"],
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
    result = CliRunner().invoke(main, ["stage", stage, *REQUIRED[stage], "--set", "no_such_field=1"])
    assert result.exit_code != 0
    assert "unknown setting 'no_such_field'" in result.output, result.output
    assert "Traceback" not in result.output
