"""Read Terminal-Bench task folders (Harbor and legacy layouts) into ``Task`` objects.

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

import copy
import json
import logging
import os
import re
import tomllib
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

from termrl.artifacts.tasks import Task, TaskFile
from termrl.errors import TaskFormatError
from termrl.taskfolders.layout import (
    HARBOR_DEFAULTS,
    HARBOR_SOLUTION_COMMAND,
    HARBOR_TEST_COMMAND,
    LEGACY_DEFAULTS,
    LEGACY_ROOT_FILES,
    LEGACY_SOLUTION_COMMAND,
    LEGACY_TEST_COMMAND,
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
    task = with_adaptations(_read_harbor(folder, found) if has_toml else _read_legacy(folder))
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


def _files(folder: Path, base: Path, *, exclude: set[str] = frozenset()) -> list[TaskFile]:
    """Every file below ``base`` (relative POSIX paths, sorted), minus top-level ``exclude``."""
    if not base.is_dir():
        return []
    out: list[TaskFile] = []
    for dirpath, dirnames, filenames in os.walk(base):
        dirnames.sort()
        for name in filenames:
            path = Path(dirpath) / name
            relative = path.relative_to(base).as_posix()
            if relative in exclude or relative.split("/")[0] in exclude:
                continue
            try:
                data = path.read_bytes()
            except OSError as exc:
                raise TaskFormatError(
                    str(folder), f"cannot read {path.relative_to(folder)}: {exc.strerror}"
                ) from exc
            out.append(TaskFile(relative, data, path.stat().st_mode & 0o7777))
    return sorted(out, key=lambda f: f.path)


def _file(folder: Path, name: str) -> TaskFile:
    path = folder / name
    return TaskFile(name, path.read_bytes(), path.stat().st_mode & 0o7777)


def _text(folder: Path, name: str) -> str | None:
    path = folder / name
    if not path.is_file():
        return None
    try:
        return path.read_bytes().decode("utf-8")  # bytes as written: no newline translation
    except (OSError, UnicodeDecodeError) as exc:
        raise TaskFormatError(str(folder), f"cannot read {name}: {exc}") from exc


def _number(folder: Path, where: str, value: Any, kind: type) -> Any:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TaskFormatError(str(folder), f"{where} must be a number, got {value!r}")
    return kind(value)


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
    mb = _number(folder, f"{where}_mb", pop_field(rest, "environment", f"{name}_mb"), int)
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


def _read_harbor(folder: Path, warnings: list[str]) -> Task:
    where = str(folder)
    try:
        config = tomllib.loads(_text(folder, "task.toml") or "")
    except tomllib.TOMLDecodeError as exc:
        raise TaskFormatError(where, f"unreadable task.toml: {exc}") from exc
    instruction = _text(folder, "instruction.md")
    multi_step = "steps" in config
    if not multi_step and (not instruction or not instruction.strip()):
        raise TaskFormatError(where, "no instruction (instruction.md missing or empty)")
    unsupported = unsupported_fields(config)
    if unsupported:
        raise TaskFormatError(where, "task.toml: " + "; ".join(unsupported))
    rest = copy.deepcopy(config)
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
    warnings += [
        f"task.toml: [{key}] is not a Harbor table termrl knows: kept in the task, not acted on"
        for key in sorted(split_extra(rest)[1])
    ]
    rest.update(extra)
    # An exported legacy task names its own test script in [termrl].test_command.
    if "test_command" in ours:
        if not _files(folder, folder / "tests"):
            raise TaskFormatError(where, "no tests (tests/ missing or empty)")
    elif not multi_step and not (folder / "tests" / "test.sh").is_file():
        raise TaskFormatError(where, "no tests (tests/test.sh missing)")
    run = run_config(folder, rest, warnings)  # a multi-step task: each step's tests checked there
    step_files = _files(folder, folder / "steps")
    if (
        not instruction or not instruction.strip()
    ):  # a multi-step task needs none: its steps have theirs
        instruction = next(
            f for f in step_files if f.path == f"{run['steps'][0]['name']}/instruction.md"
        ).data.decode()
    if not run["docker_image"] and not (folder / "environment" / "Dockerfile").is_file():
        raise TaskFormatError(
            where, "no environment/Dockerfile (and no [environment].docker_image)"
        )
    tags = pop_field(rest, "metadata", "tags") or []
    if not isinstance(tags, list) or not all(isinstance(t, str) for t in tags):
        raise TaskFormatError(
            where, f"task.toml: [metadata].tags must be a list of strings, got {tags!r}"
        )
    values: dict[str, Any] = {
        "difficulty": pop_field(rest, "metadata", "difficulty"),
        "family": pop_field(rest, "metadata", "category"),
        "agent_timeout_sec": _number(
            folder, "[agent].timeout_sec", pop_field(rest, "agent", "timeout_sec"), float
        ),
        "verifier_timeout_sec": _number(
            folder, "[verifier].timeout_sec", pop_field(rest, "verifier", "timeout_sec"), float
        ),
        "build_timeout_sec": _number(
            folder,
            "[environment].build_timeout_sec",
            pop_field(rest, "environment", "build_timeout_sec"),
            float,
        ),
        "cpus": _number(
            folder, "[environment].cpus", pop_field(rest, "environment", "cpus"), float
        ),
        "memory_mb": _resource_mb(folder, rest, "memory"),
        "storage_mb": _resource_mb(folder, rest, "storage"),
    }
    run["allow_internet"] = bool(
        HARBOR_DEFAULTS["allow_internet"]
        if run["allow_internet"] is None
        else run["allow_internet"]
    )
    for key, default in HARBOR_DEFAULTS.items():
        if key != "allow_internet" and values.get(key) is None:
            values[key] = default
    unknown = set(ours) - set(TERMRL_KEYS)
    if unknown:
        raise TaskFormatError(where, f"task.toml: unknown [termrl] keys {sorted(unknown)}")
    has_solution = (folder / "solution" / "solve.sh").is_file()
    test_files = _test_files(folder, ours)
    task = Task(
        id=folder.name,
        instruction=instruction,
        source=ours.get("source", "terminal-bench"),
        family=values["family"] or "unknown",
        difficulty=values["difficulty"] or "unknown",
        tags=list(tags),
        layout=ours.get("layout", "harbor"),
        environment_files=_files(folder, folder / "environment"),
        solution_files=_files(folder, folder / "solution"),
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
    return replace(task, solution_files=_solution_files(folder, ours, task))


def _test_files(folder: Path, ours: dict[str, Any]) -> list[TaskFile]:
    """The task's test files: ``tests/``, less the ``tests/test.sh`` export generated for Harbor."""
    return _without_generated(
        folder,
        ours,
        _files(folder, folder / "tests"),
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


def _read_legacy(folder: Path) -> Task:
    where = str(folder)
    try:
        config = yaml.safe_load(_text(folder, "task.yaml") or "")
    except yaml.YAMLError as exc:
        problem = str(exc).replace("\n", " ")
        raise TaskFormatError(where, f"unreadable task.yaml: {problem}") from exc
    if not isinstance(config, dict):
        raise TaskFormatError(where, "unreadable task.yaml: not a mapping")
    rest = dict(config)
    instruction = rest.pop("instruction", None)
    if instruction is None:  # the oldest 1.0 tasks: a list of keyed descriptions
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
    if not (folder / "run-tests.sh").is_file():
        raise TaskFormatError(where, "no tests (run-tests.sh missing)")
    if not (folder / "Dockerfile").is_file():
        raise TaskFormatError(where, "no Dockerfile")
    tags = rest.pop("tags", None) or []
    if not isinstance(tags, list):
        raise TaskFormatError(where, f"task.yaml: tags must be a list, got {tags!r}")
    agent_timeout = _number(
        folder, "max_agent_timeout_sec", rest.pop("max_agent_timeout_sec", None), float
    )
    test_timeout = _number(
        folder, "max_test_timeout_sec", rest.pop("max_test_timeout_sec", None), float
    )

    if (folder / "solution.sh").is_file():
        solution, solution_command = [_file(folder, "solution.sh")], LEGACY_SOLUTION_COMMAND
    elif (folder / "solution.yaml").is_file():
        # No single command: the yaml's commands run one by one (termrl.taskrun).
        solution, solution_command = [_file(folder, "solution.yaml")], None
    else:
        solution, solution_command = [], None
    test_files = [_file(folder, "run-tests.sh")]
    test_files = sorted(test_files + _files(folder, folder / "tests"), key=lambda f: f.path)
    return Task(
        id=folder.name,
        instruction=instruction,
        source="terminal-bench",
        family=str(rest.pop("category", None) or "unknown"),
        difficulty=str(rest.pop("difficulty", None) or "unknown"),
        tags=[str(t) for t in tags],
        layout="legacy",
        environment_files=_files(folder, folder, exclude=LEGACY_ROOT_FILES | {"tests"}),
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
