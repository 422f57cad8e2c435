"""Reading and rewriting a Dockerfile's ``FROM`` lines, for the build only.

A task's Dockerfile bytes are never edited: ``rewrite_from`` produces the text
handed to the image builder, with each recorded base-image name replaced by its
local stand-in, and ``declare_build_args`` adds ``ARG NAME=value`` right after
every ``FROM`` — an ARG is in the environment of that stage's ``RUN`` steps but,
unlike ``ENV``, is not stored in the image's configuration. Standard library
only: ``termrl.sandbox`` imports this module.
"""

from __future__ import annotations

import re

__all__ = ["base_platforms", "base_refs", "declare_build_args", "rewrite_from"]

# FROM [--platform=...] image [AS name]; a trailing backslash continues the line.
_FROM = re.compile(
    r"^(?P<head>[ \t]*FROM[ \t]+(?:--\S+[ \t]+)*)(?P<ref>[^\s\\]+)(?P<tail>[^\n]*)$",
    re.IGNORECASE | re.MULTILINE,
)
_STAGE = re.compile(r"\bAS[ \t]+(\S+)", re.IGNORECASE)
_PLATFORM = re.compile(r"--platform=(\S+)[ \t]+", re.IGNORECASE)


def base_refs(text: str) -> list[str]:
    """The images the Dockerfile builds FROM, in order, minus its own stages and ``scratch``.

    References built from ARGs (``FROM $BASE``) cannot be resolved here and are left out.
    """
    refs: list[str] = []
    stages: set[str] = set()
    for match in _FROM.finditer(text):
        ref = match.group("ref")
        if (
            ref.lower() not in stages
            and ref.lower() != "scratch"
            and "$" not in ref
            and ref not in refs
        ):
            refs.append(ref)
        stage = _STAGE.search(match.group("tail"))
        if stage:
            stages.add(stage.group(1).lower())
    return refs


def base_platforms(text: str) -> dict[str, str]:
    """The ``--platform`` each base image is asked for (``FROM --platform=linux/amd64 ref``), by ref."""
    found: dict[str, str] = {}
    for match in _FROM.finditer(text):
        platform = _PLATFORM.search(match.group("head"))
        if platform:
            found.setdefault(match.group("ref"), platform.group(1))
    return found


def rewrite_from(text: str, rewrites: dict[str, str]) -> str:
    """``text`` with every ``FROM <ref>`` whose ref is a key of ``rewrites`` pointed at its value.

    A ``--platform`` stays: podman builds a local image for this machine's platform (or
    ``$BUILDPLATFORM``) as it is, and another platform is refused before (``termrl.tbcompat.runnable``).
    """
    if not rewrites:
        return text

    def swap(match: re.Match[str]) -> str:
        ref = match.group("ref")
        return match.group("head") + rewrites.get(ref, ref) + match.group("tail")

    return _FROM.sub(swap, text)


def declare_build_args(text: str, args: dict[str, str]) -> str:
    """``text`` with ``ARG NAME=value`` lines after every complete one-line ``FROM``."""
    if not args:
        return text
    declared = "".join(f"\nARG {name}={value}" for name, value in sorted(args.items()))

    def add(match: re.Match[str]) -> str:
        line = match.group(0)
        return line if line.rstrip().endswith("\\") else line + declared

    return _FROM.sub(add, text)
