"""Write tasks as Harbor task folders.

The folder is written beside its final place and renamed into it, so a crash
never leaves half a task. Row fields that Harbor has no home for (source,
layout, commands, scoring, seed, perturbations, adaptations) go into
``[metadata.termrl]``, and only when they differ from what a plain Harbor folder
implies; top-level keys that are not Harbor's go into ``[metadata.termrl.extra]``
(``termrl.taskfolders.schema``), so Harbor's linter finds only its own fields — so exporting a Harbor task gives back its own ``task.toml`` keys,
and import → export → import gives identical rows for every task.
"""

from __future__ import annotations

import copy
import json
import os
import shutil
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import tomli_w

from termrl.artifacts.tasks import Task, TaskFile
from termrl.taskfolders.layout import HARBOR_SOLUTION_COMMAND, HARBOR_TEST_COMMAND
from termrl.taskfolders.schema import TERMRL_TABLE, split_extra

__all__ = ["export_task", "export_tasks", "task_toml"]


def task_toml(task: Task) -> dict[str, Any]:
    """The task.toml content for ``task`` (its metadata merged with the mapped fields)."""
    config, extra = split_extra(copy.deepcopy(task.metadata))
    metadata = config.setdefault("metadata", {})
    if task.difficulty != "unknown":
        metadata["difficulty"] = task.difficulty
    if task.family != "unknown":
        metadata["category"] = task.family
    if task.tags:
        metadata["tags"] = list(task.tags)
    sections = {
        "agent": {"timeout_sec": task.agent_timeout_sec},
        "verifier": {"timeout_sec": task.verifier_timeout_sec},
        "environment": {
            "build_timeout_sec": task.build_timeout_sec,
            "cpus": task.cpus,
            "memory_mb": task.memory_mb,
            "storage_mb": task.storage_mb,
            "allow_internet": task.allow_internet,
        },
    }
    for section, values in sections.items():
        for key, value in values.items():
            if value is not None:
                config.setdefault(section, {})[key] = value

    has_solve = any(f.path == "solve.sh" for f in task.solution_files)
    ours: dict[str, Any] = {}
    if task.source != "terminal-bench":
        ours["source"] = task.source
    if task.layout != "harbor":
        ours["layout"] = task.layout
    if task.solution_command != (HARBOR_SOLUTION_COMMAND if has_solve else None):
        ours["solution_command"] = task.solution_command or ""
    if task.test_command != HARBOR_TEST_COMMAND:
        ours["test_command"] = task.test_command
    if task.scoring != "reward-file":
        ours["scoring"] = task.scoring
    if task.seed is not None:
        ours["seed"] = task.seed
    if task.perturbations:
        ours["perturbations"] = list(task.perturbations)
    if task.adaptations:
        ours["adaptations"] = json.dumps(task.adaptations, sort_keys=True)
    if extra:
        ours["extra"] = extra
    if ours:
        metadata[TERMRL_TABLE] = ours
    if not metadata:
        del config["metadata"]
    return config


def _write_files(base: Path, files: Iterable[TaskFile]) -> None:
    for file in files:
        target = base / file.path
        if ".." in Path(file.path).parts or Path(file.path).is_absolute():
            raise ValueError(f"task file path escapes its folder: {file.path!r}")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(file.data)
        os.chmod(target, file.mode)


def export_task(task: Task, out_dir: str | os.PathLike, *, overwrite: bool = False) -> Path:
    """Write ``task`` as the Harbor folder ``out_dir/<task.id>``; returns its path."""
    out_dir = Path(out_dir)
    final = out_dir / task.id
    if final.exists() and not overwrite:
        raise FileExistsError(f"{final} exists (pass overwrite=True / --force to replace it)")
    out_dir.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{task.id}.", dir=out_dir))
    try:
        (staging / "instruction.md").write_text(task.instruction, encoding="utf-8")
        (staging / "task.toml").write_bytes(tomli_w.dumps(task_toml(task)).encode())
        _write_files(staging / "environment", task.environment_files)
        _write_files(staging / "solution", task.solution_files)
        _write_files(staging / "tests", task.test_files)
        os.chmod(staging, 0o755)
        if final.exists():
            shutil.rmtree(final)
        staging.rename(final)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return final


def export_tasks(tasks: Iterable[Task], out_dir: str | os.PathLike, *, overwrite: bool = False) -> list[Path]:
    """Export every task; refuses to start when any target folder exists (unless overwrite)."""
    tasks = list(tasks)
    if not overwrite:
        clashes = [str(Path(out_dir) / t.id) for t in tasks if (Path(out_dir) / t.id).exists()]
        if clashes:
            raise FileExistsError(f"{len(clashes)} task folder(s) exist: {', '.join(clashes[:5])}")
    return [export_task(t, out_dir, overwrite=overwrite) for t in tasks]
