"""Read a Harbor task folder (``task.toml``, ``instruction.md``, ``environment/``,
``solution/``, ``tests/``, or ``steps/`` for a multi-step task) into a ``Task``.

termrl's own keys live in ``[metadata.termrl]`` (``[termrl]`` at the top level before
schema 1.4); Harbor tables termrl does not act on are kept in the task's metadata with a
warning. A ``tests/test.sh`` or ``solution/solve.sh`` that termrl's export generated is
recognised by its bytes and left out again (``_without_generated``).
"""

from __future__ import annotations

import copy
import json
import re
import tomllib
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from termrl.artifacts.tasks import Task, TaskFile
from termrl.errors import TaskFormatError
from termrl.taskfolders.folder_files import folder_files, folder_number, folder_text
from termrl.taskfolders.layout import (
    HARBOR_DEFAULTS,
    HARBOR_SOLUTION_COMMAND,
    HARBOR_TEST_COMMAND,
    TERMRL_KEYS,
    harbor_solve_sh,
    harbor_test_sh,
)
from termrl.taskfolders.runconfig import pop_field, run_config
from termrl.taskfolders.schema import (
    HARBOR_TABLES,
    TERMRL_TABLE,
    split_extra,
    unsupported_fields,
)
from termrl.taskrun import solution_steps

__all__ = ["read_harbor"]


def read_harbor(folder: Path, warnings: list[str]) -> Task:
    """The task of a Harbor folder; raises ``TaskFormatError`` on the first problem, adds a
    line to ``warnings`` for each table kept but not acted on."""
    where = str(folder)
    config = _load_task_toml(folder)
    instruction = folder_text(folder, "instruction.md")
    multi_step = "steps" in config
    if not multi_step and (not instruction or not instruction.strip()):
        raise TaskFormatError(where, "no instruction (instruction.md missing or empty)")
    unsupported = unsupported_fields(config)
    if unsupported:
        raise TaskFormatError(where, "task.toml: " + "; ".join(unsupported))
    rest = copy.deepcopy(config)
    ours, extra = _pop_termrl_table(where, rest)
    warnings += [
        f"task.toml: [{key}] is not a Harbor table termrl knows: kept in the task, not acted on"
        for key in sorted(split_extra(rest)[1])
    ]
    rest.update(extra)
    _check_tests_present(folder, ours, multi_step=multi_step)
    run = run_config(folder, rest, warnings)  # a multi-step task: each step's tests checked there
    step_files = folder_files(folder, folder / "steps")
    if (
        not instruction or not instruction.strip()
    ):  # a multi-step task needs none: its steps have theirs
        first = f"{run['steps'][0]['name']}/instruction.md"
        instruction = next(f for f in step_files if f.path == first).data.decode()
    if not run["docker_image"] and not (folder / "environment" / "Dockerfile").is_file():
        raise TaskFormatError(
            where, "no environment/Dockerfile (and no [environment].docker_image)"
        )
    tags = pop_field(rest, "metadata", "tags") or []
    if not isinstance(tags, list) or not all(isinstance(t, str) for t in tags):
        raise TaskFormatError(
            where, f"task.toml: [metadata].tags must be a list of strings, got {tags!r}"
        )
    values = _harbor_values(folder, rest)
    run["allow_internet"] = bool(
        HARBOR_DEFAULTS["allow_internet"]
        if run["allow_internet"] is None
        else run["allow_internet"]
    )
    unknown = set(ours) - set(TERMRL_KEYS)
    if unknown:
        raise TaskFormatError(where, f"task.toml: unknown [termrl] keys {sorted(unknown)}")
    task = _harbor_task(folder, instruction, tags, values, ours, rest, run, step_files)
    return replace(task, solution_files=_solution_files(folder, ours, task))


def _load_task_toml(folder: Path) -> dict[str, Any]:
    try:
        return tomllib.loads(folder_text(folder, "task.toml") or "")
    except tomllib.TOMLDecodeError as exc:
        raise TaskFormatError(str(folder), f"unreadable task.toml: {exc}") from exc


def _pop_termrl_table(where: str, rest: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """termrl's own keys, taken out of ``rest``, and their ``extra`` table (non-Harbor keys
    that export moved there)."""
    # Exports before schema 1.4 wrote [termrl] at the top level; now it is [metadata.termrl].
    ours = rest.pop(TERMRL_TABLE, None)
    if ours is None:
        ours = pop_field(rest, "metadata", TERMRL_TABLE) or {}
    if not isinstance(ours, dict):
        raise TaskFormatError(where, "task.toml: [metadata.termrl] must be a table")
    ours = dict(ours)
    extra = ours.pop("extra", {})
    if not isinstance(extra, dict) or set(extra) & HARBOR_TABLES:
        raise TaskFormatError(
            where, "task.toml: [metadata.termrl.extra] must be a table of non-Harbor keys"
        )
    return ours, extra


def _check_tests_present(folder: Path, ours: dict[str, Any], *, multi_step: bool) -> None:
    """A ``tests/test.sh``; an exported legacy task names its own test script in
    ``[termrl].test_command`` and needs only a non-empty ``tests/``."""
    if "test_command" in ours:
        if not folder_files(folder, folder / "tests"):
            raise TaskFormatError(str(folder), "no tests (tests/ missing or empty)")
    elif not multi_step and not (folder / "tests" / "test.sh").is_file():
        raise TaskFormatError(str(folder), "no tests (tests/test.sh missing)")


def _harbor_values(folder: Path, rest: dict[str, Any]) -> dict[str, Any]:
    """Metadata, timeouts and resources, taken out of ``rest``; Harbor's default where unset."""
    values: dict[str, Any] = {
        "difficulty": pop_field(rest, "metadata", "difficulty"),
        "family": pop_field(rest, "metadata", "category"),
        "agent_timeout_sec": folder_number(
            folder, "[agent].timeout_sec", pop_field(rest, "agent", "timeout_sec"), float
        ),
        "verifier_timeout_sec": folder_number(
            folder, "[verifier].timeout_sec", pop_field(rest, "verifier", "timeout_sec"), float
        ),
        "build_timeout_sec": folder_number(
            folder,
            "[environment].build_timeout_sec",
            pop_field(rest, "environment", "build_timeout_sec"),
            float,
        ),
        "cpus": folder_number(
            folder, "[environment].cpus", pop_field(rest, "environment", "cpus"), float
        ),
        "memory_mb": _resource_mb(folder, rest, "memory"),
        "storage_mb": _resource_mb(folder, rest, "storage"),
    }
    for key, default in HARBOR_DEFAULTS.items():
        if key != "allow_internet" and values.get(key) is None:
            values[key] = default
    return values


def _harbor_task(
    folder: Path,
    instruction: str,
    tags: list[str],
    values: dict[str, Any],
    ours: dict[str, Any],
    rest: dict[str, Any],
    run: dict[str, Any],
    step_files: list[TaskFile],
) -> Task:
    """The ``Task`` of the parts read; ``rest`` (what no field took) becomes its metadata."""
    has_solution = (folder / "solution" / "solve.sh").is_file()
    test_files = _test_files(folder, ours)
    return Task(
        id=folder.name,
        instruction=instruction,
        source=ours.get("source", "terminal-bench"),
        family=values["family"] or "unknown",
        difficulty=values["difficulty"] or "unknown",
        tags=list(tags),
        layout=ours.get("layout", "harbor"),
        environment_files=folder_files(folder, folder / "environment"),
        solution_files=folder_files(folder, folder / "solution"),
        # "" in the file stands for "no command" (TOML has no null).
        solution_command=ours.get(
            "solution_command", HARBOR_SOLUTION_COMMAND if has_solution else None
        )
        or None,
        test_files=test_files,
        test_command=ours.get("test_command", HARBOR_TEST_COMMAND),
        scoring=ours.get("scoring", "reward-file"),
        agent_timeout_sec=values["agent_timeout_sec"],
        verifier_timeout_sec=values["verifier_timeout_sec"],
        build_timeout_sec=values["build_timeout_sec"],
        cpus=values["cpus"],
        memory_mb=values["memory_mb"],
        storage_mb=values["storage_mb"],
        seed=ours.get("seed"),
        perturbations=list(ours.get("perturbations", [])),
        metadata=json.loads(json.dumps(rest, default=str, sort_keys=True)),
        adaptations=json.loads(ours.get("adaptations", "{}")),
        step_files=step_files,
        **run,
    )


def _size_mb(text: Any) -> int | None:
    """Megabytes in a size string such as "512M" or "2G" (Harbor's rule: 1G = 1024 MB); None if not one."""
    if not isinstance(text, str):
        return None
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([KMGT])(?:i?B)?\s*", text, re.IGNORECASE)
    if not match:
        return None
    scale = {"K": 1 / 1024, "M": 1, "G": 1024, "T": 1024**2}[match.group(2).upper()]
    return int(float(match.group(1)) * scale)


def _resource_mb(folder: Path, rest: dict[str, Any], name: str) -> int | None:
    """``[environment].<name>_mb``, or Harbor's deprecated ``<name> = "2G"``; both keys are consumed.

    The row keeps only the megabytes, so export writes ``<name>_mb`` alone (Harbor
    refuses the two keys side by side when they disagree, and so does this).
    """
    where = f"[environment].{name}"
    mb = folder_number(folder, f"{where}_mb", pop_field(rest, "environment", f"{name}_mb"), int)
    text = pop_field(rest, "environment", name)
    if text is None:
        return mb
    size = _size_mb(text)
    if size is None:
        raise TaskFormatError(
            str(folder), f'task.toml: {where} must be a size such as "512M" or "2G", got {text!r}'
        )
    if mb is not None and mb != size:
        raise TaskFormatError(
            str(folder),
            f"task.toml: {where} = {text!r} ({size} MB) conflicts with {where}_mb = {mb}",
        )
    return size


def _test_files(folder: Path, ours: dict[str, Any]) -> list[TaskFile]:
    """The task's test files: ``tests/``, less the ``tests/test.sh`` export generated for Harbor."""
    return _without_generated(
        folder,
        ours,
        folder_files(folder, folder / "tests"),
        "tests/test.sh",
        "test_command",
        lambda: harbor_test_sh(str(ours["test_command"]), ours.get("scoring", "reward-file")),
    )


def _solution_files(folder: Path, ours: dict[str, Any], task: Task) -> list[TaskFile]:
    """``task``'s solution files, less the ``solution/solve.sh`` export generated for Harbor."""
    return _without_generated(
        folder,
        ours,
        task.solution_files,
        "solution/solve.sh",
        "solution_command",
        lambda: harbor_solve_sh(solution_steps(task)),  # solution_steps never reads solve.sh
    )


def _without_generated(
    folder: Path,
    ours: dict[str, Any],
    files: list[TaskFile],
    script: str,
    command: str,
    expected: Callable[[], bytes],
) -> list[TaskFile]:
    """``files`` less ``script`` (``tests/test.sh``, ``solution/solve.sh``) where export generated it.

    It is left out only when ``[metadata.termrl]`` says it was generated
    (``generated_test_sh``, ``generated_solve_sh``) and its bytes are exactly what
    export writes for the task's ``command`` (``expected()``); anything else there
    is the task's own and is refused rather than dropped.
    """
    key = f"generated_{script.split('/')[1].replace('.', '_')}"
    marker = ours.get(key, False)
    if marker is False:
        return files
    if marker is not True or command not in ours:
        raise TaskFormatError(
            str(folder),
            f"task.toml: [metadata.termrl].{key} must be true, and only beside a {command}",
        )
    try:
        data = expected()
    except ValueError as exc:
        raise TaskFormatError(str(folder), f"cannot check {script} ({key}): {exc}") from exc
    found = next((f for f in files if f.path == script.split("/")[1]), None)
    if found is not None and found.data != data:
        raise TaskFormatError(
            str(folder),
            f"{script} is not the one termrl generated for this task's {command} "
            f"(edited?): restore it, or drop {key} from [metadata.termrl] to keep it "
            "as the task's own file",
        )
    return [f for f in files if f is not found]
