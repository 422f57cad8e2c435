"""What a task asks of the machine that cannot be met here, said before anything is built.

Harbor's task.toml may ask for GPUs (``[environment].gpus``, ``gpu_types``)
and a Dockerfile for a platform (``FROM --platform=linux/arm64 ...``). termrl
refuses such a task with the reason, rather than running it without what it
asked for:

    import   termrl.taskfolders.read: the folder is invalid (``tasks import --skip-invalid`` skips it)
    eval     termrl.taskrun.TaskSandboxes: EnvInitFailed for that task only, before its image is built

The checks run where the task runs, so a task imported on one machine is
judged again on the machine that runs it.
"""

from __future__ import annotations

import platform
import re
from pathlib import Path
from typing import Any

from termrl.artifacts.tasks import Task
from termrl.sandbox.dockerfile import base_platforms
from termrl.tbcompat.standins import platform_problem

__all__ = ["gpus_on_host", "unmet_requirements"]


def gpus_on_host(dev: Path = Path("/dev")) -> int:
    """How many NVIDIA GPUs the host has (its ``/dev/nvidiaN`` devices)."""
    return sum(1 for p in dev.glob("nvidia*") if re.fullmatch(r"nvidia\d+", p.name))


def _gpu_problem(environment: dict[str, Any]) -> str | None:
    gpus = environment.get("gpus", 0)
    if not isinstance(gpus, int) or isinstance(gpus, bool) or gpus < 0:
        return f"[environment].gpus must be a whole number >= 0, got {gpus!r}"
    if gpus == 0:
        return None
    return (
        f"[environment].gpus = {gpus}: termrl's sandboxes get no GPU (no sandbox backend passes "
        f"one through; this machine has {gpus_on_host()}), so the task cannot run as written"
    )


def unmet_requirements(task: Task, machine: str | None = None) -> list[str]:
    """One line per thing ``task`` asks for that this machine cannot give (empty: it can run)."""
    problems: list[str] = []
    environment = task.metadata.get("environment")
    if isinstance(environment, dict):
        gpu = _gpu_problem(environment)
        if gpu:
            problems.append(gpu)
    machine = machine or platform.machine()
    for ref, wanted in base_platforms(task.dockerfile).items():
        problem = platform_problem(ref, wanted, machine)
        if problem:
            problems.append(problem)
    return problems
