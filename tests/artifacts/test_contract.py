"""The artifact contract: round trips, atomic writes, strict reads with clear errors."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from termrl.artifacts import (
    EVAL_RESULTS,
    ROLLOUT_METRICS,
    TASKS,
    TRAIN_METRICS,
    TRAJECTORIES,
    VERDICTS,
    Task,
    TaskFile,
    artifact_info,
    load_tasks,
    read_artifact,
    read_tasks,
    read_trajectories,
    save_tasks,
    write_artifact,
    write_trajectories,
)
from termrl.errors import ArtifactError, SchemaMismatch


def chunk_row(**overrides):
    row = dict(
        episode_id="e0",
        group_id="g0",
        task_id="t0",
        policy_version=3,
        mode="roll-managed",
        chunk_index=0,
        prompt_ids=[1, 2, 3],
        response_ids=[4, 5],
        response_logprobs=[-0.5, -1.25],
        action='[{"name": "bash", "arguments": {"command": "ls"}}]',
        call_format="tool-call",
        observation="a.txt\n",
        exit_code=0,
        gen_ms=12.5,
        exec_ms=3.0,
        reward=1.0,
        success=True,
        stop_reason="done",
        failure_type=None,
        masked=False,
        mask_reason=None,
        drop=False,
        placeholder=False,
        trainable=True,
        num_chunks=1,
        episode_tokens=5,
    )
    row.update(overrides)
    return row


def sample_task() -> Task:
    return Task(
        id="hello",
        instruction="Write hello to /app/out.txt",
        family="files",
        difficulty="easy",
        tags=["files", "echo"],
        environment_files=[
            TaskFile("Dockerfile", b"FROM debian:bookworm\n", 0o644),
            TaskFile("data/blob.bin", bytes(range(256)), 0o600),
        ],
        solution_files=[TaskFile("solve.sh", b"#!/bin/bash\necho hello > /app/out.txt\n", 0o755)],
        test_files=[TaskFile("test.sh", b"#!/bin/bash\n", 0o755)],
        seed=7,
        metadata={"author": "me"},
    )


def test_every_artifact_round_trips_an_empty_and_a_full_table(tmp_path):
    for spec in (TASKS, VERDICTS, TRAJECTORIES, EVAL_RESULTS, TRAIN_METRICS, ROLLOUT_METRICS):
        path = tmp_path / f"{spec.name}.parquet"
        write_artifact(path, [], spec)
        assert read_artifact(path, spec).num_rows == 0
        assert artifact_info(path) == (spec.name, spec.version)


def test_task_objects_round_trip_bytes_and_modes(tmp_path):
    path = tmp_path / "tasks.parquet"
    task = sample_task()
    save_tasks(path, [task])
    [back] = load_tasks(path)
    assert back == task
    assert back.environment_files[1].data == bytes(range(256))
    assert back.solution_files[0].executable and not back.environment_files[1].executable
    assert back.dockerfile == "FROM debian:bookworm\n"


def test_duplicate_task_ids_are_refused(tmp_path):
    with pytest.raises(ValueError, match="duplicate task id 'hello'"):
        save_tasks(tmp_path / "t.parquet", [sample_task(), sample_task()])


def test_trajectory_rows_round_trip_with_exact_values(tmp_path):
    path = tmp_path / "traj.parquet"
    rows = [chunk_row(), chunk_row(chunk_index=1, exit_code=None, prompt_ids=[9])]
    write_trajectories(path, rows)
    table = read_trajectories(path)
    assert table.column("response_logprobs").to_pylist()[0] == [-0.5, -1.25]
    assert table.column("exit_code").to_pylist() == [0, None]
    assert table.schema.field("prompt_ids").type == pa.list_(pa.int32())


def test_unknown_extra_columns_survive_read_and_write(tmp_path):
    path = tmp_path / "traj.parquet"
    write_trajectories(path, [chunk_row(my_note="kept", my_score=0.25)])
    table = read_trajectories(path)
    assert table.column("my_note").to_pylist() == ["kept"]
    again = tmp_path / "again.parquet"
    write_trajectories(again, table)
    assert read_trajectories(again).column("my_score").to_pylist() == [0.25]


def test_absent_nullable_columns_are_filled_with_nulls(tmp_path):
    path = tmp_path / "traj.parquet"
    row = chunk_row()
    del row["observation"], row["gen_ms"]
    write_trajectories(path, [row])
    assert read_trajectories(path).column("observation").to_pylist() == [None]


def test_writing_rows_without_a_required_value_names_the_column(tmp_path):
    with pytest.raises(SchemaMismatch, match="'reward'"):
        write_trajectories(tmp_path / "t.parquet", [chunk_row(reward=None)])
    assert not (tmp_path / "t.parquet").exists()


def test_reading_a_file_with_missing_and_mistyped_columns_reports_both(tmp_path):
    path = tmp_path / "bad.parquet"
    table = read_trajectories_table_from_rows(tmp_path)
    index = table.schema.get_field_index("exit_code")
    table = table.set_column(index, "exit_code", pa.array(["zero"])).drop_columns(["reward"])
    pq.write_table(table, path)
    with pytest.raises(SchemaMismatch) as info:
        read_trajectories(path)
    message = str(info.value)
    assert str(path) in message
    assert "column 'reward' is missing (expected double)" in message
    assert "column 'exit_code' has type string, expected int32" in message


def read_trajectories_table_from_rows(tmp_path):
    path = tmp_path / "good.parquet"
    write_trajectories(path, [chunk_row()])
    return pq.read_table(path)


def test_a_newer_major_version_is_refused_and_a_newer_minor_is_read(tmp_path):
    table = read_trajectories_table_from_rows(tmp_path)
    for version, ok in (("1.7", True), ("2.0", False)):
        path = tmp_path / f"v{version}.parquet"
        meta = {b"termrl.artifact": b"trajectories", b"termrl.schema_version": version.encode()}
        pq.write_table(table.replace_schema_metadata(meta), path)
        if ok:
            assert read_trajectories(path).num_rows == 1
        else:
            with pytest.raises(SchemaMismatch, match=r"version 2\.0 is newer"):
                read_trajectories(path)


def test_reading_one_artifact_as_another_is_refused(tmp_path):
    path = tmp_path / "traj.parquet"
    write_trajectories(path, [chunk_row()])
    with pytest.raises(SchemaMismatch, match="is a 'trajectories' artifact, expected 'tasks'"):
        read_tasks(path)


def test_missing_and_corrupt_files_raise_artifact_errors(tmp_path):
    with pytest.raises(ArtifactError, match="no such artifact file"):
        read_tasks(tmp_path / "nope.parquet")
    corrupt = tmp_path / "corrupt.parquet"
    corrupt.write_bytes(b"not parquet at all")
    with pytest.raises(ArtifactError, match="cannot read Parquet"):
        read_tasks(corrupt)


def test_a_failed_write_keeps_the_previous_file_and_leaves_no_temp_file(tmp_path):
    path = tmp_path / "traj.parquet"
    write_trajectories(path, [chunk_row()])
    before = path.read_bytes()
    with pytest.raises(SchemaMismatch):
        write_trajectories(path, [chunk_row(response_ids="not a list")])
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["traj.parquet"]


def test_integer_columns_are_narrowed_only_when_values_fit(tmp_path):
    table = read_trajectories_table_from_rows(tmp_path)
    index = table.schema.get_field_index("chunk_index")
    path = tmp_path / "wide.parquet"
    pq.write_table(table.set_column(index, "chunk_index", pa.array([5], pa.int64())), path)
    assert read_trajectories(path).column("chunk_index").to_pylist() == [5]
    pq.write_table(table.set_column(index, "chunk_index", pa.array([2**40], pa.int64())), path)
    with pytest.raises(SchemaMismatch, match="chunk_index"):
        read_trajectories(path)
