"""The tasks artifact: 1.1's run-config columns round-trip, and a 1.0 file still reads."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq

from termrl.artifacts.tasks import ADDED_IN_1_1, TASKS, Task, TaskFile, load_tasks, save_tasks


def _task() -> Task:
    return Task(
        id="t",
        instruction="Do it.",
        environment_files=[TaskFile("Dockerfile", b"FROM debian:bookworm\n")],
        docker_image="img:1",
        workdir="/srv",
        env={"A": "${A:-1}"},
        solution_env={"B": "2"},
        verifier_env={"C": "3"},
        agent_user="agent",
        verifier_user="0",
        verifier_mode="separate",
        verifier_collect=[{"command": "true"}],
        artifacts=[{"source": "/app/out"}],
    )


def test_run_config_columns_round_trip(tmp_path):
    save_tasks(tmp_path / "tasks.parquet", [_task()])
    [back] = load_tasks(tmp_path / "tasks.parquet")
    assert back == _task()


def test_a_1_0_file_reads_with_the_image_defaults(tmp_path):
    row = _task().to_row()
    old_schema = pa.schema([f for f in TASKS.schema if f.name not in ADDED_IN_1_1])
    table = pa.Table.from_pylist([{k: row[k] for k in old_schema.names}], schema=old_schema)
    table = table.replace_schema_metadata(
        {b"termrl.artifact": b"tasks", b"termrl.schema_version": b"1.0"}
    )
    pq.write_table(table, tmp_path / "old.parquet")
    [back] = load_tasks(tmp_path / "old.parquet")
    assert (back.docker_image, back.workdir, back.agent_user, back.verifier_mode) == (
        None,
        None,
        None,
        None,
    )
    assert (back.env, back.verifier_collect, back.artifacts) == ({}, [], [])
    assert back.environment_files == _task().environment_files
