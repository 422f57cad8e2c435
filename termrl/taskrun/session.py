"""What running and scoring a task need from a sandbox session, and the paths they share."""

from __future__ import annotations

from contextlib import AbstractAsyncContextManager
from typing import Protocol

from termrl.artifacts.tasks import TaskFile
from termrl.reward import VERIFIER_DIR

__all__ = [
    "DEFAULT_AGENT_TIMEOUT_SEC",
    "DEFAULT_VERIFIER_TIMEOUT_SEC",
    "LEFTOVERS",
    "SOLUTION_DIR",
    "TESTS_DIR",
    "CommandResult",
    "TaskSession",
]

TESTS_DIR = "/tests"
SOLUTION_DIR = "/solution"
LEFTOVERS = (SOLUTION_DIR, TESTS_DIR, VERIFIER_DIR)
"""Paths that must not exist when a sandbox is handed out: tests and solution come at scoring."""
DEFAULT_AGENT_TIMEOUT_SEC = 600.0
DEFAULT_VERIFIER_TIMEOUT_SEC = 600.0


class CommandResult(Protocol):
    """What one command run in the sandbox returned."""

    output: str
    exit_code: int | None
    timed_out: bool


class TaskSession(Protocol):
    """The part of ``termrl.sandbox.Session`` that running and scoring a task use."""

    workdir: str
    private_binds: bool

    async def exec(self, command: str, timeout: float = ...) -> CommandResult: ...
    async def exec_fresh(
        self,
        command: str,
        timeout: float = ...,
        *,
        env: dict[str, str] | None = ...,
        workdir: str | None = ...,
        binds: dict[str, tuple[str, bool]] | None = ...,
        user: str | None = ...,
    ) -> CommandResult: ...
    async def close(self) -> None: ...
    def agent_stopped(self) -> AbstractAsyncContextManager[None]: ...
    def system_paths_frozen(self) -> AbstractAsyncContextManager[None]: ...
    async def upload_files(self, files: list[TaskFile], dest_dir: str) -> None: ...
    async def changed_files(self) -> dict[str, str] | None: ...
