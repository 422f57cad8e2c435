"""Metrics artifacts: training metrics (one row per optimizer step) and rollout
monitoring (long format: one row per scope/key/metric).

Training columns are the signals the seed reads first when training wobbles.
Stages may add columns (for example more ``masked/<reason>`` counts); extra
columns are kept by the contract.
"""

from __future__ import annotations

import os

import pyarrow as pa

from termrl.artifacts.contract import ArtifactSchema, Rows, read_artifact, write_artifact

__all__ = [
    "ROLLOUT_METRICS",
    "TRAIN_METRICS",
    "read_rollout_metrics",
    "read_train_metrics",
    "write_rollout_metrics",
    "write_train_metrics",
]

TRAIN_METRICS = ArtifactSchema(
    name="train_metrics",
    version="1.0",
    schema=pa.schema(
        [
            pa.field("step", pa.int64(), nullable=False),
            pa.field("mode", pa.string(), nullable=False),  # positive-only | full
            pa.field("loss", pa.float64(), nullable=False),
            pa.field("lr", pa.float64()),
            pa.field("grad_norm", pa.float64()),
            pa.field("positive_count", pa.int64()),
            pa.field("negative_count", pa.int64()),
            pa.field("advantage_mean", pa.float64()),
            pa.field("advantage_std", pa.float64()),
            pa.field("clip_fraction", pa.float64()),
            pa.field("masked_mismatch", pa.int64()),
            pa.field("masked_length", pa.int64()),
            pa.field("masked_placeholder", pa.int64()),
            pa.field("mismatch_mean", pa.float64()),
            pa.field("mismatch_max", pa.float64()),
            pa.field("failed_max_response_tokens", pa.int64()),
            pa.field("tokens_per_sec", pa.float64()),
        ]
    ),
)

ROLLOUT_METRICS = ArtifactSchema(
    name="rollout_metrics",
    version="1.0",
    schema=pa.schema(
        [
            pa.field(
                "scope", pa.string(), nullable=False
            ),  # global | task | tool | command | alert
            pa.field("key", pa.string(), nullable=False),
            pa.field("metric", pa.string(), nullable=False),
            pa.field("value", pa.float64(), nullable=False),
        ]
    ),
)


def write_train_metrics(path: str | os.PathLike, rows: Rows) -> None:
    write_artifact(path, rows, TRAIN_METRICS)


def read_train_metrics(path: str | os.PathLike) -> pa.Table:
    return read_artifact(path, TRAIN_METRICS)


def write_rollout_metrics(path: str | os.PathLike, rows: Rows) -> None:
    write_artifact(path, rows, ROLLOUT_METRICS)


def read_rollout_metrics(path: str | os.PathLike) -> pa.Table:
    return read_artifact(path, ROLLOUT_METRICS)
