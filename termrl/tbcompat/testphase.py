"""Putting the offline test kit into a sandbox right before its tests run.

``termrl.taskrun.run_tests`` calls ``prepare_test_phase`` after preparing the
tests and before running them; it returns the environment the test command
runs with and, where the tests get private mounts, the kit's. A task that
records no ``test_kit`` adaptation gets nothing. The kit is fetched on the host
(cached; see ``termrl.tbcompat.kit``) — never from inside the sandbox, which
has no network.

With private mounts the kit never enters the sandbox's filesystem, where a
service the agent left running could swap uv or the ``env`` file the test
script sources: only empty mount points are made there, and
``remove_mount_points`` takes away those that did not exist before. What the
tests install is kept out of that reach the same way: uv's cache
(``SANDBOX_UV_CACHE_DIR``, where ``uvx`` keeps the tools it runs) and, when
the working directory has no ``.venv`` yet, the virtualenv the test script
makes there (Terminal-Bench 1.0's ``uv init; uv add pytest; uv run pytest``)
are empty host folders mounted for the tests alone, so a service cannot put a
pytest plugin into them while the tests install and run. A ``.venv`` that is
already there (the image's, or one the agent made) is the task's state and is
used as it is; a pytest plugin the agent put into it is flagged
(``termrl.tampering``). Without private mounts the cache is emptied before the
tests start.
"""

from __future__ import annotations

import asyncio
import logging
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from termrl.artifacts.tasks import Task, TaskFile
from termrl.errors import RewardFailed
from termrl.tbcompat.kit import (
    SANDBOX_UV_CACHE_DIR,
    KitSpec,
    ensure_kit,
    kit_binds,
    kit_files,
    test_env,
)

__all__ = ["TestPhase", "prepare_test_phase", "remove_mount_points"]

log = logging.getLogger("termrl.tbcompat")


class _Result(Protocol):
    output: str
    exit_code: int | None


class _Session(Protocol):
    workdir: str

    async def exec_fresh(self, command: str, timeout: float = ...) -> _Result: ...
    async def upload_files(self, files: list[TaskFile], dest_dir: str) -> None: ...


@dataclass
class TestPhase:
    """What the test command gets beyond the tests: environment, and the kit's private mounts."""

    __test__ = False  # not a pytest test class

    env: dict[str, str] = field(default_factory=dict)
    binds: dict[str, tuple[str, bool]] = field(default_factory=dict)
    """Sandbox path → (host path, read-only), for the tests' process alone."""
    made: list[str] = field(default_factory=list)
    """Mount points made for ``binds`` that did not exist before (``remove_mount_points``)."""


def _mount_points_script(dirs: list[str], files: list[str]) -> str:
    """Each target in place as an empty folder or file of its own, not a link (a mount would follow
    it): whatever else is there is replaced; what is made here is printed, to be removed after."""
    lines = [
        f'p={shlex.quote(d)}; {{ [ -d "$p" ] && [ ! -L "$p" ]; }} || '
        '{ rm -rf -- "$p"; mkdir -p -- "$p" && echo "$p"; } || exit 1'
        for d in dirs
    ]
    lines += [
        f'p={shlex.quote(f)}; mkdir -p -- "$(dirname -- "$p")" && {{ [ -f "$p" ] && [ ! -L "$p" ]; }} || '
        '{ rm -rf -- "$p"; : > "$p" && echo "$p"; } || exit 1'
        for f in files
    ]
    return "\n".join(lines)


async def prepare_test_phase(
    session: _Session, task: Task, private_dir: Path | None = None
) -> TestPhase:
    """Put ``task``'s offline test kit in place for its tests.

    ``private_dir``: a host folder of this scoring's own, given where the backend
    mounts host paths for the tests alone; the kit is then written there and
    returned as mounts. Without it, the kit is uploaded into the sandbox.
    """
    record = task.adaptations.get("test_kit")
    if not record:
        return TestPhase()
    spec = KitSpec.from_json(record)
    kit_dir = await asyncio.to_thread(ensure_kit, spec, log.info)
    # uv goes where astral's installer would put it: the test user's home (as the tests see
    # it: a fresh process, not the agent's shell, whose HOME the agent may have changed).
    # A private .venv only where none is there yet, and where no link leads to the working
    # directory (a private mount's path must have none: the tests would not start).
    probe = await session.exec_fresh(
        'printf "%s\\n" "$HOME"; [ -e .venv ] || [ -L .venv ] || [ "$(pwd -P)" != "$PWD" ] '
        "|| echo no-venv",
        timeout=30,
    )
    home, *rest = probe.output.splitlines() or [""]
    home_dir = home if probe.exit_code == 0 and home.startswith("/") else "/root"
    if private_dir is None:
        files = await asyncio.to_thread(kit_files, spec, kit_dir, home_dir)
        await session.upload_files(files, "/")
        cache = shlex.quote(SANDBOX_UV_CACHE_DIR)
        emptied = await session.exec_fresh(f"rm -rf -- {cache} && mkdir -m 777 {cache}", timeout=60)
        if emptied.exit_code != 0:
            raise RewardFailed(
                f"task {task.id}: cannot empty uv's cache for the tests",
                log_tail=emptied.output[-2000:],
            )
        return TestPhase(test_env(spec))
    binds = await asyncio.to_thread(kit_binds, spec, kit_dir, home_dir, private_dir)
    scratch = {SANDBOX_UV_CACHE_DIR: private_dir / "uv-cache"}
    if "no-venv" in rest:
        scratch[f"{session.workdir.rstrip('/')}/.venv"] = private_dir / "venv"
    for path, folder in scratch.items():
        folder.mkdir()
        folder.chmod(0o777)  # whatever user the tests run as writes there
        binds[path] = (str(folder), False)
    dirs = [path for path, (host, _) in binds.items() if Path(host).is_dir()]
    files = [path for path in binds if path not in dirs]
    made = await session.exec_fresh(_mount_points_script(dirs, files), timeout=30)
    if made.exit_code != 0:
        raise RewardFailed(
            f"task {task.id}: cannot make the test kit's mount points", log_tail=made.output[-2000:]
        )
    return TestPhase(test_env(spec), binds, made.output.splitlines())


async def remove_mount_points(session: _Session, phase: TestPhase) -> None:
    """Take away the mount points ``prepare_test_phase`` made (files, then empty folders)."""
    if phase.made:
        paths = " ".join(shlex.quote(p) for p in phase.made)
        await session.exec_fresh(
            f"rm -f -- {paths} 2>/dev/null; rmdir -- {paths} 2>/dev/null; :", timeout=30
        )
