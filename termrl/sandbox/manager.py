"""``SandboxManager``: the one entry point rollout, verification and eval use.

    async with SandboxManager(backend="podman") as manager:   # or a SandboxSettings
        async with await manager.create(SandboxSpec.from_task(task)) as session:
            result = await session.exec("cd /app && make", timeout=60)

The manager picks a backend once, builds (and caches) images, starts
sessions, keeps track of the open ones (closed on exit) and translates every
failure into the ``termrl.errors`` types mask & filter reads: a failed build
or start is ``EnvInitFailed`` (with the log tail), a missing backend or
exhausted capacity ``SandboxUnavailable``.
"""

from __future__ import annotations

import asyncio
import os
import time
from types import TracebackType
from typing import Any

from termrl.errors import EnvInitFailed, SandboxUnavailable, failure_type
from termrl.sandbox import metrics, termination
from termrl.sandbox.backend import Backend
from termrl.sandbox.session import Session
from termrl.sandbox.settings import BACKENDS as _REGISTRY
from termrl.sandbox.settings import SandboxSettings, make_backend
from termrl.sandbox.spec import SandboxSpec

__all__ = ["BACKENDS", "SandboxManager", "SandboxSettings"]

BACKENDS = tuple(_REGISTRY)
"""The backends' names (``termrl.sandbox.settings.BACKENDS`` is the registry)."""


class SandboxManager:
    """Creates sessions on one backend; an async context manager that closes them all.

    ``output_limit`` caps each command's output (bytes; head and tail kept).
    ``max_sessions`` bounds open sessions: ``create`` waits for a free slot
    up to ``acquire_timeout_sec``, then raises ``SandboxUnavailable``.
    ``max_starting`` bounds sandboxes starting at once (default: 4 per CPU
    for local backends, 64 on Kubernetes): 256 simultaneous ``podman run``
    on two cores would push each past its start timeout, queued they all
    start. Backend options (``binary``, ``namespace``, ...) pass through.
    """

    def __init__(
        self,
        backend: str | SandboxSettings = "podman",
        *,
        output_limit: int = 16384,
        max_sessions: int = 256,
        acquire_timeout_sec: float = 600.0,
        max_starting: int | None = None,
        **backend_options: Any,
    ):
        settings = SandboxSettings(backend) if isinstance(backend, str) else backend
        self.backend_name = settings.backend
        self.backend: Backend = make_backend(settings, **backend_options)
        self.output_limit = output_limit
        self.acquire_timeout_sec = acquire_timeout_sec
        self._slots = asyncio.Semaphore(max_sessions)
        if max_starting is None:
            max_starting = 64 if settings.backend == "kubernetes" else 4 * (os.cpu_count() or 1)
        self._starting = asyncio.Semaphore(max_starting)
        self._sessions: set[Session] = set()

    @property
    def name(self) -> str:
        return self.backend.name

    async def build_image(self, spec: SandboxSpec) -> str:
        """Build (or find cached) the image of ``spec``; returns its reference."""
        try:
            return await self.backend.build_image(spec)
        except (EnvInitFailed, SandboxUnavailable) as e:
            metrics.FAILURES.labels(self.name, failure_type(e)).inc()
            raise

    async def create(self, spec: SandboxSpec) -> Session:
        """Start a sandbox for ``spec`` and return its ready session."""
        termination.watch(self)  # SIGTERM closes this manager's sessions before the process ends
        try:
            await asyncio.wait_for(self._slots.acquire(), self.acquire_timeout_sec)
        except TimeoutError as e:
            metrics.FAILURES.labels(self.name, "SandboxUnavailable").inc()
            raise SandboxUnavailable(
                f"no free sandbox slot within {self.acquire_timeout_sec:g}s"
            ) from e
        try:
            image = await self.backend.build_image(spec)
            async with self._starting:
                started = time.monotonic()
                sandbox, shell = await self.backend.start(spec, image, self.output_limit)
        except BaseException as e:
            self._slots.release()
            if isinstance(e, EnvInitFailed | SandboxUnavailable):
                metrics.FAILURES.labels(self.name, failure_type(e)).inc()
            raise
        metrics.CREATE_SECONDS.labels(self.name).observe(time.monotonic() - started)
        metrics.CREATED.labels(self.name).inc()
        metrics.ACTIVE.labels(self.name).inc()
        session = Session(sandbox, shell, spec, started=started, on_close=self._closed)
        self._sessions.add(session)
        return session

    def _closed(self, session: Session) -> None:
        if session in self._sessions:
            self._sessions.discard(session)
            self._slots.release()

    @property
    def sessions(self) -> list[Session]:
        """The sessions open now."""
        return list(self._sessions)

    def stats(self) -> dict[str, float]:
        """This backend's counters and gauges (see ``termrl.sandbox.metrics``)."""
        return metrics.snapshot(self.name)

    async def close(self) -> None:
        """Close every open session."""
        sessions = list(self._sessions)
        if sessions:
            async with asyncio.TaskGroup() as group:
                for session in sessions:
                    group.create_task(session.close())

    async def __aenter__(self) -> SandboxManager:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()
