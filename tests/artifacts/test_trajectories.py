"""Trajectories 1.3 record the sampling temperature; train reads it, and refuses to guess it."""

from __future__ import annotations

import pyarrow.parquet as pq
import pytest

from termrl.artifacts.trajectories import (
    UNSAMPLED_TEMPERATURE,
    read_trajectories,
    sampling_temperature,
    write_trajectories,
)
from termrl.errors import ArtifactError
from tests.artifacts.test_contract import chunk_row


def _write(tmp_path, *rows):
    path = tmp_path / "t.parquet"
    write_trajectories(path, list(rows))
    return path


def test_the_recorded_temperature_is_read_back(tmp_path):
    path = _write(tmp_path, chunk_row(temperature=0.7), chunk_row(episode_id="e1", temperature=0.7))
    assert read_trajectories(path).column("temperature").to_pylist() == [0.7, 0.7]
    assert sampling_temperature(path) == 0.7
    assert sampling_temperature(path, 0.7) == 0.7  # given and recorded agree


def test_expert_rows_do_not_count_and_alone_mean_the_plain_likelihood(tmp_path):
    expert = chunk_row(episode_id="x", source="expert", replayed=True, temperature=None)
    assert sampling_temperature(_write(tmp_path, expert)) == UNSAMPLED_TEMPERATURE == 1.0
    mixed = tmp_path / "m.parquet"
    write_trajectories(mixed, [expert, chunk_row(temperature=0.7)])
    assert sampling_temperature(mixed) == 0.7


def test_several_temperatures_or_a_disagreeing_one_are_refused(tmp_path):
    several = _write(
        tmp_path, chunk_row(temperature=0.7), chunk_row(episode_id="e1", temperature=1.0)
    )
    with pytest.raises(ArtifactError, match="several temperatures"):
        sampling_temperature(several)
    one = tmp_path / "one.parquet"
    write_trajectories(one, [chunk_row(temperature=0.7)])
    with pytest.raises(ArtifactError, match="sampled at temperature 0.7, not the 1.0 given"):
        sampling_temperature(one, 1.0)


def test_a_file_older_than_1_3_needs_the_temperature_given(tmp_path):
    path = _write(tmp_path, chunk_row())
    older = tmp_path / "v1.2.parquet"
    table = pq.read_table(path).drop(["temperature"])
    meta = {b"termrl.artifact": b"trajectories", b"termrl.schema_version": b"1.2"}
    pq.write_table(table.replace_schema_metadata(meta), older)
    assert read_trajectories(older).column("temperature").to_pylist() == [None]
    with pytest.raises(ArtifactError, match=r"records no sampling temperature .*temperature=T"):
        sampling_temperature(older)
    assert sampling_temperature(older, 0.7) == 0.7
