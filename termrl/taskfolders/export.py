"""Write tasks as Harbor task folders.

The folder is written beside its final place and renamed into it, so a crash
never leaves half a task. Row fields that Harbor has no home for (source,
layout, commands, scoring, seed, perturbations, adaptations) go into
``[metadata.termrl]``, and only when they differ from what a plain Harbor folder
implies; top-level keys that are not Harbor's go into ``[metadata.termrl.extra]``
(``termrl.taskfolders.schema``), so Harbor's linter finds only its own fields — so exporting a Harbor task gives back its own ``task.toml`` keys,
and import → export → import gives identical rows for every task.

Harbor runs ``tests/test.sh`` and reads /logs/verifier/reward.txt; a task whose
tests run another way (a Terminal-Bench 1.0 task's ``bash /tests/run-tests.sh``,
scored by pytest's report) gets a generated ``tests/test.sh`` that runs them so
and writes the reward (``termrl.taskfolders.layout.harbor_test_sh``), marked
``generated_test_sh = true`` so that import leaves it out again. A task that
ships its own ``tests/test.sh`` keeps it (a warning says Harbor runs that file,
not the task's test command). Harbor's oracle runs only ``solution/solve.sh``: a
task whose solution runs another way (a legacy ``bash /solution/solution.sh``, or
a ``solution.yaml`` of commands) gets a generated one that runs it as termrl does
(``termrl.taskfolders.layout.harbor_solve_sh``), marked ``generated_solve_sh =
true``; a task's own ``solution/solve.sh`` is kept, with the same kind of warning.
"""

from __future__ import annotations

import copy
import json
import logging
import os
import shutil
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import tomli_w

from termrl.artifacts.tasks import Task, TaskFile
from termrl.taskfolders.layout import (
    HARBOR_SOLUTION_COMMAND,
    HARBOR_TEST_COMMAND,
    harbor_solve_sh,
    harbor_test_sh,
)
from termrl.taskfolders.schema import TERMRL_TABLE, split_extra
from termrl.taskrun import solution_steps

__all__ = ["export_task", "export_tasks", "generated_solve_sh", "generated_test_sh", "task_toml"]

log = logging.getLogger(__name__)


def generated_test_sh(task: Task) -> TaskFile | None:
    """The ``tests/test.sh`` Harbor needs to run ``task``'s tests; None when it has its own."""
    own = any(f.path == "test.sh" for f in task.test_files)
    if task.test_command == HARBOR_TEST_COMMAND or task.steps or own:
        return None
    return TaskFile("test.sh", harbor_test_sh(task.test_command, task.scoring), 0o755)


def generated_solve_sh(task: Task) -> TaskFile | None:
    """The ``solution/solve.sh`` Harbor's oracle needs to run ``task``'s solution.

    None when it has its own, when its solution is already ``bash /solution/solve.sh``,
    and when it has none (no command, or a ``solution.yaml`` termrl cannot read either).
    """
    own = any(f.path == "solve.sh" for f in task.solution_files)
    if task.solution_command == HARBOR_SOLUTION_COMMAND or task.steps or own:
        return None
    try:
        commands = solution_steps(task)
    except ValueError as exc:
        log.warning("task %s: no solution/solve.sh for Harbor: %s", task.id, exc)
        return None
    return TaskFile("solve.sh", harbor_solve_sh(commands), 0o755) if commands else None


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
    for section, values in _run_sections(task).items():
        for key, value in values.items():
            if value is not None:
                config.setdefault(section, {})[key] = value
    if task.verifier_network is not None:
        config.setdefault("verifier", {})["environment"] = {"network_mode": task.verifier_network}
    if task.artifacts:
        config["artifacts"] = [dict(a) for a in task.artifacts]
    if task.steps:
        config["steps"] = [_step_toml(step) for step in task.steps]
    if task.reward_strategy is not None:
        config["multi_step_reward_strategy"] = task.reward_strategy
    ours = _termrl_keys(task, extra)
    if ours:
        metadata[TERMRL_TABLE] = ours
    if not metadata:
        del config["metadata"]
    return config


def _run_sections(task: Task) -> dict[str, dict[str, Any]]:
    """The ``[agent]``, ``[verifier]``, ``[environment]`` and ``[solution]`` keys (None: not written)."""
    return {
        "agent": {"timeout_sec": task.agent_timeout_sec, "user": _user(task.agent_user)},
        "verifier": {
            "timeout_sec": task.verifier_timeout_sec,
            "env": task.verifier_env or None,
            "user": _user(task.verifier_user),
            "environment_mode": task.verifier_mode,
            "collect": task.verifier_collect or None,
        },
        "environment": {
            "build_timeout_sec": task.build_timeout_sec,
            "cpus": task.cpus,
            "memory_mb": task.memory_mb,
            "storage_mb": task.storage_mb,
            "allow_internet": task.allow_internet,
            "docker_image": task.docker_image,
            "workdir": task.workdir,
            "env": task.env or None,
        },
        "solution": {"env": task.solution_env or None},
    }


def _termrl_keys(task: Task, extra: dict[str, Any]) -> dict[str, Any]:
    """``[metadata.termrl]``: what differs from Harbor's defaults, and the non-Harbor ``extra``."""
    solve_sh = generated_solve_sh(task)
    has_solve = solve_sh is not None or any(f.path == "solve.sh" for f in task.solution_files)
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
    if generated_test_sh(task) is not None:
        ours["generated_test_sh"] = True
    if solve_sh is not None:
        ours["generated_solve_sh"] = True
    if extra:
        ours["extra"] = extra
    return ours


def _step_toml(step: dict[str, Any]) -> dict[str, Any]:
    """One ``[[steps]]`` table (``Task.steps``' entry, unset values left out)."""
    out: dict[str, Any] = {"name": step["name"]}
    if step.get("min_reward") is not None:
        out["min_reward"] = step["min_reward"]
    if step.get("agent_timeout_sec") is not None:
        out["agent"] = {"timeout_sec": step["agent_timeout_sec"]}
    verifier = {
        "timeout_sec": step.get("verifier_timeout_sec"),
        "env": step.get("verifier_env") or None,
        "user": _user(step.get("verifier_user")),
    }
    if any(v is not None for v in verifier.values()):
        out["verifier"] = {k: v for k, v in verifier.items() if v is not None}
    for key in ("inherit_prior_session", "dependencies", "depends_on"):
        if key in step:
            out[key] = step[key]
    out.update(step.get("extra") or {})  # keys termrl keeps but does not know
    return out


def _user(user: str | None) -> str | int | None:
    """Harbor's user: a name, or a uid as a TOML integer (how a task states one)."""
    return int(user) if user is not None and user.isdigit() else user


def _write_files(base: Path, files: Iterable[TaskFile]) -> None:
    for file in files:
        target = base / file.path
        if ".." in Path(file.path).parts or Path(file.path).is_absolute():
            raise ValueError(f"task file path escapes its folder: {file.path!r}")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(file.data)
        os.chmod(target, file.mode)


def _warn_of_own_scripts(task: Task) -> None:
    """Warn when Harbor will run a task's own solve.sh or test.sh rather than its command."""
    solution = task.solution_files, task.solution_command, HARBOR_SOLUTION_COMMAND
    tests = task.test_files, task.test_command, HARBOR_TEST_COMMAND
    for kind, script, (files, command, harbor) in (
        ("solution", "solution/solve.sh", solution),
        ("test", "tests/test.sh", tests),
    ):
        own = any(f.path == script.split("/", 1)[1] for f in files)
        if own and command != harbor:
            log.warning(
                "task %s: Harbor will run its own %s, not its %s command %r",
                task.id,
                script,
                kind,
                command,
            )


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
        solve_sh, test_sh = generated_solve_sh(task), generated_test_sh(task)
        _warn_of_own_scripts(task)
        _write_files(staging / "solution", task.solution_files + ([solve_sh] if solve_sh else []))
        _write_files(staging / "tests", task.test_files + ([test_sh] if test_sh else []))
        _write_files(staging / "steps", task.step_files)
        os.chmod(staging, 0o755)
        if final.exists():
            shutil.rmtree(final)
        staging.rename(final)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return final


def export_tasks(
    tasks: Iterable[Task], out_dir: str | os.PathLike, *, overwrite: bool = False
) -> list[Path]:
    """Export every task; refuses to start when any target folder exists (unless overwrite)."""
    tasks = list(tasks)
    if not overwrite:
        clashes = [str(Path(out_dir) / t.id) for t in tasks if (Path(out_dir) / t.id).exists()]
        if clashes:
            raise FileExistsError(f"{len(clashes)} task folder(s) exist: {', '.join(clashes[:5])}")
    return [export_task(t, out_dir, overwrite=overwrite) for t in tasks]
