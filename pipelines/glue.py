"""The curriculum's glue between stages, tested without KFP.

Three small steps that belong to no stage, because each looks at the run as a
whole rather than at one artifact:

    materialize_model  the starting policy as a model artifact (hard links, no copy)
    curate_pools       admitted tasks -> phase-1 pool, phase-2 pool, held-out tasks
    compare_evals      base and final eval results -> one HTML report + headline numbers

The pools follow the seed's curriculum: phase 1 trains positive-only on the
large synthetic pool; phase 2 trains with the full signal on a smaller pool of
high-quality tasks (expert tasks when given, else the best-verified synthetic
ones); the held-out tasks are never trained on and measure base vs final.
"""

from __future__ import annotations

import hashlib
import math
import os
import shutil
from pathlib import Path
from typing import Any

from termrl.artifacts import Task, load_tasks, read_eval_results, read_verdicts, save_tasks
from termrl.errors import ConfigError

__all__ = ["DIFFICULTY_RANK", "compare_evals", "curate_pools", "materialize_model", "pass_rate_table"]

DIFFICULTY_RANK = {"easy": 0, "medium": 1, "hard": 2, "expert": 3}
"""Harder tasks first when the phase-2 pool is picked from verified synthetic tasks."""


def materialize_model(source: str, out: str | os.PathLike) -> Path:
    """Place the model folder ``source`` ('' = the embedded default policy) at ``out``.

    Files are hard-linked when ``out`` is on the same file system (the model is
    never written in place; every stage writes new folders), copied otherwise.
    """
    from termrl.llm.models import resolve_model_path

    folder = resolve_model_path(source or None)
    out = Path(out)
    if out.exists():
        shutil.rmtree(out)

    def link_or_copy(src: str, dst: str) -> None:
        try:
            os.link(src, dst)
        except OSError:
            shutil.copy2(src, dst)

    shutil.copytree(folder, out, copy_function=link_or_copy)
    return out


def _rank(seed: int, task_id: str) -> str:
    return hashlib.sha256(f"{seed}:{task_id}".encode()).hexdigest()


def curate_pools(
    admitted: str | os.PathLike,
    verdicts: str | os.PathLike,
    train_out: str | os.PathLike,
    expert_out: str | os.PathLike,
    heldout_out: str | os.PathLike,
    *,
    heldout_fraction: float = 0.25,
    expert_tasks: str = "",
    expert_count: int = 4,
    seed: int = 0,
) -> dict[str, float]:
    """Split the admitted tasks into the three pools; write each as a tasks artifact.

    Held-out tasks are drawn by a seeded hash of the task id (stable when tasks
    are added), at least one, and never all. ``expert_tasks`` (a tasks artifact
    or a folder of Terminal-Bench task folders) becomes the phase-2 pool when
    given; otherwise the ``expert_count`` remaining tasks with the lowest
    false-positive risk, harder first.
    """
    problems = []
    if not 0.0 < heldout_fraction < 1.0:
        problems.append(f"heldout_fraction must be in (0, 1), not {heldout_fraction}")
    if expert_count < 1:
        problems.append(f"expert_count must be >= 1, not {expert_count}")
    tasks = load_tasks(admitted)
    if len(tasks) < 2:
        problems.append(f"verify admitted {len(tasks)} task(s); the curriculum needs at least 2 "
                        "(one to train on, one held out): synthesize more tasks")  # fmt: skip
    if problems:
        raise ConfigError(problems)
    ordered = sorted(tasks, key=lambda t: _rank(seed, t.id))
    n_heldout = min(max(1, math.ceil(heldout_fraction * len(tasks))), len(tasks) - 1)
    heldout, pool = ordered[:n_heldout], ordered[n_heldout:]
    heldout_ids = {t.id for t in heldout}

    if expert_tasks:
        expert = [t for t in _load_any(expert_tasks) if t.id not in heldout_ids]
        if not expert:
            raise ConfigError(f"expert_tasks: {expert_tasks} holds no task outside the held-out set")
    else:
        risk = {row["task_id"]: row["false_positive_risk"] for row in read_verdicts(verdicts).to_pylist()}
        expert = sorted(pool, key=lambda t: (risk.get(t.id) or 0.0, -DIFFICULTY_RANK.get(t.difficulty, 1),
                                             _rank(seed, t.id)))[:expert_count]  # fmt: skip
    save_tasks(train_out, pool)
    save_tasks(expert_out, expert)
    save_tasks(heldout_out, heldout)
    return {"curate/train_pool": float(len(pool)), "curate/expert_pool": float(len(expert)),
            "curate/heldout": float(len(heldout))}  # fmt: skip


def _load_any(path: str) -> list[Task]:
    """Tasks from a tasks artifact or from Terminal-Bench task folders."""
    if not Path(path).is_dir():
        return load_tasks(path)
    from termrl.taskfolders import import_task_folders

    imported = import_task_folders([path])
    if imported.errors:
        raise ConfigError([f"expert_tasks: {e}" for e in imported.errors])
    return imported.tasks


def pass_rate_table(runs: dict[str, list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """One row per run label: tasks, trials, passed, pass rate (the printed base-vs-final table)."""
    table = []
    for label, rows in runs.items():
        passed = sum(bool(r["passed"]) for r in rows)
        table.append({"policy": label, "tasks": len({r["task_id"] for r in rows}), "trials": len(rows),
                      "passed": passed, "pass_rate": passed / len(rows) if rows else 0.0})  # fmt: skip
    return table


def compare_evals(
    base_results: str | os.PathLike, final_results: str | os.PathLike, report_out: str | os.PathLike
) -> dict[str, float]:
    """The comparison report of base vs final on the held-out tasks; returns the headline numbers."""
    from components.eval.report import write_report

    runs = {"base": read_eval_results(base_results).to_pylist(),
            "final": read_eval_results(final_results).to_pylist()}  # fmt: skip
    write_report(report_out, list(runs.items()), title="termrl curriculum: base vs final policy (held-out tasks)")
    rates = {row["policy"]: row["pass_rate"] for row in pass_rate_table(runs)}
    return {"eval/base_pass_rate": rates["base"], "eval/final_pass_rate": rates["final"],
            "eval/pass_rate_delta": rates["final"] - rates["base"]}  # fmt: skip
