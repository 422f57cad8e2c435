"""What termrl changes to run a Terminal-Bench task here, computed once and recorded on the task.

``adaptations_for(task)`` reads the task (never changing its bytes) and
returns the JSON kept in ``Task.adaptations``::

    {
      "base_images": {                       # FROM names rewritten at build time
        "ghcr.io/laude-institute/t-bench/python-3-13:20250620":
          {"image": "termrl/standin:bookworm-py3.13", "differences": ["CPython 3.13 compiled ..."]}
      },
      "build_installers": {                  # installers the build fetches, served from local copies
        "https://astral.sh/uv/0.7.13/install.sh": {"tool": "uv", "version": "0.7.13", "found_in": ["install.sh"]}
      },
      "test_kit": {                          # the offline test kit (termrl.tbcompat.kit.KitSpec)
        "uv": "0.7.13", "python": "3.13", "glibc": "2.36", "arch": "x86_64",
        "groups": [["pytest==8.4.1"]], "found_in": ["run-tests.sh"]
      },
      "notes": ["..."]                       # what could not be adapted
    }

Keys appear only when needed, so a task that runs as written gets ``{}``.
Builds read ``base_images`` and ``build_installers`` (``SandboxSpec.from_task``), the test phase reads
``test_kit`` (``termrl.taskrun.run_tests``); export writes the original
files and this record beside them, so every step is reversible.
"""

from __future__ import annotations

import platform
import re
from typing import Any

from termrl.artifacts.tasks import Task
from termrl.sandbox.dockerfile import base_refs
from termrl.tbcompat.installers import scan_installers
from termrl.tbcompat.kit import DEFAULT_UV_VERSION, KitSpec
from termrl.tbcompat.scan import scan_scripts
from termrl.tbcompat.standins import ABSENT_FROM_DEBIAN, SUITES, StandIn, resolve_base

__all__ = ["COMPUTED_KEYS", "adaptations_for", "with_adaptations"]

COMPUTED_KEYS = ("base_images", "build_installers", "test_kit", "notes")
"""The adaptation keys this module owns; any other key on a task is kept as it is."""


def adaptations_for(task: Task) -> dict[str, Any]:
    """The adaptations ``task`` needs to build and be scored offline here."""
    out: dict[str, Any] = {}
    notes: list[str] = []
    resolved: list[StandIn] = []
    # A prebuilt docker_image is run as it is: it needs a stand-in just as a FROM line does.
    for ref in [task.docker_image] if task.docker_image else base_refs(task.dockerfile):
        standin = resolve_base(ref)
        if standin is None:
            notes.append(
                f"no local stand-in for FROM {ref}: that image must exist locally to build"
            )
            continue
        resolved.append(standin)
        if standin.mismatch:
            notes.append(f"FROM {ref}: {standin.mismatch}")
        if standin.rewrite:
            out.setdefault("base_images", {})[ref] = {
                "image": standin.image,
                "differences": list(standin.differences),
                **({"digest": standin.digest} if standin.digest else {}),
            }

    installers, problems = scan_installers(task.environment_files)
    notes += problems
    if installers:
        out["build_installers"] = installers

    scan = scan_scripts(task.test_files)
    notes += scan.problems
    if scan.uses_uv or scan.groups:
        # The last FROM is the image the tests run in.
        python, glibc = (
            (resolved[-1].python, resolved[-1].glibc) if resolved else SUITES["bookworm"]
        )
        if not resolved:
            notes.append(
                f"test kit built for Python {python} / glibc {glibc}: the base image is not known here"
            )
        have = resolved[-1].interpreters if resolved else (python,)
        notes += _missing_interpreters(scan.pythons, have, scan.found_in)
        kit = KitSpec(
            uv=(scan.uv_version or DEFAULT_UV_VERSION) if scan.uses_uv else None,
            python=python,
            glibc=glibc,
            groups=tuple(tuple(group) for group in scan.groups),
            arch=platform.machine(),
        )
        out["test_kit"] = {**kit.to_json(), "found_in": scan.found_in}
    if notes:
        out["notes"] = notes
    return out


def _missing_interpreters(
    asked: list[str], have: tuple[str, ...], found_in: list[str]
) -> list[str]:
    """A note for each interpreter the test scripts ask uv for that the sandbox does not have.

    uv finds the sandbox's own interpreters offline (``StandIn.interpreters``); any other version it
    would download, which the test phase cannot, and no stand-in has (``standins.python_mismatch``).
    """
    where = ", ".join(found_in) or "the test scripts"
    notes = []
    for request in asked:  # 3.12, 3.12.4, python3.12, cpython-3.12: a version; a path is not
        match = re.fullmatch(r"(?:c?python-?)?(3\.\d+)(?:\.\d+)?", request)
        if match and match.group(1) not in have:
            notes.append(
                f"the tests ask uv for Python {request} ({where}), which cannot be provided "
                f"offline: the sandbox has Python {' and '.join(have)} only, and "
                f"{_why_not(match.group(1))}; the tests will not find one"
            )
    return notes


def _why_not(version: str) -> str:
    if version in ABSENT_FROM_DEBIAN:
        return f"no Python {version} can be had from the registries this machine reaches"
    return f"no stand-in here has Python {version}"


def with_adaptations(task: Task) -> Task:
    """``task`` with its computed adaptations recorded (other recorded keys are kept)."""
    kept = {k: v for k, v in task.adaptations.items() if k not in COMPUTED_KEYS}
    task.adaptations = {**kept, **adaptations_for(task)}
    return task
