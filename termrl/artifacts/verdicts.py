"""The verdicts artifact: one row per task, every verification check and the decision.

Each check's runs are kept (``*_runs``: one bool per repeat) so flakiness is
visible; ``checks`` is a JSON object with each check's outcome, timing and
reason; ``judges`` holds each LLM judge's structured verdict.
"""

from __future__ import annotations

import os

import pyarrow as pa

from termrl.artifacts.contract import ArtifactSchema, Rows, read_artifact, write_artifact

__all__ = ["VERDICTS", "read_verdicts", "write_verdicts"]

JUDGE_TYPE = pa.struct(
    [
        pa.field("model", pa.string()),
        pa.field("verdict", pa.string()),  # ok | flag | error
        pa.field("flags", pa.list_(pa.string())),
        pa.field("rationale", pa.string()),
        pa.field("error", pa.string()),
    ]
)
ABLATION_TYPE = pa.struct(
    [
        pa.field("step_index", pa.int32()),
        pa.field("step", pa.string()),
        pa.field("tests_passed", pa.bool_()),
    ]
)

VERDICTS = ArtifactSchema(
    name="verdicts",
    version="1.0",
    schema=pa.schema(
        [
            pa.field("task_id", pa.string(), nullable=False),
            pa.field("admitted", pa.bool_(), nullable=False),
            pa.field("reason", pa.string(), nullable=False),  # "admitted" or the first failed check
            pa.field("ground_truth_passed", pa.bool_()),
            pa.field("ground_truth_runs", pa.list_(pa.bool_())),
            pa.field("noop_passed", pa.bool_()),
            pa.field("noop_runs", pa.list_(pa.bool_())),
            pa.field("flaky", pa.bool_()),
            pa.field("ablation", pa.list_(ABLATION_TYPE)),
            pa.field("unchecked_steps", pa.list_(pa.string())),
            pa.field("state_replay_passed", pa.bool_()),
            pa.field("judges", pa.list_(JUDGE_TYPE)),
            pa.field("false_positive_risk", pa.float64()),
            pa.field("checks", pa.string()),  # JSON: {check: {outcome, seconds, reason}}
            pa.field("duration_sec", pa.float64()),
        ]
    ),
)


def write_verdicts(path: str | os.PathLike, rows: Rows) -> None:
    """Write a verdicts artifact atomically."""
    write_artifact(path, rows, VERDICTS)


def read_verdicts(path: str | os.PathLike) -> pa.Table:
    """Read and validate a verdicts artifact."""
    return read_artifact(path, VERDICTS)
