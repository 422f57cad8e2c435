"""Crash-safe, incremental output: one Parquet part per finished episode, merged at the end.

    <out>.parts/
      run.json                 what this rollout is (refuses to resume a different one)
      ep-<episode_id>.parquet  one finished episode, raw (before mask & filter)
      cancelled.jsonl          stragglers cancelled once the batch was complete
    <out>                      the trajectories artifact, written atomically by ``merge``

Each part is written atomically (temp file, fsync, rename: ``write_artifact``)
the moment its episode ends, so a crash loses at most the episodes in flight.
A rerun with the same ``--out`` reads the parts back and skips those
episodes. Parts keep the raw record (reward, failure type, exec log, a
multi-step task's step rewards, what scoring found tampered or broken) in
private ``_``-prefixed columns; mask & filter runs only at the merge, over the
whole batch, and the merged artifact carries none of the private columns.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

from components.rollout.episode import EpisodeIds, ExecRecord, RolloutEpisode
from termrl.artifacts.trajectories import read_trajectories, write_trajectories
from termrl.errors import ArtifactError, ConfigError

__all__ = ["CHUNK_COLUMNS", "PartWriter", "record_from_rows", "record_to_rows"]

CHUNK_COLUMNS = (
    "chunk_index",
    "prompt_ids",
    "response_ids",
    "response_logprobs",
    "response_text",
    "action",
    "call_format",
    "observation",
    "exit_code",
    "gen_ms",
    "exec_ms",
    "replayed",
)

_RUN_FILE = "run.json"
_CANCELLED_FILE = "cancelled.jsonl"


def record_to_rows(record: RolloutEpisode) -> list[dict[str, Any]]:
    """The raw part rows of a record: one per chunk, or one empty row when it has none."""
    episode = {
        "episode_id": record.ids.episode_id,
        "group_id": record.ids.group_id,
        "task_id": record.task_id,
        "policy_version": record.policy_version,
        "mode": record.mode,
        "source": "policy",
        "anchor": record.ids.anchor,
        "reward": record.reward,
        "success": record.success,
        "stop_reason": record.stop_reason,
        "failure_type": record.failure_type,
        "masked": False,
        "drop": False,
        "placeholder": not record.chunks,
        "trainable": record.trainable,
        "num_chunks": len(record.chunks),
        "episode_tokens": record.episode_tokens,
        "_group_index": record.ids.group_index,
        "_episode_index": record.ids.episode_index,
        "_rewarded": record.rewarded,
        "_error": record.error,
        "_execs": json.dumps([vars(e) for e in record.execs]),
        "_step_rewards": json.dumps(record.step_rewards),
        "_tampering": json.dumps(record.tampering),
        "_sandbox_broken": record.sandbox_broken,
        "_wall_sec": record.wall_sec,
        "_finished_at": record.finished_at,
    }
    if not record.chunks:
        return [
            {
                "chunk_index": 0,
                "prompt_ids": [],
                "response_ids": [],
                "response_logprobs": [],
                **episode,
            }
        ]
    return [{**{k: c.get(k) for k in CHUNK_COLUMNS}, **episode} for c in record.chunks]


def record_from_rows(rows: list[dict[str, Any]]) -> RolloutEpisode:
    """Inverse of ``record_to_rows``."""
    rows = sorted(rows, key=lambda r: r["chunk_index"])
    first = rows[0]
    ids = EpisodeIds(
        first["episode_id"],
        first["group_id"],
        int(first["_group_index"]),
        int(first["_episode_index"]),
        int(first.get("anchor") or 1),
    )
    chunks = [{k: r[k] for k in CHUNK_COLUMNS} for r in rows] if first["num_chunks"] else []
    return RolloutEpisode(
        ids=ids,
        task_id=first["task_id"],
        policy_version=first["policy_version"],
        mode=first["mode"],
        chunks=chunks,
        reward=first["reward"],
        success=first["success"],
        rewarded=first["_rewarded"],
        stop_reason=first["stop_reason"],
        failure_type=first["failure_type"],
        error=first["_error"],
        trainable=first["trainable"],
        episode_tokens=first["episode_tokens"] or 0,
        execs=[ExecRecord(**e) for e in json.loads(first["_execs"] or "[]")],
        step_rewards=json.loads(first.get("_step_rewards") or "[]"),  # older parts lack it
        tampering=tuple(json.loads(first.get("_tampering") or "[]")),
        sandbox_broken=bool(first.get("_sandbox_broken")),
        wall_sec=first["_wall_sec"],
        finished_at=first["_finished_at"],
    )


class PartWriter:
    """The sidecar folder of one rollout: write finished episodes, read them back, merge."""

    def __init__(self, parts_dir: Path, fingerprint: dict[str, Any]) -> None:
        self.dir = Path(parts_dir)
        self.fingerprint = fingerprint
        run_file = self.dir / _RUN_FILE
        if run_file.is_file():
            found = json.loads(run_file.read_text())
            if found != fingerprint:
                diff = sorted(
                    k for k in set(found) | set(fingerprint) if found.get(k) != fingerprint.get(k)
                )
                raise ConfigError(
                    f"{self.dir} holds finished episodes of a different rollout (differs in: "
                    f"{', '.join(diff)}); remove it or choose another --out"
                )
        else:
            self.dir.mkdir(parents=True, exist_ok=True)
            tmp = run_file.with_suffix(".tmp")
            tmp.write_text(json.dumps(fingerprint, indent=1, sort_keys=True))
            os.replace(tmp, run_file)

    def _part(self, episode_id: str) -> Path:
        return self.dir / f"ep-{episode_id}.parquet"

    def write(self, record: RolloutEpisode) -> Path:
        """Persist one finished episode (atomic)."""
        path = self._part(record.ids.episode_id)
        write_trajectories(path, record_to_rows(record))
        return path

    def parts(self) -> list[Path]:
        return sorted(self.dir.glob("ep-*.parquet"))

    def load(self) -> list[RolloutEpisode]:
        """Every finished episode on disk. A part that cannot be read (a disk fault) is skipped:
        its episode is simply run again."""
        for stale in self.dir.glob(".ep-*.tmp"):  # a write the crash interrupted
            stale.unlink(missing_ok=True)
        records = []
        for path in self.parts():
            try:
                rows = read_trajectories(path).to_pylist()
            except ArtifactError:
                path.unlink(missing_ok=True)
                continue
            if rows:
                records.append(record_from_rows(rows))
        return records

    def record_cancelled(self, entries: list[dict[str, Any]]) -> None:
        """Note stragglers that were cancelled (monitoring only; not needed to resume)."""
        with open(self.dir / _CANCELLED_FILE, "a") as handle:
            for entry in entries:
                handle.write(json.dumps(entry) + "\n")

    def cancelled(self) -> list[dict[str, Any]]:
        path = self.dir / _CANCELLED_FILE
        if not path.is_file():
            return []
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]

    def merge(
        self, rows: list[dict[str, Any]], out: Path, *, temperature: float, keep_parts: bool
    ) -> None:
        """Write the final artifact atomically, every policy row recording the sampling
        ``temperature`` (train reads it there; an expert row sampled nothing), then drop the
        sidecar folder (unless kept)."""
        write_trajectories(
            out,
            [
                {**row, "temperature": None if row.get("source") == "expert" else temperature}
                for row in rows
            ],
        )
        if not keep_parts:
            shutil.rmtree(self.dir, ignore_errors=True)
