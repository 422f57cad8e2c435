"""Find Terminal-Bench task folders and read them (Harbor and legacy layouts) into ``Task`` objects.

    read.py          finding folders, importing many, reading one (checks shared by both layouts)
    read_harbor.py   the Harbor layout (task.toml)
    read_legacy.py   the legacy layout (task.yaml)
    folder_files.py  a folder's files and typed values

Every problem with a folder becomes a one-line ``TaskFormatError`` naming the
folder; ``import_task_folders`` collects them all instead of stopping at the
first, so a user sees every bad folder in one run. File bytes and mode bits
are kept exactly. A symlink that points outside the task folder is refused (a
task must not smuggle host files into an image); one that points inside is
read as the file it points to. Each task leaves with its Terminal-Bench
adaptations recorded (``termrl.tbcompat.adapt``: base-image stand-ins, the
offline test kit); its bytes stay as they were.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from termrl.artifacts.tasks import Task
from termrl.errors import TaskFormatError
from termrl.taskfolders.read_harbor import read_harbor
from termrl.taskfolders.read_legacy import read_legacy
from termrl.tbcompat.adapt import with_adaptations
from termrl.tbcompat.runnable import unmet_requirements

__all__ = ["ImportReport", "find_task_folders", "import_task_folders", "read_task_folder"]

log = logging.getLogger("termrl.taskfolders")

TASK_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
TASK_MARKERS = ("task.toml", "task.yaml", "instruction.md")


@dataclass
class ImportReport:
    """The outcome of importing many folders: good tasks and one error per bad folder."""

    tasks: list[Task] = field(default_factory=list)
    errors: list[TaskFormatError] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    """What was kept but is not acted on (keys termrl does not know), one line each, folder first."""


def _is_task_folder(path: Path) -> bool:
    return any((path / marker).exists() for marker in TASK_MARKERS)


def find_task_folders(
    paths: Iterable[str | os.PathLike],
) -> tuple[list[Path], list[TaskFormatError]]:
    """The task folders under each path: the path itself, or any folder below it."""
    folders: list[Path] = []
    errors: list[TaskFormatError] = []
    for raw in paths:
        root = Path(raw)
        if not root.is_dir():
            errors.append(TaskFormatError(str(root), "not a folder"))
            continue
        if _is_task_folder(root):
            folders.append(root)
            continue
        found = [
            Path(dirpath)
            for dirpath, dirnames, _ in os.walk(root)
            if not Path(dirpath).name.startswith(".") and _is_task_folder(Path(dirpath))
        ]
        # A task folder's own subfolders (tests/, environment/) are not tasks.
        found = sorted(p for p in found if not any(q in p.parents for q in found))
        if not found:
            errors.append(
                TaskFormatError(str(root), "no task folders found (no task.toml or task.yaml)")
            )
        folders.extend(found)
    return folders, errors


def import_task_folders(paths: Iterable[str | os.PathLike]) -> ImportReport:
    """Read every task folder under ``paths``; bad folders are reported, not raised."""
    folders, errors = find_task_folders(paths)
    report = ImportReport(errors=errors)
    seen: dict[str, Path] = {}
    for folder in folders:
        try:
            task = read_task_folder(folder, report.warnings)
        except TaskFormatError as exc:
            report.errors.append(exc)
            continue
        if task.id in seen:
            report.errors.append(
                TaskFormatError(
                    str(folder), f"duplicate task id {task.id!r} (also {seen[task.id]})"
                )
            )
            continue
        seen[task.id] = folder
        report.tasks.append(task)
    return report


def read_task_folder(folder: str | os.PathLike, warnings: list[str] | None = None) -> Task:
    """Read one task folder in either layout; raises ``TaskFormatError`` on any problem.

    Warnings (keys kept but not acted on) are appended to ``warnings``, or logged without one.
    A task that asks for what this machine cannot give (``termrl.tbcompat.runnable``) is refused.
    """
    folder = Path(folder)
    if not TASK_ID.match(folder.name):
        raise TaskFormatError(str(folder), f"folder name {folder.name!r} is not a valid task id")
    has_toml, has_yaml = (folder / "task.toml").is_file(), (folder / "task.yaml").is_file()
    if has_toml and has_yaml:
        raise TaskFormatError(str(folder), "has both task.toml (Harbor) and task.yaml (legacy)")
    _check_links(folder)
    if not has_toml and not has_yaml:
        raise TaskFormatError(str(folder), "no task.toml (Harbor) or task.yaml (legacy)")
    found: list[str] = []
    task = with_adaptations(read_harbor(folder, found) if has_toml else read_legacy(folder))
    unmet = unmet_requirements(task)
    if unmet:
        raise TaskFormatError(str(folder), "cannot run here: " + "; ".join(unmet))
    for warning in found:  # the caller's to show when it collects them, else logged
        if warnings is None:
            log.warning("%s: %s", folder, warning)
        else:
            warnings.append(f"{folder}: {warning}")
    return task


def _check_links(folder: Path) -> None:
    root = folder.resolve()
    for dirpath, dirnames, filenames in os.walk(folder):
        for name in dirnames + filenames:
            path = Path(dirpath) / name
            if not path.is_symlink():
                continue
            target = path.resolve()
            if root not in target.parents and target != root:
                raise TaskFormatError(
                    str(folder),
                    f"{path.relative_to(folder)} is a symlink escaping the folder (-> {os.readlink(path)})",
                )
            if target.is_dir():
                raise TaskFormatError(
                    str(folder), f"{path.relative_to(folder)} is a symlinked folder (not supported)"
                )
