"""Vendor installers a task's build context fetches: found at import, served offline at build time.

A task's Dockerfile, or a script one of its RUN steps runs, may install a tool
with its vendor's shell installer::

    curl -LsSf https://astral.sh/uv/0.7.13/install.sh | sh
    wget -qO- https://astral.sh/uv/install.sh | bash
    curl -fsSL -o /tmp/i.sh https://github.com/astral-sh/uv/releases/download/0.7.13/uv-installer.sh

Builds here reach the package index but not those hosts. ``scan_installers``
finds such URLs in the build context at import and records them on the task
(the ``build_installers`` adaptation); the podman build then serves each one
from a local copy (``termrl.sandbox.build_tools``).
"""

from __future__ import annotations

import re
from typing import Any

from termrl.artifacts.tasks import TaskFile

__all__ = ["scan_installers"]

_VERSION = r"(?P<version>\d+\.\d+\.\d+|\$\{?[A-Za-z_][A-Za-z0-9_]*\}?)"
_INSTALLER_URLS = (
    re.compile(rf"https?://astral\.sh/(?P<tool>uv|ruff)/(?:{_VERSION}/)?install\.sh"),
    re.compile(
        rf"https?://github\.com/astral-sh/(?P<tool>uv|ruff)/releases/download/{_VERSION}/(?:uv|ruff)-installer\.sh"
    ),
    re.compile(
        r"https?://github\.com/astral-sh/(?P<tool>uv|ruff)/releases/latest/download/(?:uv|ruff)-installer\.sh"
    ),
)
_DEFAULT = re.compile(
    r"^[ \t]*(?:ARG|ENV)[ \t]+(?P<name>[A-Za-z_][A-Za-z0-9_]*)[ \t]*=[ \t]*\"?(?P<value>[^\s\"]+)",
    re.IGNORECASE | re.MULTILINE,
)


def scan_installers(
    environment_files: list[TaskFile],
) -> tuple[dict[str, dict[str, Any]], list[str]]:
    """(the ``build_installers`` record of the build context, problems to note).

    Record: installer URL -> ``{"tool", "version" (None: the newest), "found_in"}``.
    A version written as a variable is read from the Dockerfile's ``ARG``/``ENV``
    defaults; one that cannot be read is a problem, not a guess.
    """
    texts: dict[str, str] = {}
    for f in environment_files:
        try:
            texts[f.path] = f.data.decode()
        except UnicodeDecodeError:
            continue
    defaults = {
        m.group("name"): m.group("value") for m in _DEFAULT.finditer(texts.get("Dockerfile", ""))
    }
    found: dict[str, dict[str, Any]] = {}
    problems: list[str] = []
    for path in sorted(texts):
        for pattern in _INSTALLER_URLS:
            for match in pattern.finditer(texts[path]):
                url, version = match.group(0), match.groupdict().get("version")
                if version and version.startswith("$"):
                    name = version.strip("${}")
                    if name not in defaults:
                        problems.append(
                            f"{path}: cannot serve {url} offline (the version ${name} has no default)"
                        )
                        continue
                    version = defaults[name]
                    url = url.replace(match.group("version"), version)
                entry = found.setdefault(
                    url, {"tool": match.group("tool"), "version": version, "found_in": []}
                )
                if path not in entry["found_in"]:
                    entry["found_in"].append(path)
    return found, problems
