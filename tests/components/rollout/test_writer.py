"""Part files: a record survives the round trip; a different rollout is refused; merge."""

from __future__ import annotations

import pytest

from components.rollout.writer import PartWriter, record_from_rows, record_to_rows
from termrl.artifacts import read_trajectories
from termrl.errors import ConfigError
from tests.components.rollout.records import record


def test_records_round_trip_through_part_files(tmp_path):
    writer = PartWriter(tmp_path / "parts", {"groups": 2})
    done = record(0, 1, commands=("ls", "cat a"), timed_out=(False, True), finished_at=12.5)
    failed = record(1, 0, commands=(), stop="error", failure="EnvInitFailed", success=False)
    failed.error = "image build failed (exit status 3)"
    done.step_rewards = [1.0, 0.5]  # a multi-step task's scored steps
    # What scoring found survives a resume: a tampered episode must stay masked.
    done.tampering = ("/usr/local/bin/pytest: shadows /usr/bin/pytest",)
    failed.sandbox_broken = True
    writer.write(done)
    writer.write(failed)
    loaded = {r.ids.episode_id: r for r in writer.load()}
    assert loaded["g0-e1"] == done
    assert loaded["g1-e0"] == failed
    assert record_from_rows(record_to_rows(done)).timed_out_execs == 1
    assert loaded["g1-e0"].step_rewards == []


def test_a_different_rollout_is_not_resumed(tmp_path):
    PartWriter(tmp_path / "parts", {"groups": 2, "mode": "roll-managed"})
    with pytest.raises(ConfigError, match="differs in: mode"):
        PartWriter(tmp_path / "parts", {"groups": 2, "mode": "cli-native"})
    PartWriter(tmp_path / "parts", {"groups": 2, "mode": "roll-managed"})  # same: resumes


def test_unreadable_parts_are_discarded_and_merge_writes_the_artifact(tmp_path):
    writer = PartWriter(tmp_path / "parts", {})
    writer.write(record(0, 0))
    (tmp_path / "parts" / "ep-broken.parquet").write_bytes(b"not parquet")
    writer.record_cancelled([{"episode_id": "g1-e0", "state": "running"}])
    assert [r.ids.episode_id for r in writer.load()] == ["g0-e0"]
    assert writer.cancelled() == [{"episode_id": "g1-e0", "state": "running"}]
    rows = [
        {k: v for k, v in row.items() if not k.startswith("_")}
        for row in record_to_rows(record(0, 0))
    ]
    writer.merge(rows, tmp_path / "out.parquet", temperature=0.7, keep_parts=False)
    assert read_trajectories(tmp_path / "out.parquet").num_rows == 2
    assert not (tmp_path / "parts").exists()
    # every row records the rollout's sampling temperature: train reads it there
    merged = read_trajectories(tmp_path / "out.parquet").column("temperature").to_pylist()
    assert merged == [0.7, 0.7]
