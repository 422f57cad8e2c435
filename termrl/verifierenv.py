"""What a separate verifier gets from the agent's sandbox: Harbor's collect commands and artifacts.

A task with ``verifier_mode = "separate"`` is scored in a fresh sandbox from
the same image (``termrl.taskrun.run_tests``). The only thing that crosses from
the agent's sandbox is what the task declares:

1. ``verifier_collect`` commands run in the agent's sandbox, with the agent's
   processes stopped, each through a fresh process (``Session.exec_fresh``, as
   its ``user`` or the image's), to snapshot state into files. A failing one is
   logged; the tests then judge what is (not) there.
2. The ``artifacts`` paths (and Harbor's convention directory ``/logs/artifacts``,
   always collected) are copied out through the session's download API: regular
   files only, each at most ``ARTIFACT_FILE_MAX_BYTES``, all together at most
   ``ARTIFACTS_MAX_BYTES``. Symlinks, FIFOs, devices, files past the limits and
   names matching an entry's ``exclude`` patterns are skipped (logged), never
   followed or read; setuid/setgid bits are dropped. Nothing the agent plants can
   block the host, fill its memory or point it at another file.

The copies are uploaded into the verifier's sandbox at the same paths.
"""

from __future__ import annotations

import fnmatch
import logging
import posixpath
import secrets
import shlex
from typing import TYPE_CHECKING

from termrl.artifacts.tasks import Task, TaskFile

if TYPE_CHECKING:
    from termrl.sandbox.session import Session

__all__ = [
    "ARTIFACTS_DIR",
    "ARTIFACTS_MAX_BYTES",
    "ARTIFACT_FILE_MAX_BYTES",
    "ARTIFACT_FILES_MAX",
    "collect_artifacts",
]

log = logging.getLogger("termrl.verifierenv")

ARTIFACTS_DIR = "/logs/artifacts"
"""Harbor's convention directory for what the agent publishes: collected for every separate verifier."""
ARTIFACT_FILE_MAX_BYTES = 64 << 20
ARTIFACTS_MAX_BYTES = 256 << 20
ARTIFACT_FILES_MAX = 10000
LISTING_MAX_BYTES = 8 << 20
DEFAULT_COLLECT_TIMEOUT_SEC = 60.0

# $1: the listing file, $2: a source path. Lists "<octal mode> <path>\0" for each regular file at or under the
# source without following a symlink (a symlinked source lists nothing). Written to a file, not printed: the
# command output is capped, a listing is not.
LIST_PROBE = """\
out=$1 s=$2
if [ -L "$s" ]; then :
elif [ -d "$s" ]; then find -P "$s" -xdev -type f -printf '%m %p\\0' >> "$out"
elif [ -f "$s" ]; then printf '%s %s\\0' "$(stat -c %a -- "$s")" "$s" >> "$out"
fi
"""


def _sources(task: Task) -> list[tuple[str, list[str]]]:
    """(source path, exclude patterns) of each declared artifact, the convention directory first."""
    entries = [
        (posixpath.normpath(a["source"]), list(a.get("exclude") or [])) for a in task.artifacts
    ]
    if not any(source == ARTIFACTS_DIR for source, _ in entries):
        entries.insert(0, (ARTIFACTS_DIR, []))
    return entries


def _excluded(path: str, source: str, patterns: list[str]) -> bool:
    """tar's ``--exclude``: a pattern matches the file's name, any directory name on the way, or its path."""
    relative = posixpath.relpath(path, source)
    names = relative.split("/")
    return any(
        fnmatch.fnmatch(relative, p) or any(fnmatch.fnmatch(n, p) for n in names) for p in patterns
    )


async def _run_collect(session: Session, task: Task) -> None:
    for entry in task.verifier_collect:
        user = entry.get("user")
        result = await session.exec_fresh(
            entry["command"],
            float(entry.get("timeout_sec") or DEFAULT_COLLECT_TIMEOUT_SEC),
            user=None if user is None else str(user),
        )
        if not result.ok:
            why = "timed out" if result.timed_out else f"exit status {result.exit_code}"
            log.warning(
                "task %s: collect command %r failed (%s): %s",
                task.id,
                entry["command"],
                why,
                result.output[-500:],
            )


async def _listing(session: Session, task: Task) -> list[tuple[int, str, str, list[str]]]:
    """(mode, path, source, exclude) of each regular file the artifacts name."""
    out = f"/tmp/.termrl-artifacts-{secrets.token_hex(8)}"
    args = " ".join(shlex.quote(source) for source, _ in _sources(task))
    script = f'rm -f {out}; : > {out}; for s in {args}; do set -- {out} "$s"; {LIST_PROBE}\ndone'
    result = await session.exec_fresh(script, 120.0)
    try:
        if not result.ok:
            log.warning("task %s: cannot list the artifacts: %s", task.id, result.output[-500:])
            return []
        raw = await session.download(out, max_bytes=LISTING_MAX_BYTES)
    finally:
        await session.exec_fresh(f"rm -f {out}", 30.0)
    files = []
    for entry in raw.decode(errors="surrogateescape").split("\0"):
        mode, _, path = entry.partition(" ")
        if not path or not mode.isdigit():
            continue
        source, exclude = next(
            (s, e) for s, e in _sources(task) if path == s or path.startswith(s.rstrip("/") + "/")
        )
        files.append((int(mode, 8), path, source, exclude))
    return files


async def collect_artifacts(session: Session, task: Task) -> list[TaskFile]:
    """Run the collect commands, then copy the artifacts out (see the module docstring); paths relative to /.

    Call it with the agent's processes stopped (``Session.agent_stopped``), so nothing changes them meanwhile.
    """
    # Imported here: termrl.sandbox imports the artifacts package, not this module.
    from termrl.sandbox.session import FileTooLarge, NotRegularFile

    await _run_collect(session, task)
    copied: list[TaskFile] = []
    total = 0
    for mode, path, source, exclude in await _listing(session, task):
        if _excluded(path, source, exclude):
            continue
        if len(copied) >= ARTIFACT_FILES_MAX:
            log.warning(
                "task %s: more than %d artifact files; the rest are not copied",
                task.id,
                ARTIFACT_FILES_MAX,
            )
            break
        limit = min(ARTIFACT_FILE_MAX_BYTES, ARTIFACTS_MAX_BYTES - total)
        try:
            data = await session.download(path, max_bytes=limit)
        except (
            FileNotFoundError,
            IsADirectoryError,
            NotRegularFile,
            FileTooLarge,
            UnicodeError,
        ) as exc:
            log.warning("task %s: artifact %s not copied: %s", task.id, path, exc)
            continue
        total += len(data)
        copied.append(
            TaskFile(path.lstrip("/"), data, mode & 0o777)
        )  # no setuid/setgid/sticky bits
    return copied
