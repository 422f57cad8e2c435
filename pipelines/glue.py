"""The curriculum's glue between stages, tested without KFP.

Two small steps that belong to no stage, because each looks at the run as a
whole rather than at one artifact (the comparison of the evaluated policies is
``components.eval.compare``):

    materialize_model  the starting policy as a model artifact (hard links, no copy)
    curate_pools       admitted tasks -> imitation pool, phase-1 pool, phase-2 pool

The pools follow the seed's curriculum: phase 1 trains positive-only on the
large synthetic pool; phase 2 trains with the full signal on a smaller pool of
high-quality tasks (expert tasks when given, else the best-verified synthetic
ones). Held-out tasks come from their own synthesis (other seeds, and families
left out of training) and are never trained on.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from termrl.artifacts import Task, load_tasks, read_verdicts, save_tasks
from termrl.errors import ConfigError

__all__ = ["DIFFICULTY_RANK", "curate_pools", "materialize_model"]

DIFFICULTY_RANK = {"easy": 0, "medium": 1, "hard": 2, "expert": 3}
"""Harder tasks first when the phase-2 pool is picked from verified synthetic tasks."""


def materialize_model(source: str, out: str | os.PathLike) -> Path:
    """Place the model folder ``source`` ('' = the embedded default policy) at ``out`` (hard links)."""
    from termrl.llm.models import place_model, resolve_model_path

    return place_model(resolve_model_path(source or None), out)


def _rank(seed: int, task_id: str) -> str:
    return hashlib.sha256(f"{seed}:{task_id}".encode()).hexdigest()


def curate_pools(
    admitted: str | os.PathLike,
    verdicts: str | os.PathLike,
    imitation_out: str | os.PathLike,
    train_out: str | os.PathLike,
    expert_out: str | os.PathLike,
    *,
    imitation_fraction: float,
    expert_tasks: str,
    expert_count: int,
    seed: int,
) -> dict[str, float]:
    """Split the admitted tasks into the imitation, phase-1 and phase-2 pools; write each as a tasks artifact.

    The imitation pool (``imitation_fraction`` of each family, picked by a seeded
    hash of the task id) is what the imitation step trains on; the rest is the
    phase-1 pool, so RL learns on tasks the policy was never shown (on the tasks it
    imitated it succeeds every time, and a group of equal rewards has no signal).
    ``expert_tasks`` (a tasks artifact or a folder of Terminal-Bench task folders)
    becomes the phase-2 pool when given; otherwise the ``expert_count`` phase-1
    tasks with the lowest false-positive risk, harder first. Held-out tasks are
    never curated from these: the curriculum synthesizes them apart, from other seeds.
    The knobs have no defaults here: the curriculum's parameters are their one source.
    """
    problems = []
    if not 0.0 < imitation_fraction < 1.0:
        problems.append(f"imitation_fraction must be in (0, 1), not {imitation_fraction}")
    if expert_count < 1:
        problems.append(f"expert_count must be >= 1, not {expert_count}")
    tasks = load_tasks(admitted)
    if len(tasks) < 2:
        problems.append(
            f"verify admitted {len(tasks)} task(s); the curriculum needs at least 2 "
            "(one to imitate, one to learn on): synthesize more tasks"
        )
    if problems:
        raise ConfigError(problems)
    by_family: dict[str, list[Task]] = {}
    for task in sorted(tasks, key=lambda t: _rank(seed, t.id)):
        by_family.setdefault(task.family or "", []).append(task)
    imitation: list[Task] = []
    for family_tasks in by_family.values():
        imitation += family_tasks[: round(imitation_fraction * len(family_tasks))]
    if not imitation or len(imitation) == len(tasks):  # tiny runs: one task per pool at least
        imitation = sorted(tasks, key=lambda t: _rank(seed, t.id))[
            : max(1, min(len(tasks) - 1, len(imitation)))
        ]
    taken = {t.id for t in imitation}
    pool = [t for t in tasks if t.id not in taken]
    if expert_tasks:
        expert = _load_any(expert_tasks)
        if not expert:
            raise ConfigError(f"expert_tasks: {expert_tasks} holds no task")
    else:
        risk = {
            row["task_id"]: row["false_positive_risk"]
            for row in read_verdicts(verdicts).to_pylist()
        }
        expert = sorted(
            pool,
            key=lambda t: (
                risk.get(t.id) or 0.0,
                -DIFFICULTY_RANK.get(t.difficulty, 1),
                _rank(seed, t.id),
            ),
        )[:expert_count]
    imitation = [t for t in tasks if t.id in taken]
    save_tasks(imitation_out, imitation)
    save_tasks(train_out, pool)
    save_tasks(expert_out, expert)
    return {
        "curate/imitation_pool": float(len(imitation)),
        "curate/train_pool": float(len(pool)),
        "curate/expert_pool": float(len(expert)),
    }


def _load_any(path: str) -> list[Task]:
    """Tasks from a tasks artifact or from Terminal-Bench task folders."""
    if not Path(path).is_dir():
        return load_tasks(path)
    from termrl.taskfolders import import_task_folders

    imported = import_task_folders([path])
    if imported.errors:
        raise ConfigError([f"expert_tasks: {e}" for e in imported.errors])
    return imported.tasks
