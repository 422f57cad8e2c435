"""Metrics artifacts: training metrics (one row per optimizer step) and rollout
monitoring (long format: one row per scope/key/metric).

A training row names its step flat (``step``, ``mode``, ``epoch``, ``objective``)
and every metric by namespace (schema 2.0; 1.0 had flat names):

    loss                  the total: rl_weight · loss/rl + λ_IL · loss/il
    loss/...              rl, il, il_lambda (λ_IL)
    optim/...             lr, grad_norm (before clipping)
    advantage/...         positive, negative, mean, std over the step's policy episodes;
                          expert: the step's demonstrations
    ratio/...             mean, max, min, clip_fraction over the kept chunks (or tokens)
    tokens/...            rl_share, il_share, per_sec, kept_units (chunks or tokens in the loss)
    time/step_sec         the step's wall time
    mask/<reason>         episodes the stage excluded for that reason (placeholder,
                          long_failure, no_kept_chunk, ...); mask/mismatch: *chunks* masked
                          for train/rollout mismatch
    mismatch/...          mean, max over chunks of the mean |log π_old − log μ|
    data/...              the stage's episodes, advantages, failed_max_response_tokens

``mask/``, ``mismatch/`` and ``data/`` describe the stage's data as prepared: the
same in every row.

The declared columns are the signals the seed reads first when training wobbles.
Stages may add columns (every ``mask/<reason>``, for example); extra columns are
kept by the contract.
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
    version="2.0",
    schema=pa.schema(
        [
            pa.field("step", pa.int64(), nullable=False),
            pa.field("mode", pa.string(), nullable=False),  # positive-only | full
            pa.field("loss", pa.float64(), nullable=False),
            pa.field("optim/lr", pa.float64()),
            pa.field("optim/grad_norm", pa.float64()),
            pa.field("advantage/positive", pa.int64()),
            pa.field("advantage/negative", pa.int64()),
            pa.field("advantage/mean", pa.float64()),
            pa.field("advantage/std", pa.float64()),
            pa.field("ratio/clip_fraction", pa.float64()),
            pa.field("mask/mismatch", pa.int64()),
            pa.field("mask/long_failure", pa.int64()),
            pa.field("mask/placeholder", pa.int64()),
            pa.field("mismatch/mean", pa.float64()),
            pa.field("mismatch/max", pa.float64()),
            pa.field("data/failed_max_response_tokens", pa.int64()),
            pa.field("tokens/per_sec", pa.float64()),
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
