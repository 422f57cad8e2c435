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

Version 1.1 added how Harbor (schema 1.4) runs a task beyond its Dockerfile:
``docker_image`` (a prebuilt image run instead of building ``environment_files``),
``workdir``, ``env`` (every process of the sandbox; ``${VAR}`` / ``${VAR:-default}``
templates kept as written and resolved from the host when a sandbox starts),
``solution_env``, ``verifier_env``, ``agent_user`` / ``verifier_user`` (None: the
image's USER), ``verifier_mode`` (``separate``: the tests run in a fresh sandbox
from the same image, fed the ``artifacts`` the agent left, after the
``verifier_collect`` commands ran; ``verifier_network``: that sandbox's network),
``steps`` and ``reward_strategy`` (a multi-step task). A 1.0 file reads with them
null (as before: the image's defaults, a shared verifier, one step); dict and list
columns are JSON text.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field, fields
from typing import Any

import pyarrow as pa

from termrl.artifacts.contract import (
    ArtifactSchema,
    Rows,
    read_artifact_with_added,
    write_artifact,
)

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
    version="1.1",
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
            pa.field("docker_image", pa.string()),  # 1.1
            pa.field("workdir", pa.string()),  # 1.1
            pa.field("env", pa.string()),  # 1.1: JSON object
            pa.field("solution_env", pa.string()),  # 1.1: JSON object
            pa.field("verifier_env", pa.string()),  # 1.1: JSON object
            pa.field("agent_user", pa.string()),  # 1.1
            pa.field("verifier_user", pa.string()),  # 1.1
            pa.field("verifier_mode", pa.string()),  # 1.1: shared | separate
            pa.field(
                "verifier_collect", pa.string()
            ),  # 1.1: JSON list of {command, timeout_sec, user}
            pa.field("artifacts", pa.string()),  # 1.1: JSON list of {source, exclude}
            pa.field(
                "verifier_network", pa.string()
            ),  # 1.1: public | no-network (a separate verifier's own)
            pa.field("steps", pa.string()),  # 1.1: JSON list of step configs
            pa.field("reward_strategy", pa.string()),  # 1.1: mean | final (multi-step tasks)
            pa.field(
                "step_files", pa.list_(FILE_TYPE)
            ),  # 1.1: the files under steps/ (multi-step tasks)
        ]
    ),
)


FILE_COLUMNS = ("environment_files", "solution_files", "test_files", "step_files")
JSON_COLUMNS = {
    "metadata": dict,
    "adaptations": dict,
    "env": dict,
    "solution_env": dict,
    "verifier_env": dict,
    "verifier_collect": list,
    "artifacts": list,
    "steps": list,
}
"""Columns holding JSON text, and the empty value a null reads as."""
ADDED_IN_1_1 = (
    "docker_image",
    "workdir",
    "env",
    "solution_env",
    "verifier_env",
    "agent_user",
    "verifier_user",
    "verifier_mode",
    "verifier_collect",
    "artifacts",
    "verifier_network",
    "steps",
    "reward_strategy",
    "step_files",
)
"""Columns a 1.0 file lacks; ``read_tasks`` fills them with nulls."""


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
    docker_image: str | None = None
    """A prebuilt image to run instead of building ``environment_files`` (Harbor's ``docker_image``)."""
    workdir: str | None = None
    """Working directory of the agent, solution and tests; None: the image's WORKDIR."""
    env: dict[str, str] = field(default_factory=dict)
    """Variables of every process in the sandbox, templates unresolved (``termrl.taskenv``)."""
    solution_env: dict[str, str] = field(default_factory=dict)
    verifier_env: dict[str, str] = field(default_factory=dict)
    agent_user: str | None = None
    """The user the agent's shell (and the solution) runs as; None: the image's USER."""
    verifier_user: str | None = None
    """The user the tests run as; None: the image's USER."""
    verifier_mode: str | None = None
    """``separate``: tests run in a fresh sandbox fed ``artifacts``; None or ``shared``: in the agent's."""
    verifier_collect: list[dict[str, Any]] = field(default_factory=list)
    artifacts: list[dict[str, Any]] = field(default_factory=list)
    verifier_network: str | None = None
    """A separate verifier's network (``public`` or ``no-network``); None: the task's own (``allow_internet``)."""
    steps: list[dict[str, Any]] = field(default_factory=list)
    """A multi-step task's steps, in order: ``name``, ``min_reward`` (float, a dict of reward keys, or
    None), ``agent_timeout_sec``, ``verifier_timeout_sec``, ``verifier_env``, ``verifier_user``. Empty: a
    single-step task. Each step runs as a task of its own (``termrl.taskrun.task_steps``)."""
    reward_strategy: str | None = None
    """How a multi-step task's reward follows from its steps': ``mean`` (Harbor's default) or ``final``."""
    step_files: list[TaskFile] = field(default_factory=list)
    """The files under ``steps/`` (``<name>/instruction.md``, ``<name>/tests/...``, ``<name>/solution/...``);
    like tests and solutions, never part of the image."""

    def environment_file(self, path: str) -> TaskFile | None:
        return next((f for f in self.environment_files if f.path == path), None)

    @property
    def dockerfile(self) -> str:
        found = self.environment_file("Dockerfile")
        return found.data.decode() if found else ""

    def to_row(self) -> dict[str, Any]:
        row = asdict(self)
        for key in FILE_COLUMNS:
            row[key] = [asdict(f) for f in getattr(self, key)]
        for key in JSON_COLUMNS:
            row[key] = json.dumps(getattr(self, key), sort_keys=True)
        return row

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> Task:
        known = {f.name for f in fields(cls)}
        values = {k: v for k, v in row.items() if k in known}
        for key in FILE_COLUMNS:
            values[key] = [TaskFile(**f) for f in values.get(key) or []]
        for key in ("tags", "perturbations"):
            values[key] = list(values.get(key) or [])
        for key, empty in JSON_COLUMNS.items():
            values[key] = json.loads(values[key]) if values.get(key) else empty()
        return cls(**values)


def write_tasks(path: str | os.PathLike, rows: Rows) -> None:
    """Write a tasks artifact atomically (rows may be dicts or a pyarrow Table)."""
    write_artifact(path, rows, TASKS)


def read_tasks(path: str | os.PathLike) -> pa.Table:
    """Read and validate a tasks artifact; unknown extra columns are kept, an older file gets the later
    columns as nulls."""
    return read_artifact_with_added(path, TASKS, ADDED_IN_1_1)


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
