"""The procedural task families: one small module each, registered in ``FAMILIES`` below.

Each module has ``generate(rng, difficulty) -> Draft`` (all randomness from
``rng``, so a seed reproduces the task) and ``TAGS``. Adding a family is
writing a module and adding one line here.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType

from components.synthesize.draft import Draft
from components.synthesize.families import (
    accounts,
    archives,
    checksums,
    compress,
    configs,
    cron,
    csvjson,
    dates,
    diskuse,
    envrepair,
    files,
    findx,
    git,
    logs,
    patching,
    procs,
    pybug,
    renames,
    service,
    setops,
    shell,
    shellenv,
    sqlite,
    text,
    textutils,
)

__all__ = ["DIFFICULTIES", "FAMILIES", "Family"]

DIFFICULTIES = ("easy", "medium", "hard")


@dataclass(frozen=True)
class Family:
    """A registered family: its generator and the tags every one of its tasks carries."""

    name: str
    generate: Callable[[random.Random, str], Draft]
    tags: tuple[str, ...]


def _family(name: str, module: ModuleType) -> Family:
    return Family(name=name, generate=module.generate, tags=tuple(module.TAGS))


FAMILIES: dict[str, Family] = {
    "text-processing": _family("text-processing", text),
    "files-permissions": _family("files-permissions", files),
    "archives": _family("archives", archives),
    "log-analysis": _family("log-analysis", logs),
    "csv-json": _family("csv-json", csvjson),
    "git": _family("git", git),
    "python-bugfix": _family("python-bugfix", pybug),
    "shell-scripting": _family("shell-scripting", shell),
    "service": _family("service", service),
    "scheduled-jobs": _family("scheduled-jobs", cron),
    "environment-repair": _family("environment-repair", envrepair),
    "sql-sqlite": _family("sql-sqlite", sqlite),
    "checksums": _family("checksums", checksums),
    "find-xargs": _family("find-xargs", findx),
    "config-edit": _family("config-edit", configs),
    "diff-patch": _family("diff-patch", patching),
    "date-time": _family("date-time", dates),
    "users-groups": _family("users-groups", accounts),
    "compression": _family("compression", compress),
    "regex-rename": _family("regex-rename", renames),
    "disk-usage": _family("disk-usage", diskuse),
    "shell-env": _family("shell-env", shellenv),
    "process-control": _family("process-control", procs),
    "set-operations": _family("set-operations", setops),
    "text-utils": _family("text-utils", textutils),
}
