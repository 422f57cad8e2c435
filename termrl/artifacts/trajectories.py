"""The trajectories artifact: one row per interaction chunk.

A chunk is one assistant turn that ends in an environment interaction (a tool
call) or ends the episode. The columns fall in two groups:

Chunk columns (differ row by row)
    chunk_index       0-based position in the episode
    prompt_ids        tokens fed to the model *since the previous chunk's response*
                      (the whole prompt for chunk 0; then the observation turn and the
                      next assistant header). Concatenating prompt_ids + response_ids over
                      the chunks in order gives exactly the token stream the model saw.
    response_ids      tokens the model generated, exactly as sampled
    response_logprobs the inference engine's log-probabilities of response_ids (μ)
    action            JSON list of tool calls parsed from the response
    call_format       how the calls were found: tool-call | fenced-bash | malformed | none
    observation       what the environment returned (as shown to the model)
    exit_code         the last command's exit status (null when nothing ran)
    replayed          (1.1) the response was replayed from a demonstration, not sampled by
                      the policy (null means false); the trainer gives it no RL loss

Episode columns (repeated on each of the episode's rows)
    reward, success, stop_reason, failure_type, masked, mask_reason, drop,
    placeholder, trainable, num_chunks, episode_tokens
    source            (1.1) ``policy`` (sampled by the policy; null means policy) or
                      ``expert`` (a demonstration: a verified golden solution replayed as
                      agent turns; every chunk ``replayed``, response_logprobs all 0.0,
                      reward 1.0, success true, group_id ``expert:<task_id>``)
    anchor            (1.1) 1-based chunk index where policy sampling started (null means 1,
                      from scratch). A policy episode started from anchor k of a
                      demonstration (chunk-initialized resampling) replays chunks 1 … k−1.
    shaping           (1.2) the behaviour-shaping reward of a policy episode (≤ 0: retry
                      loops, destructive commands, test access, each with rollout's weight;
                      0.0 with the penalties off; null means 0.0). Kept apart from
                      ``reward``, the tests' outcome: train adds the two before the group
                      advantage, eval never sees shaping.
    temperature       (1.3) the sampling temperature of the policy's responses (the
                      rollout's); train takes log πθ at it, as μ was. Null: not recorded —
                      an expert demonstration (nothing sampled) or a file older than 1.3.

A placeholder row stands in for an episode that produced nothing (env init
failed, sandbox unavailable, reward failed): empty token lists, ``masked``
true, ``placeholder`` true, zero reward — the batch keeps its shape and the
trainer gives it zero weight.

Version 1.1 added ``source``, ``replayed`` and ``anchor``; a 1.0 file reads with
them null (a policy episode sampled from scratch). Version 1.2 added ``shaping``;
an older file reads with it null (no shaping). Version 1.3 added ``temperature``; an
older file reads with it null, and ``sampling_temperature`` reports that none is
recorded (train then needs the temperature given: it refuses to guess).
"""

from __future__ import annotations

import os
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from termrl.artifacts.contract import (
    ArtifactSchema,
    Rows,
    read_artifact_with_added,
    write_artifact,
)
from termrl.errors import ArtifactError

__all__ = [
    "TRAJECTORIES",
    "UNSAMPLED_TEMPERATURE",
    "demonstration_rows",
    "read_trajectories",
    "sampling_temperature",
    "write_trajectories",
]

TRAJECTORIES = ArtifactSchema(
    name="trajectories",
    version="1.3",
    schema=pa.schema(
        [
            # identity
            pa.field("episode_id", pa.string(), nullable=False),
            pa.field("group_id", pa.string(), nullable=False),
            pa.field("task_id", pa.string(), nullable=False),
            pa.field("policy_version", pa.int64(), nullable=False),
            pa.field("mode", pa.string()),  # roll-managed | cli-native | eval
            pa.field("chunk_index", pa.int32(), nullable=False),
            # chunk
            pa.field("prompt_ids", pa.list_(pa.int32()), nullable=False),
            pa.field("response_ids", pa.list_(pa.int32()), nullable=False),
            pa.field("response_logprobs", pa.list_(pa.float32()), nullable=False),
            pa.field("response_text", pa.string()),
            pa.field("action", pa.string()),
            pa.field("call_format", pa.string()),
            pa.field("observation", pa.string()),
            pa.field("exit_code", pa.int32()),
            pa.field("gen_ms", pa.float64()),
            pa.field("exec_ms", pa.float64()),
            pa.field("replayed", pa.bool_()),  # 1.1
            # episode
            pa.field("reward", pa.float64(), nullable=False),
            pa.field("shaping", pa.float64()),  # 1.2
            pa.field("success", pa.bool_(), nullable=False),
            pa.field("stop_reason", pa.string(), nullable=False),
            pa.field("failure_type", pa.string()),
            pa.field("masked", pa.bool_(), nullable=False),
            pa.field("mask_reason", pa.string()),
            pa.field("drop", pa.bool_(), nullable=False),
            pa.field("placeholder", pa.bool_(), nullable=False),
            pa.field("trainable", pa.bool_(), nullable=False),
            pa.field("num_chunks", pa.int32()),
            pa.field("episode_tokens", pa.int64()),
            pa.field("source", pa.string()),  # 1.1: policy | expert
            pa.field("anchor", pa.int32()),  # 1.1
            pa.field("temperature", pa.float64()),  # 1.3
        ]
    ),
)

ADDED_IN_1_1 = ("replayed", "source", "anchor")
"""Columns a 1.0 file lacks; ``read_trajectories`` fills them with nulls."""
ADDED_IN_1_2 = ("shaping",)
"""Columns a 1.0 or 1.1 file lacks; ``read_trajectories`` fills them with nulls."""
ADDED_IN_1_3 = ("temperature",)
"""Columns a file older than 1.3 lacks; ``read_trajectories`` fills them with nulls."""
_ADDED = ADDED_IN_1_1 + ADDED_IN_1_2 + ADDED_IN_1_3


def write_trajectories(path: str | os.PathLike, rows: Rows) -> None:
    """Write a trajectories artifact atomically."""
    write_artifact(path, rows, TRAJECTORIES)


def read_trajectories(path: str | os.PathLike) -> pa.Table:
    """Read and validate a trajectories artifact; an older file gets the later columns as nulls."""
    return read_artifact_with_added(path, TRAJECTORIES, _ADDED)


def demonstration_rows(
    chunks: list[dict[str, Any]],
    *,
    episode_id: str,
    group_id: str,
    task_id: str,
    mode: str,
    reward: float,
    result: Any,
    policy_version: int = 0,
) -> list[dict[str, Any]]:
    """The rows of a demonstration (``source: expert``, a success, its group its own): each of
    ``chunks`` (chunk columns, in order) numbered from 0, marked ``replayed``, with the episode's
    columns; ``result`` is the replay's ``AgentEpisode``."""
    episode = {
        "episode_id": episode_id,
        "group_id": group_id,
        "task_id": task_id,
        "policy_version": policy_version,
        "mode": mode,
        "source": "expert",
        "anchor": None,
        "reward": reward,
        "success": True,
        "stop_reason": result.stop_reason,
        "failure_type": None,
        "masked": False,
        "mask_reason": None,
        "drop": False,
        "placeholder": False,
        "trainable": result.trainable,
        "num_chunks": len(chunks),
        "episode_tokens": result.episode_tokens,
    }
    return [
        {**chunk, **episode, "chunk_index": index, "replayed": True}
        for index, chunk in enumerate(chunks)
    ]


UNSAMPLED_TEMPERATURE = 1.0
"""What log πθ is taken at when nothing was sampled (demonstrations only): the plain likelihood."""


def sampling_temperature(path: str | os.PathLike, given: float | None = None) -> float:
    """The temperature to take log πθ at for the trajectories at ``path``:

    - the one recorded on their policy rows (1.3 on); ``given``, if set, must agree;
    - ``given``, for a file older than 1.3 whose policy rows record none (without it,
      an ``ArtifactError``: a rollout at 0.7 trained at 1.0 would be silently wrong);
    - ``UNSAMPLED_TEMPERATURE`` when no row was sampled (expert demonstrations only).

    Rows sampled at several temperatures cannot share one log πθ: an ``ArtifactError``."""
    try:
        names = set(pq.read_schema(path).names)
        columns = [c for c in ("temperature", "source") if c in names]
        table = pq.read_table(path, columns=columns)
    except (OSError, pa.ArrowInvalid) as exc:
        raise ArtifactError(f"cannot read trajectories {path}: {exc}") from exc
    sources = table.column("source").to_pylist() if "source" in names else [None] * len(table)
    sampled = [i for i, source in enumerate(sources) if source != "expert"]
    temperatures = table.column("temperature").to_pylist() if "temperature" in names else []
    found = sorted(
        {temperatures[i] for i in sampled if temperatures and temperatures[i] is not None}
    )
    if len(found) > 1:
        raise ArtifactError(
            f"{path}: rows sampled at several temperatures ({', '.join(map(str, found))}); "
            "train on one rollout's rows at a time"
        )
    if found:
        if given is not None and given != found[0]:
            raise ArtifactError(
                f"{path} was sampled at temperature {found[0]}, not the {given} given"
            )
        return found[0]
    if not sampled:
        return given if given is not None else UNSAMPLED_TEMPERATURE
    if given is None:
        raise ArtifactError(
            f"{path} records no sampling temperature (written before trajectories 1.3): "
            "give the rollout's (train: --set temperature=T)"
        )
    return given
