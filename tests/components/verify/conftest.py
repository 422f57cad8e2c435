"""Fixtures of the verify tests: the planted-defect corpus and the local base images.

The corpus (``corpus/``) holds Harbor task folders, not tests of ours, so it is
never collected. Each folder's ``task.toml`` names its planted defect in
``[metadata].planted_defect``: the check that must reject it, or ``none``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from termrl.artifacts.tasks import Task
from termrl.taskfolders import import_task_folders

collect_ignore = ["corpus"]

CORPUS = Path(__file__).parent / "corpus"


def planted_defect(task: Task) -> str:
    """The check that must reject ``task`` ("none" for a good task)."""
    return task.metadata["metadata"]["planted_defect"]


@pytest.fixture(scope="session")
def corpus() -> list[Task]:
    report = import_task_folders([CORPUS])
    assert not report.errors, report.errors
    return report.tasks
