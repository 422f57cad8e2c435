"""Numbers from eval-results rows: the run summary, grouped tables, KFP metrics.

    summarize(rows)               one dict: accuracy, pass@k, failure modes, tokens, turns, ...
    group_table(rows, "family")   one row per family (or difficulty): trials, pass rate, pass@k
    task_table(rows)              one row per task
    flat_metrics(summary)         "eval/accuracy"-style floats for KFP Metrics and logs

Accuracy is the share of passed trials, with its 95 % Wilson interval
(``accuracy_ci_low``/``_high``; ``pass_rate_ci_*`` in the tables); pass@k
(``components.eval.passk``) is the mean over tasks of the unbiased per-task
estimate, so with one trial per task pass@1 equals accuracy. Token and time
means are over the trials that reached the agent (rows with an environment
error are left out: they measure the harness).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from statistics import mean
from typing import Any

from components.eval.passk import default_ks, suite_pass_at_k
from components.eval.stats import wilson_interval
from components.eval.taxonomy import FAILURE_MODES

__all__ = [
    "difficulty_key",
    "flat_metrics",
    "group_table",
    "summarize",
    "task_counts",
    "task_table",
]

Row = Mapping[str, Any]
_DIFFICULTY_ORDER = ("easy", "medium", "hard", "expert")


def difficulty_key(name: str) -> tuple[int, str]:
    """Sort key that puts easy before medium before hard; unknown names after, by name."""
    return (
        _DIFFICULTY_ORDER.index(name) if name in _DIFFICULTY_ORDER else len(_DIFFICULTY_ORDER),
        name,
    )


def task_counts(rows: Iterable[Row]) -> dict[str, tuple[int, int]]:
    """(trials, passed) per task id."""
    counts: dict[str, list[int]] = {}
    for row in rows:
        entry = counts.setdefault(row["task_id"], [0, 0])
        entry[0] += 1
        entry[1] += bool(row["passed"])
    return {task: (n, c) for task, (n, c) in counts.items()}


def _mean(values: Iterable[Any]) -> float | None:
    kept = [float(v) for v in values if v is not None]
    return mean(kept) if kept else None


def _tokens(row: Row) -> int:
    return int(row.get("prompt_tokens") or 0) + int(row.get("completion_tokens") or 0)


def _interval(name: str, rows: Sequence[Row]) -> dict[str, float]:
    """The 95 % Wilson interval of the share of passed trials, as ``<name>_ci_low/high``."""
    low, high = wilson_interval(sum(bool(r["passed"]) for r in rows), len(rows))
    return {f"{name}_ci_low": low, f"{name}_ci_high": high}


def _pass_at(rows: Sequence[Row], ks: Sequence[int]) -> dict[str, float | None]:
    counts = list(task_counts(rows).values())
    return {f"pass@{k}": suite_pass_at_k(counts, k) for k in ks}


def _ks(rows: Sequence[Row]) -> list[int]:
    counts = task_counts(rows).values()
    return default_ks(min(n for n, _ in counts)) if counts else []


def summarize(rows: Sequence[Row]) -> dict[str, Any]:
    """The headline numbers of one run."""
    rows = list(rows)
    if not rows:
        return {"trials": 0, "tasks": 0}
    reached = [r for r in rows if r.get("failure_mode") != "environment-error"]
    modes = Counter(r["failure_mode"] for r in rows if r.get("failure_mode"))
    calls = sum(int(r.get("tool_calls") or 0) for r in rows)
    read_only = sum(int(r.get("read_only_calls") or 0) for r in rows)
    # Agent turns with their call counts (the oracle's solution steps are not agent turns).
    turns = sum(len(r.get("calls_per_turn") or []) for r in rows)
    first = rows[0]
    return {
        "run_id": first.get("run_id"),
        "agent": first.get("agent"),
        "model": first.get("model"),
        "tasks": len(task_counts(rows)),
        "trials": len(rows),
        "passed": sum(bool(r["passed"]) for r in rows),
        "accuracy": sum(bool(r["passed"]) for r in rows) / len(rows),
        **_interval("accuracy", rows),
        **_pass_at(rows, _ks(rows)),
        "mean_reward": _mean(r["reward"] for r in rows),
        "over_budget": sum(bool(r.get("over_budget")) for r in rows),
        "failure_modes": {m: modes.get(m, 0) for m in FAILURE_MODES},
        "mean_turns": _mean(r.get("turns") for r in reached),
        "mean_tokens": _mean(_tokens(r) for r in reached),
        "mean_wall_sec": _mean(r.get("wall_sec") for r in reached),
        "tool_calls": calls,
        "read_only_calls": read_only,
        "state_changing_calls": calls - read_only,
        "calls_per_turn": calls / turns if turns else None,
        "parallel_turns": sum(int(r.get("parallel_turns") or 0) for r in rows),
    }


def group_table(rows: Sequence[Row], key: str) -> list[dict[str, Any]]:
    """One row per value of ``key`` (family, difficulty): trials, pass rate, pass@k."""
    groups: dict[str, list[Row]] = {}
    for row in rows:
        groups.setdefault(str(row.get(key) or "unknown"), []).append(row)
    ks = _ks(rows)
    out = []
    for name in sorted(groups, key=difficulty_key if key == "difficulty" else str):
        members = groups[name]
        out.append(
            {
                key: name,
                "tasks": len(task_counts(members)),
                "trials": len(members),
                "pass_rate": sum(bool(r["passed"]) for r in members) / len(members),
                **_interval("pass_rate", members),
                **_pass_at(members, ks),
                "mean_turns": _mean(r.get("turns") for r in members),
                "mean_tokens": _mean(_tokens(r) for r in members),
            }
        )
    return out


def task_table(rows: Sequence[Row]) -> list[dict[str, Any]]:
    """One row per task: its family and difficulty, pass rate, pass@k and typical failure."""
    by_task: dict[str, list[Row]] = {}
    for row in rows:
        by_task.setdefault(row["task_id"], []).append(row)
    ks = _ks(rows)
    out = []
    for task_id in sorted(by_task):
        members = by_task[task_id]
        modes = Counter(r["failure_mode"] for r in members if r.get("failure_mode"))
        out.append(
            {
                "task_id": task_id,
                "family": members[0].get("family"),
                "difficulty": members[0].get("difficulty"),
                "trials": len(members),
                "passed": sum(bool(r["passed"]) for r in members),
                "pass_rate": sum(bool(r["passed"]) for r in members) / len(members),
                **_interval("pass_rate", members),
                **_pass_at(members, ks),
                "mean_turns": _mean(r.get("turns") for r in members),
                "mean_tokens": _mean(_tokens(r) for r in members),
                "mean_wall_sec": _mean(r.get("wall_sec") for r in members),
                "over_budget": sum(bool(r.get("over_budget")) for r in members),
                "failure_modes": ", ".join(f"{m} ×{n}" for m, n in modes.most_common()),
            }
        )
    return out


def flat_metrics(summary: Mapping[str, Any]) -> dict[str, float]:
    """The summary's numbers under ``eval/`` names (KFP Metrics, logs); None values dropped."""
    out: dict[str, float] = {}
    for name, value in summary.items():
        if name == "failure_modes":
            out.update({f"eval/failure/{m}": float(n) for m, n in value.items()})
        elif isinstance(value, bool | int | float) and value is not None:
            out[f"eval/{name}"] = float(value)
    return out
