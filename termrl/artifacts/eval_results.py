"""The eval-results artifact: one row per (task, trial)."""

from __future__ import annotations

import os

import pyarrow as pa

from termrl.artifacts.contract import ArtifactSchema, Rows, read_artifact, write_artifact

__all__ = ["EVAL_RESULTS", "read_eval_results", "write_eval_results"]

EVAL_RESULTS = ArtifactSchema(
    name="eval_results",
    version="1.0",
    schema=pa.schema(
        [
            pa.field("run_id", pa.string()),
            pa.field("task_id", pa.string(), nullable=False),
            pa.field("trial", pa.int32(), nullable=False),
            pa.field("agent", pa.string(), nullable=False),  # policy | oracle | nop
            pa.field("model", pa.string()),
            pa.field("family", pa.string()),
            pa.field("difficulty", pa.string()),
            pa.field("passed", pa.bool_(), nullable=False),
            pa.field("reward", pa.float64(), nullable=False),
            pa.field("failure_mode", pa.string()),  # null when passed
            pa.field("stop_reason", pa.string()),
            pa.field("turns", pa.int32()),
            pa.field("prompt_tokens", pa.int64()),
            pa.field("completion_tokens", pa.int64()),
            pa.field("wall_sec", pa.float64()),
            pa.field("over_budget", pa.bool_()),
            pa.field("tool_calls", pa.int32()),
            pa.field("parallel_turns", pa.int32()),
            pa.field("read_only_calls", pa.int32()),
            pa.field("error", pa.string()),
        ]
    ),
)


def write_eval_results(path: str | os.PathLike, rows: Rows) -> None:
    """Write an eval-results artifact atomically."""
    write_artifact(path, rows, EVAL_RESULTS)


def read_eval_results(path: str | os.PathLike) -> pa.Table:
    """Read and validate an eval-results artifact."""
    return read_artifact(path, EVAL_RESULTS)
