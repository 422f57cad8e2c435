"""Putting the offline test kit into a sandbox right before its tests run.

``termrl.taskrun.run_tests`` calls ``prepare_test_phase`` after uploading the
tests and before running them; it returns the environment the test command
runs with. A task that records no ``test_kit`` adaptation gets nothing. The
kit is fetched on the host (cached; see ``termrl.tbcompat.kit``) — never from
inside the sandbox, which has no network.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Protocol

from termrl.artifacts.tasks import Task, TaskFile
from termrl.tbcompat.kit import KitSpec, ensure_kit, kit_files, test_env

__all__ = ["prepare_test_phase"]

log = logging.getLogger("termrl.tbcompat")


class _Result(Protocol):
    output: str
    exit_code: int | None


class _Session(Protocol):
    async def exec_fresh(self, command: str, timeout: float = ...) -> _Result: ...
    async def upload_files(self, files: list[TaskFile], dest_dir: str) -> None: ...


async def prepare_test_phase(session: _Session, task: Task) -> dict[str, str]:
    """Upload ``task``'s offline test kit into ``session``; the test phase's extra environment."""
    record = task.adaptations.get("test_kit")
    if not record:
        return {}
    spec = KitSpec.from_json(record)
    kit_dir = await asyncio.to_thread(ensure_kit, spec, log.info)
    # uv goes where astral's installer would put it: the test user's home (as the tests see
    # it: a fresh process, not the agent's shell, whose HOME the agent may have changed).
    home = await session.exec_fresh('printf "%s" "$HOME"', timeout=30)
    home_dir = (
        home.output.strip()
        if home.exit_code == 0 and home.output.strip().startswith("/")
        else "/root"
    )
    files = await asyncio.to_thread(kit_files, spec, kit_dir, home_dir)
    await session.upload_files(files, "/")
    return test_env(spec)
