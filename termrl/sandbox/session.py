"""``Session``: one running sandbox as the agent and the verifier see it.

A session pairs a backend's ``Sandbox`` handle (start/stop, file transfer,
signals) with the persistent ``Shell`` running in it. It owns the lifecycle
(``State``), the lifetime watchdog and the per-session metrics; the backends
only move bytes and processes.

    create ─► STARTING ─► READY ─(exec/upload/download)─► CLOSED
                              └──── sandbox gone / lifetime over ─► DEAD ─► CLOSED
"""

from __future__ import annotations

import asyncio
import enum
import io
import tarfile
import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from pathlib import Path, PurePosixPath
from types import TracebackType

from termrl.artifacts.tasks import TaskFile
from termrl.errors import SandboxDied
from termrl.sandbox import metrics
from termrl.sandbox.shell import Shell
from termrl.sandbox.spec import ExecResult, SandboxSpec

__all__ = ["Sandbox", "Session", "State", "pack_files", "unpack_file"]


class State(enum.Enum):
    STARTING = "starting"
    READY = "ready"
    DEAD = "dead"
    CLOSED = "closed"


class Sandbox(ABC):
    """A backend's handle on one started sandbox."""

    name: str
    backend: str

    @abstractmethod
    async def signal(self, pid: int, sig: str, mode: str) -> None:
        """Send ``sig`` to the shell ``pid``'s descendants (see ``shell.KILL_HELPER``)."""

    @abstractmethod
    async def put_archive(self, archive: bytes) -> None:
        """Extract an uncompressed tar archive (``pack_files``) at the sandbox's ``/``."""

    @abstractmethod
    async def get_file(self, path: str) -> bytes:
        """The bytes of a regular file; ``FileNotFoundError`` if there is none."""

    @abstractmethod
    async def alive(self) -> bool: ...

    @abstractmethod
    async def destroy(self) -> None:
        """Stop and remove the sandbox and everything it started. Idempotent."""


def pack_files(files: list[tuple[str, bytes, int]], dest_dir: str) -> bytes:
    """A tar of (path relative to ``dest_dir``, bytes, mode) entries, rooted at ``/``.

    Entries carry their full path and no directory entries: extracting at ``/``
    creates missing parents (0755) and never touches an existing directory's
    mode (``/tmp`` keeps its sticky bit).
    """
    base = PurePosixPath(dest_dir)
    if not base.is_absolute():
        raise ValueError(f"destination must be an absolute path: {dest_dir!r}")
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for path, data, mode in files:
            rel = PurePosixPath(path)
            if not rel.parts or rel.is_absolute() or ".." in rel.parts:
                raise ValueError(f"not a relative path inside the destination: {path!r}")
            info = tarfile.TarInfo(str(base.relative_to("/") / rel))
            info.size, info.mode, info.mtime = len(data), mode & 0o7777, int(time.time())
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def unpack_file(archive: bytes, path: str) -> bytes:
    """The single regular file in a tar written by ``podman cp CTR:path -``."""
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        for member in tar:
            if member.isfile():
                extracted = tar.extractfile(member)
                if extracted is not None:
                    return extracted.read()
            if member.isdir():
                raise IsADirectoryError(path)
    raise FileNotFoundError(path)


class Session:
    """A sandbox with a persistent shell. Use as ``async with await manager.create(spec)``."""

    def __init__(
        self,
        sandbox: Sandbox,
        shell: Shell,
        spec: SandboxSpec,
        *,
        started: float,
        on_close: Callable[[Session], None] | None = None,
    ):
        self.sandbox = sandbox
        self._on_close = on_close
        self.shell = shell
        self.spec = spec
        self.state = State.READY
        self.started = started
        self._lifetime = asyncio.get_running_loop().call_later(
            max(spec.lifetime_sec - (time.monotonic() - started), 0), self._expire
        )
        self._closing: asyncio.Task[None] | None = None
        self.expired = False

    @property
    def name(self) -> str:
        return self.sandbox.name

    @property
    def workdir(self) -> str:
        """The directory the shell started in: the spec's workdir or the image's WORKDIR."""
        return self.shell.start_dir

    @property
    def backend(self) -> str:
        return self.sandbox.backend

    def _expire(self) -> None:
        self.expired = True
        self.state = State.DEAD
        asyncio.ensure_future(self.close())

    def _check(self) -> None:
        if self.state is not State.READY:
            why = "its lifetime is over" if self.expired else f"it is {self.state.value}"
            raise SandboxDied(f"sandbox {self.name} cannot be used: {why}")

    async def _died(self, error: SandboxDied) -> SandboxDied:
        if self.state is State.READY:
            self.state = State.DEAD
        metrics.FAILURES.labels(self.backend, "SandboxDied").inc()
        if self.expired:
            return SandboxDied(f"sandbox {self.name} reached its lifetime of {self.spec.lifetime_sec:g}s")
        return error

    async def exec(self, command: str, timeout: float = 60.0) -> ExecResult:
        """Run ``command`` in the persistent shell (see ``termrl.sandbox.shell``)."""
        self._check()
        started = time.monotonic()
        try:
            output, code, timed_out, truncated = await self.shell.exec(command, timeout)
        except SandboxDied as e:
            raise await self._died(e) from e
        duration = time.monotonic() - started
        metrics.EXEC_SECONDS.labels(self.backend).observe(duration)
        if timed_out:
            metrics.EXEC_TIMEOUTS.labels(self.backend).inc()
        return ExecResult(output, code, duration, timed_out, truncated)

    async def upload(self, source: bytes | str | Path, dest: str, mode: int | None = None) -> None:
        """Write a file (bytes, or a local file's contents) at the absolute path ``dest``."""
        if isinstance(source, bytes):
            data, default_mode = source, 0o644
        else:
            local = Path(source)
            data, default_mode = local.read_bytes(), local.stat().st_mode & 0o7777
        target = PurePosixPath(dest)
        if not target.is_absolute():
            raise ValueError(f"upload destination must be absolute: {dest!r}")
        await self._put(pack_files([(target.name, data, default_mode if mode is None else mode)], str(target.parent)))

    async def upload_files(self, files: list[TaskFile], dest_dir: str) -> None:
        """Write task files under ``dest_dir`` keeping their relative paths and modes."""
        await self._put(pack_files([(f.path, f.data, f.mode) for f in files], dest_dir))

    async def _put(self, archive: bytes) -> None:
        self._check()
        try:
            await self.sandbox.put_archive(archive)
        except SandboxDied as e:
            raise await self._died(e) from e

    async def download(self, path: str) -> bytes:
        """The bytes of the file at ``path``; ``FileNotFoundError`` if it does not exist."""
        self._check()
        try:
            return await self.sandbox.get_file(path)
        except SandboxDied as e:
            raise await self._died(e) from e

    async def close(self) -> None:
        """Destroy the sandbox. Idempotent; concurrent callers all wait for the one teardown."""
        if self._closing is None:
            self._closing = asyncio.ensure_future(self._teardown())
        await asyncio.shield(self._closing)

    async def _teardown(self) -> None:
        self.state = State.CLOSED
        self._lifetime.cancel()
        try:
            await self.sandbox.destroy()
        finally:
            await self.shell.channel.close()
            if self._on_close is not None:
                self._on_close(self)
            metrics.ACTIVE.labels(self.backend).dec()
            metrics.CLOSED.labels(self.backend).inc()

    async def __aenter__(self) -> Session:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()
