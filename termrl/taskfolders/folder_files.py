"""Reading a task folder's files and typed values, with every problem a ``TaskFormatError``.

File bytes and mode bits are kept exactly (no newline translation).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from termrl.artifacts.tasks import TaskFile
from termrl.errors import TaskFormatError

__all__ = ["folder_file", "folder_files", "folder_number", "folder_text"]


def folder_files(folder: Path, base: Path, *, exclude: set[str] = frozenset()) -> list[TaskFile]:
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


def folder_file(folder: Path, name: str) -> TaskFile:
    """The file ``name`` at the top of ``folder``."""
    path = folder / name
    return TaskFile(name, path.read_bytes(), path.stat().st_mode & 0o7777)


def folder_text(folder: Path, name: str) -> str | None:
    """The UTF-8 text of ``folder/name``; None if there is no such file."""
    path = folder / name
    if not path.is_file():
        return None
    try:
        return path.read_bytes().decode("utf-8")  # bytes as written: no newline translation
    except (OSError, UnicodeDecodeError) as exc:
        raise TaskFormatError(str(folder), f"cannot read {name}: {exc}") from exc


def folder_number(folder: Path, where: str, value: Any, kind: type) -> Any:
    """``value`` (the setting at ``where``) as ``kind``; None stays None, a non-number is refused."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TaskFormatError(str(folder), f"{where} must be a number, got {value!r}")
    return kind(value)
