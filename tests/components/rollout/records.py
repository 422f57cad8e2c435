"""Hand-built episode records for the unit tests of mask & filter, monitor and writer."""

from __future__ import annotations

import json

from components.rollout.episode import EpisodeIds, ExecRecord, RolloutEpisode

__all__ = ["chunk", "record"]


def chunk(index: int, command: str | None = "ls", *, response_tokens: int = 3) -> dict:
    calls = (
        [{"name": "bash", "arguments": {"command": command}}]
        if command
        else [{"name": "done", "arguments": {}}]
    )
    return {
        "chunk_index": index,
        "prompt_ids": [1, 2],
        "response_ids": list(range(response_tokens)),
        "response_logprobs": [-0.5] * response_tokens,
        "response_text": "x",
        "action": json.dumps(calls),
        "call_format": "tool-call",
        "observation": "ok",
        "exit_code": 0 if command else None,
        "gen_ms": 1.0,
        "exec_ms": 2.0,
        "replayed": False,
    }


def record(
    group: int = 0,
    episode: int = 0,
    *,
    task: str = "t",
    commands: tuple[str, ...] = ("ls",),
    failure: str | None = None,
    success: bool = True,
    stop: str = "done",
    rewarded: bool = True,
    timed_out: tuple[bool, ...] = (),
    response_tokens: int = 3,
    finished_at: float = 0.0,
    exit_codes: tuple[int | None, ...] = (),
) -> RolloutEpisode:
    chunks = [chunk(i, c, response_tokens=response_tokens) for i, c in enumerate(commands)]
    if stop == "done":
        chunks.append(chunk(len(chunks), None, response_tokens=response_tokens))
    execs = [
        ExecRecord(
            c,
            (exit_codes[i] if i < len(exit_codes) else 0),
            (timed_out[i] if i < len(timed_out) else False),
            0.1,
        )
        for i, c in enumerate(commands)
    ]
    return RolloutEpisode(
        ids=EpisodeIds(f"g{group}-e{episode}", f"g{group}", group, episode),
        task_id=task,
        policy_version=0,
        mode="roll-managed",
        chunks=chunks,
        reward=1.0 if success else 0.0,
        success=success,
        rewarded=rewarded and failure is None,
        stop_reason="error" if failure and not chunks else stop,
        failure_type=failure,
        trainable=True,
        episode_tokens=10 * len(chunks),
        execs=execs,
        wall_sec=1.0,
        finished_at=finished_at,
    )
