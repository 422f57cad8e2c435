"""The one path from a task to a ready sandbox: its image built once, a fresh session, set-up leftovers removed."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING

from termrl.artifacts.tasks import Task
from termrl.errors import EnvInitFailed, ResetFailed, TermrlError, TransientError
from termrl.sandbox.spec import SandboxSpec
from termrl.taskrun.session import LEFTOVERS, TaskSession
from termrl.tbcompat.runnable import unmet_requirements

if TYPE_CHECKING:
    from termrl.sandbox.manager import SandboxManager
    from termrl.sandbox.session import Session

__all__ = ["TaskSandboxes", "opened_by", "remove_leftovers"]

_OPENED: dict[int, TaskSandboxes] = {}
"""The TaskSandboxes each open session (by id, while ``TaskSandboxes.open`` holds it) came from."""


def opened_by(session: object) -> TaskSandboxes | None:
    """The TaskSandboxes whose ``open`` holds ``session`` (how a separate verifier gets its sandbox), or None."""
    return _OPENED.get(id(session))


async def remove_leftovers(session: TaskSession, *, user: str | None = None) -> None:
    """Bring a fresh sandbox to the task's start state: no tests, no solution, no reward file.

    The image never contains them (``SandboxSpec.from_task``), but a Dockerfile
    may have created such paths; nobody working in the sandbox may find them.
    ``ResetFailed`` when they cannot be removed; a ``TransientError`` passes through.
    ``user``: remove them as this user, through a fresh process (an agent that is not
    root could not remove what the image's root left), not the agent's shell.
    """
    paths = " ".join(LEFTOVERS)
    checks = " && ".join(f"[ ! -e {p} ]" for p in LEFTOVERS)
    command = f"rm -rf {paths}; {checks}"
    try:
        if user is None:
            result = await session.exec(command, 30.0)
        else:
            result = await session.exec_fresh(command, 30.0, user=user)
    except TransientError:
        raise
    except TermrlError as exc:
        raise ResetFailed(f"reset failed: {exc}") from exc
    if result.timed_out or result.exit_code != 0:
        raise ResetFailed("set-up leftovers could not be removed", log_tail=result.output[-2000:])


class TaskSandboxes:
    """The one path from a task to a ready sandbox: build each image once, fresh session, leftovers removed.

    How many sandboxes are alive at once is the manager's ``max_sessions``
    (``open`` waits there for a slot); nothing here adds a second bound.
    ``lifetime_sec`` gives each task's sandbox its lifetime (default: the
    ``SandboxSpec`` default).
    """

    def __init__(
        self, manager: SandboxManager, *, lifetime_sec: Callable[[Task], float] | None = None
    ) -> None:
        self.manager = manager
        self.lifetime_sec = lifetime_sec
        self._builds: dict[str, asyncio.Future[None]] = {}

    def spec(self, task: Task, *, verifier: bool = False) -> SandboxSpec:
        """The task's sandbox: its environment and limits (never its tests or solution). ``verifier``: a separate
        verifier's sandbox, the same but with no agent user (its tests pick their own) and its own network."""
        overrides: dict[str, object] = {}
        if verifier:
            overrides["user"] = None
            if task.verifier_network is not None:
                overrides["network"] = "egress" if task.verifier_network == "public" else "none"
        if self.lifetime_sec is not None:
            overrides["lifetime_sec"] = self.lifetime_sec(task)
        return SandboxSpec.from_task(task, **overrides)

    async def build(self, task: Task) -> None:
        """Build (or find cached) the task's image once per image key; a failed build is remembered and
        re-raised (EnvInitFailed) for every later task with that image; a cancelled build lets the next caller retry."""
        await self._build(self.spec(task))

    async def _build(self, spec: SandboxSpec) -> None:
        key = spec.image_key
        while (pending := self._builds.get(key)) is not None:
            try:
                await asyncio.shield(pending)  # EnvInitFailed of an earlier build re-raises here
                return
            except asyncio.CancelledError:
                current = asyncio.current_task()
                if not pending.cancelled() or (current is not None and current.cancelling()):
                    raise
                # The caller that was building got cancelled, not this one: build here.
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._builds[key] = future
        try:
            await self.manager.build_image(spec)
        except BaseException as exc:
            if isinstance(exc, EnvInitFailed):
                future.set_exception(exc)
                future.exception()  # marked retrieved; later waiters re-raise it
            else:  # cancelled, unavailable or unexpected: let the next caller try again
                del self._builds[key]
                future.cancel()
            raise
        future.set_result(None)

    @asynccontextmanager
    async def open(self, task: Task, *, verifier: bool = False) -> AsyncIterator[Session]:
        """build(task), create a session, remove set-up leftovers and check they are gone (ResetFailed otherwise,
        TransientError passes through), yield it, close it. ``verifier``: the sandbox of a separate verifier."""
        # Judged on the machine that runs it (GPUs, platform), per task: not in build(), whose
        # error is shared by every task of the image.
        unmet = unmet_requirements(task)
        if unmet:
            raise EnvInitFailed(f"task {task.id} cannot run here: " + "; ".join(unmet))
        spec = self.spec(task, verifier=verifier)
        await self._build(spec)
        async with await self.manager.create(spec) as session:
            _OPENED[id(session)] = self  # how run_tests starts a separate verifier's sandbox
            try:
                await remove_leftovers(session, user="0" if spec.user else None)
                yield session
            finally:
                _OPENED.pop(id(session), None)
