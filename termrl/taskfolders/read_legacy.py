"""Read a legacy Terminal-Bench task folder (``task.yaml``, ``run-tests.sh``, ``Dockerfile``
at the top) into a ``Task``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from termrl.artifacts.tasks import Task, TaskFile
from termrl.errors import TaskFormatError
from termrl.taskfolders.folder_files import folder_file, folder_files, folder_number, folder_text
from termrl.taskfolders.layout import (
    LEGACY_DEFAULTS,
    LEGACY_ROOT_FILES,
    LEGACY_SOLUTION_COMMAND,
    LEGACY_TEST_COMMAND,
)

__all__ = ["read_legacy"]


def read_legacy(folder: Path) -> Task:
    """The task of a legacy folder; raises ``TaskFormatError`` on any problem."""
    where = str(folder)
    try:
        config = yaml.safe_load(folder_text(folder, "task.yaml") or "")
    except yaml.YAMLError as exc:
        problem = str(exc).replace("\n", " ")
        raise TaskFormatError(where, f"unreadable task.yaml: {problem}") from exc
    if not isinstance(config, dict):
        raise TaskFormatError(where, "unreadable task.yaml: not a mapping")
    rest = dict(config)
    instruction = _instruction(where, rest)
    if not (folder / "run-tests.sh").is_file():
        raise TaskFormatError(where, "no tests (run-tests.sh missing)")
    if not (folder / "Dockerfile").is_file():
        raise TaskFormatError(where, "no Dockerfile")
    tags = rest.pop("tags", None) or []
    if not isinstance(tags, list):
        raise TaskFormatError(where, f"task.yaml: tags must be a list, got {tags!r}")
    agent_timeout = folder_number(
        folder, "max_agent_timeout_sec", rest.pop("max_agent_timeout_sec", None), float
    )
    test_timeout = folder_number(
        folder, "max_test_timeout_sec", rest.pop("max_test_timeout_sec", None), float
    )
    solution, solution_command = _solution(folder)
    test_files = [folder_file(folder, "run-tests.sh")]
    test_files = sorted(test_files + folder_files(folder, folder / "tests"), key=lambda f: f.path)
    return Task(
        id=folder.name,
        instruction=instruction,
        source="terminal-bench",
        family=str(rest.pop("category", None) or "unknown"),
        difficulty=str(rest.pop("difficulty", None) or "unknown"),
        tags=[str(t) for t in tags],
        layout="legacy",
        environment_files=folder_files(folder, folder, exclude=LEGACY_ROOT_FILES | {"tests"}),
        solution_files=solution,
        solution_command=solution_command,
        test_files=test_files,
        test_command=LEGACY_TEST_COMMAND,
        scoring="pytest-report",
        agent_timeout_sec=agent_timeout or LEGACY_DEFAULTS["agent_timeout_sec"],
        verifier_timeout_sec=test_timeout or LEGACY_DEFAULTS["verifier_timeout_sec"],
        build_timeout_sec=LEGACY_DEFAULTS["build_timeout_sec"],
        cpus=LEGACY_DEFAULTS["cpus"],
        memory_mb=LEGACY_DEFAULTS["memory_mb"],
        storage_mb=LEGACY_DEFAULTS["storage_mb"],
        allow_internet=LEGACY_DEFAULTS["allow_internet"],
        metadata={"metadata": json.loads(json.dumps(rest, default=str, sort_keys=True))}
        if rest
        else {},
    )


def _instruction(where: str, rest: dict[str, Any]) -> str:
    """``instruction``, taken out of ``rest``; the oldest 1.0 tasks have a list of keyed
    ``descriptions`` instead, whose ``base`` one is the instruction."""
    instruction = rest.pop("instruction", None)
    if instruction is None:
        descriptions = rest.get("descriptions") or []
        instruction = next(
            (
                d.get("description")
                for d in descriptions
                if isinstance(d, dict) and d.get("key") == "base"
            ),
            None,
        )
    if not isinstance(instruction, str) or not instruction.strip():
        raise TaskFormatError(where, "no instruction in task.yaml")
    return instruction


def _solution(folder: Path) -> tuple[list[TaskFile], str | None]:
    """The solution file and the command that runs it, if the task has one."""
    if (folder / "solution.sh").is_file():
        return [folder_file(folder, "solution.sh")], LEGACY_SOLUTION_COMMAND
    if (folder / "solution.yaml").is_file():
        # No single command: the yaml's commands run one by one (termrl.taskrun).
        return [folder_file(folder, "solution.yaml")], None
    return [], None
