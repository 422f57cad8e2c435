"""The tasks artifact: one row per task, everything needed to build, solve and score it.

A task is Terminal-Bench's: an instruction, an environment (a Dockerfile and
its build context), a reference solution and tests. Files are stored as they
were on disk (bytes and mode bits, binary files too), grouped by where they
go at run time:

    environment_files  the image build context (relative to it; holds the Dockerfile)
    solution_files     copied to /solution only when the oracle runs
    test_files         copied to /tests only when scoring

``test_command`` runs the tests (from the image's workdir, ``TEST_DIR=/tests``);
``scoring`` says how its outcome becomes a reward:

    reward-file    /logs/verifier/reward.txt (Harbor); exit status if absent
    pytest-report  legacy Terminal-Bench: >=1 PASSED and no FAILED/ERROR in pytest's output

``solution_command`` runs the solution; a legacy ``solution.yaml`` task keeps
that file and an empty command (see ``termrl.tasks.solution_steps``).
``adaptations`` records (as JSON) what termrl changed to run the task offline;
the original bytes above are never edited.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field, fields
from typing import Any

import pyarrow as pa

from termrl.artifacts.contract import ArtifactSchema, Rows, read_artifact, write_artifact

__all__ = ["TASKS", "Task", "TaskFile", "load_tasks", "read_tasks", "save_tasks", "write_tasks"]

FILE_TYPE = pa.struct(
    [
        pa.field("path", pa.string(), nullable=False),
        pa.field("data", pa.binary(), nullable=False),
        pa.field("mode", pa.int32(), nullable=False),
    ]
)

TASKS = ArtifactSchema(
    name="tasks",
    version="1.0",
    schema=pa.schema(
        [
            pa.field("id", pa.string(), nullable=False),
            pa.field("source", pa.string(), nullable=False),  # synthetic | expert | terminal-bench
            pa.field("family", pa.string(), nullable=False),
            pa.field("difficulty", pa.string(), nullable=False),  # easy | medium | hard | ...
            pa.field("tags", pa.list_(pa.string())),
            pa.field("instruction", pa.string(), nullable=False),
            pa.field("layout", pa.string(), nullable=False),  # harbor | legacy | generated
            pa.field("environment_files", pa.list_(FILE_TYPE)),
            pa.field("solution_files", pa.list_(FILE_TYPE)),
            pa.field("solution_command", pa.string()),
            pa.field("test_files", pa.list_(FILE_TYPE)),
            pa.field("test_command", pa.string(), nullable=False),
            pa.field("scoring", pa.string(), nullable=False),  # reward-file | pytest-report
            pa.field("agent_timeout_sec", pa.float64()),
            pa.field("verifier_timeout_sec", pa.float64()),
            pa.field("build_timeout_sec", pa.float64()),
            pa.field("cpus", pa.float64()),
            pa.field("memory_mb", pa.int64()),
            pa.field("storage_mb", pa.int64()),
            pa.field("allow_internet", pa.bool_()),
            pa.field("seed", pa.int64()),
            pa.field("perturbations", pa.list_(pa.string())),
            pa.field("metadata", pa.string()),  # JSON: everything else the task file said
            pa.field("adaptations", pa.string()),  # JSON: what termrl changed to run it here
        ]
    ),
)


@dataclass(frozen=True)
class TaskFile:
    """One file of a task: a relative POSIX path, its bytes and its mode bits."""

    path: str
    data: bytes
    mode: int = 0o644

    @property
    def executable(self) -> bool:
        return bool(self.mode & 0o111)


@dataclass
class Task:
    """A task in memory; ``to_row``/``from_row`` map it to one tasks-artifact row."""

    id: str
    instruction: str
    source: str = "synthetic"
    family: str = "unknown"
    difficulty: str = "medium"
    tags: list[str] = field(default_factory=list)
    layout: str = "generated"
    environment_files: list[TaskFile] = field(default_factory=list)
    solution_files: list[TaskFile] = field(default_factory=list)
    solution_command: str | None = "bash /solution/solve.sh"
    test_files: list[TaskFile] = field(default_factory=list)
    test_command: str = "bash /tests/test.sh"
    scoring: str = "reward-file"
    agent_timeout_sec: float | None = 600.0
    verifier_timeout_sec: float | None = 180.0
    build_timeout_sec: float | None = 600.0
    cpus: float | None = 1.0
    memory_mb: int | None = 2048
    storage_mb: int | None = 10240
    allow_internet: bool | None = False
    seed: int | None = None
    perturbations: list[str] = field(default_factory=list)
    metadata: dict[str, Any] = field(default_factory=dict)
    adaptations: dict[str, Any] = field(default_factory=dict)

    def environment_file(self, path: str) -> TaskFile | None:
        return next((f for f in self.environment_files if f.path == path), None)

    @property
    def dockerfile(self) -> str:
        found = self.environment_file("Dockerfile")
        return found.data.decode() if found else ""

    def to_row(self) -> dict[str, Any]:
        row = asdict(self)
        for key in ("environment_files", "solution_files", "test_files"):
            row[key] = [asdict(f) for f in getattr(self, key)]
        row["metadata"] = json.dumps(self.metadata, sort_keys=True)
        row["adaptations"] = json.dumps(self.adaptations, sort_keys=True)
        return row

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> Task:
        known = {f.name for f in fields(cls)}
        values = {k: v for k, v in row.items() if k in known}
        for key in ("environment_files", "solution_files", "test_files"):
            values[key] = [TaskFile(**f) for f in values.get(key) or []]
        for key in ("tags", "perturbations"):
            values[key] = list(values.get(key) or [])
        for key in ("metadata", "adaptations"):
            values[key] = json.loads(values[key]) if values.get(key) else {}
        return cls(**values)


def write_tasks(path: str | os.PathLike, rows: Rows) -> None:
    """Write a tasks artifact atomically (rows may be dicts or a pyarrow Table)."""
    write_artifact(path, rows, TASKS)


def read_tasks(path: str | os.PathLike) -> pa.Table:
    """Read and validate a tasks artifact; unknown extra columns are kept."""
    return read_artifact(path, TASKS)


def save_tasks(path: str | os.PathLike, tasks: list[Task]) -> None:
    """Write ``Task`` objects; refuses duplicate ids."""
    seen: set[str] = set()
    for task in tasks:
        if task.id in seen:
            raise ValueError(f"duplicate task id {task.id!r}")
        seen.add(task.id)
    write_tasks(path, [t.to_row() for t in tasks])


def load_tasks(path: str | os.PathLike) -> list[Task]:
    """Read a tasks artifact as ``Task`` objects (extra columns are not carried)."""
    return [Task.from_row(row) for row in read_tasks(path).to_pylist()]
