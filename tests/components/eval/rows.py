"""Crafted eval-results rows for summary and report tests (they go through the real schema)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from termrl.artifacts.eval_results import read_eval_results, write_eval_results

__all__ = ["make_row", "sample_rows", "written"]


def make_row(task_id: str, trial: int, passed: bool, **extra: Any) -> dict[str, Any]:
    row: dict[str, Any] = {
        "run_id": "run-a",
        "task_id": task_id,
        "trial": trial,
        "agent": "policy",
        "model": "tiny",
        "family": "files",
        "difficulty": "easy",
        "passed": passed,
        "reward": float(passed),
        "failure_mode": None if passed else "wrong-result",
        "stop_reason": "done",
        "turns": 2,
        "prompt_tokens": 100,
        "completion_tokens": 20,
        "wall_sec": 3.0,
        "over_budget": False,
        "tool_calls": 2,
        "parallel_turns": 0,
        "read_only_calls": 1,
        "error": None,
        "calls_per_turn": [1, 1],
    }
    row.update(extra)
    return row


def sample_rows(run_id: str = "run-a", flip: bool = False) -> list[dict[str, Any]]:
    """3 tasks × 2 trials: hello 2/2, csv 1/2, tar 0/2 (flip: hello 0/2, tar 2/2)."""
    hello, tar = (False, True) if flip else (True, False)
    return [
        make_row("hello", 0, hello, run_id=run_id),
        make_row(
            "hello",
            1,
            hello,
            run_id=run_id,
            turns=4,
            calls_per_turn=[3, 1, 0, 1],
            parallel_turns=1,
            tool_calls=5,
            read_only_calls=4,
        ),
        make_row("csv", 0, True, run_id=run_id, family="data", difficulty="medium"),
        make_row(
            "csv",
            1,
            False,
            run_id=run_id,
            family="data",
            difficulty="medium",
            failure_mode="invalid-loop",
            turns=10,
            prompt_tokens=900,
            completion_tokens=100,
            calls_per_turn=[1] * 10,
            tool_calls=10,
            read_only_calls=0,
        ),
        make_row(
            "tar",
            0,
            tar,
            run_id=run_id,
            family="archives",
            difficulty="hard",
            failure_mode=None if tar else "timeout",
            over_budget=not tar,
            wall_sec=120.0,
        ),
        make_row(
            "tar",
            1,
            tar,
            run_id=run_id,
            family="archives",
            difficulty="hard",
            failure_mode=None if tar else "environment-error",
            turns=0,
            prompt_tokens=0,
            completion_tokens=0,
            calls_per_turn=[],
            tool_calls=0,
            read_only_calls=0,
            wall_sec=0.5,
        ),
    ]


def written(tmp_path: Path, rows: list[dict[str, Any]], name: str = "results.parquet") -> Path:
    """Write rows as a real eval-results artifact and return its path."""
    path = tmp_path / name
    write_eval_results(path, rows)
    read_eval_results(path)  # the schema accepts them
    return path
