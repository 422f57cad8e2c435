"""``Session``: one running sandbox as the agent and the verifier see it.

A session pairs a backend's ``Sandbox`` handle (start/stop, file transfer,
signals) with the persistent ``Shell`` running in it. It owns the lifecycle
(``State``), the lifetime watchdog and the per-session metrics; the backends
only move bytes and processes.

    create ─► STARTING ─► READY ─(exec/upload/download)─► CLOSED
                              └──── sandbox gone / lifetime over ─► DEAD ─► CLOSED

Two channels reach a sandbox. ``exec`` is the agent's persistent shell.
``exec_fresh`` starts a new process through the backend's own channel, with
none of the shell's state (``termrl.sandbox.fresh``): scoring uses it, inside
``agent_stopped()``, which stops every process the agent left running except
its services (``termrl.sandbox.procs``) until the tests are done.

``download`` returns regular files only: a symlink to a device, a FIFO or a
socket raises ``NotRegularFile`` and a file over ``max_bytes`` raises
``FileTooLarge`` (both ``OSError``s), so nothing the agent plants can block
the host or fill its memory.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import errno
import io
import tarfile
import time
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path, PurePosixPath
from types import TracebackType

from termrl.artifacts.tasks import TaskFile
from termrl.errors import SandboxDied
from termrl.sandbox import metrics
from termrl.sandbox.fresh import Frozen
from termrl.sandbox.shell import Shell
from termrl.sandbox.spec import ExecResult, SandboxSpec

__all__ = [
    "DOWNLOAD_MAX_BYTES",
    "FileTooLarge",
    "NotRegularFile",
    "Sandbox",
    "Session",
    "State",
    "pack_files",
    "relative_inside",
    "unpack_file",
]

DOWNLOAD_MAX_BYTES = 1 << 30
"""The largest file ``download`` returns unless told otherwise (1 GiB)."""


class NotRegularFile(OSError):
    """A download found a device, FIFO, socket or (podman, Kubernetes) a symlink where a regular file was asked for."""

    def __init__(self, path: str, kind: str):
        super().__init__(errno.EINVAL, f"not a regular file ({kind})", path)


class FileTooLarge(OSError):
    """A download found a file larger than its ``max_bytes``."""

    def __init__(self, path: str, size: int, limit: int):
        super().__init__(errno.EFBIG, f"{size} bytes, more than the limit of {limit}", path)


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
    async def signal(self, pid: int, sig: str, mode: str) -> str:
        """Run ``KILL_HELPER`` on the shell ``pid``'s processes; what it printed (``shell.SignalHook``)."""

    @abstractmethod
    async def put_archive(self, archive: bytes) -> None:
        """Extract an uncompressed tar archive (``pack_files``) at the sandbox's ``/``."""

    @abstractmethod
    async def get_file(self, path: str, max_bytes: int) -> bytes:
        """The bytes of a regular file; ``FileNotFoundError`` if there is none, ``IsADirectoryError``,
        ``NotRegularFile`` for anything else, ``FileTooLarge`` past ``max_bytes``. Never blocks on
        what it finds (a FIFO) and never reads more than ``max_bytes``."""

    private_binds: bool = False
    """Whether ``exec_fresh`` can show its process host directories that no other process of the
    sandbox sees (``binds``): a mount namespace of its own, entered by the host."""

    frozen: Frozen | None = None
    """The system folders ``freeze_system_paths`` holds read-only; ``exec_fresh`` with binds gets
    them writable again (``frozen.names``)."""

    async def enter_target(self) -> int | None:
        """The host pid whose namespaces and root ``termrl/sandbox/enter.py`` enters; None where the
        host cannot enter the sandbox (no private binds)."""
        return None

    async def freeze_system_paths(self) -> None:
        """Make the system folders read-only for every process of the sandbox but ``exec_fresh``'s
        with binds, until ``thaw_system_paths`` (``termrl.sandbox.fresh.Frozen``); nothing where
        the host cannot enter the sandbox. OSError when it cannot."""
        if self.frozen is None and (target := await self.enter_target()) is not None:
            self.frozen = await Frozen.start(target)

    async def thaw_system_paths(self) -> None:
        """Undo ``freeze_system_paths``."""
        if self.frozen is not None:
            frozen, self.frozen = self.frozen, None
            await frozen.thaw()

    @abstractmethod
    async def exec_fresh(
        self,
        command: str,
        *,
        env: dict[str, str] | None,
        workdir: str,
        timeout: float,
        output_limit: int,
        binds: dict[str, tuple[str, bool]] | None = None,
        user: str | None = None,
    ) -> tuple[str, int | None, bool, bool]:
        """Run ``command`` in a new process outside the agent's shell (``termrl.sandbox.fresh``), with
        the sandbox's own limits; (output, exit status or None, timed_out, truncated). ``binds``
        (sandbox path → (host directory or file, read-only); only where ``private_binds``): mounted
        for this process alone over existing directories or files of the sandbox, reached through no
        symbolic link and pinned there while it runs (``termrl/sandbox/enter.py``). ``user`` (a name
        or uid of the sandbox): run as that user instead of the sandbox's own."""

    @abstractmethod
    async def stop_agent_processes(self, shell_pid: int | None) -> object:
        """SIGSTOP every process in the sandbox but its init and its services; what ``resume`` needs.
        ``shell_pid`` (the agent shell's pid inside the sandbox) is never waited for as a service
        that may still be starting (``termrl.sandbox.procs``)."""

    @abstractmethod
    async def resume_agent_processes(self, stopped: object) -> None:
        """SIGCONT what ``stop_agent_processes`` stopped (those still alive)."""

    async def changed_files(self) -> dict[str, str] | None:
        """Paths added ("A") or changed ("C") in the sandbox's filesystem since it started, from
        outside the sandbox (so no process inside can hide them); None where the backend cannot tell."""
        return None

    @abstractmethod
    async def alive(self) -> bool: ...

    @abstractmethod
    async def destroy(self) -> None:
        """Stop and remove the sandbox and everything it started. Idempotent."""


def relative_inside(path: str) -> PurePosixPath:
    """``path`` as a relative path that stays inside the directory it is joined to (ValueError if not)."""
    rel = PurePosixPath(path)
    if not rel.parts or rel.is_absolute() or ".." in rel.parts:
        raise ValueError(f"not a relative path inside the destination: {path!r}")
    return rel


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
            info = tarfile.TarInfo(str(base.relative_to("/") / relative_inside(path)))
            info.size, info.mode, info.mtime = len(data), mode & 0o7777, int(time.time())
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def _member_kind(member: tarfile.TarInfo) -> str:
    if member.issym() or member.islnk():
        return "symlink"
    if member.ischr() or member.isblk():
        return "device"
    if member.isfifo():
        return "FIFO"
    return "special file"


def unpack_file(archive: bytes, path: str, max_bytes: int = DOWNLOAD_MAX_BYTES) -> bytes:
    """The single regular file in a tar written by ``podman cp CTR:path -``.

    ``IsADirectoryError`` for a directory, ``NotRegularFile`` for a symlink,
    device or FIFO (``podman cp`` archives those as such), ``FileTooLarge``
    past ``max_bytes``, ``FileNotFoundError`` for an archive without entries.
    """
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        for member in tar:
            if member.isdir():
                raise IsADirectoryError(path)
            if not member.isfile():
                raise NotRegularFile(path, _member_kind(member))
            if member.size > max_bytes:
                raise FileTooLarge(path, member.size, max_bytes)
            extracted = tar.extractfile(member)
            if extracted is not None:
                return extracted.read()
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
            return SandboxDied(
                f"sandbox {self.name} reached its lifetime of {self.spec.lifetime_sec:g}s"
            )
        return error

    async def exec(self, command: str, timeout: float = 60.0) -> ExecResult:
        """Run ``command`` in the persistent shell (see ``termrl.sandbox.shell``)."""
        return await self._timed(lambda: self.shell.exec(command, timeout))

    async def _timed(
        self, run: Callable[[], Awaitable[tuple[str, int | None, bool, bool]]]
    ) -> ExecResult:
        """Run one command (output, exit code, timed out, truncated): metrics, a dead sandbox typed."""
        self._check()
        started = time.monotonic()
        try:
            output, code, timed_out, truncated = await run()
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
        await self._put(
            pack_files(
                [(target.name, data, default_mode if mode is None else mode)], str(target.parent)
            )
        )

    async def upload_files(self, files: list[TaskFile], dest_dir: str) -> None:
        """Write task files under ``dest_dir`` keeping their relative paths and modes."""
        await self._put(pack_files([(f.path, f.data, f.mode) for f in files], dest_dir))

    async def _put(self, archive: bytes) -> None:
        self._check()
        try:
            await self.sandbox.put_archive(archive)
        except SandboxDied as e:
            raise await self._died(e) from e

    async def download(self, path: str, *, max_bytes: int = DOWNLOAD_MAX_BYTES) -> bytes:
        """The bytes of the regular file at ``path``; ``FileNotFoundError`` if it does not exist,
        ``NotRegularFile``/``IsADirectoryError`` if it is something else, ``FileTooLarge`` past ``max_bytes``."""
        self._check()
        try:
            return await self.sandbox.get_file(path, max_bytes)
        except SandboxDied as e:
            raise await self._died(e) from e

    @property
    def private_binds(self) -> bool:
        """Whether ``exec_fresh`` takes ``binds`` on this backend (``Sandbox.private_binds``)."""
        return self.sandbox.private_binds

    async def exec_fresh(
        self,
        command: str,
        timeout: float = 60.0,
        *,
        env: dict[str, str] | None = None,
        workdir: str | None = None,
        binds: dict[str, tuple[str, bool]] | None = None,
        user: str | None = None,
    ) -> ExecResult:
        """Run ``command`` in a new process, not in the agent's shell (``termrl.sandbox.fresh``).

        Its environment is the sandbox's configured one plus ``env``; it starts
        in ``workdir`` (default: the session's ``workdir``, where the shell
        started). Output is capped like ``exec``'s; past ``timeout`` the process
        and everything it started are killed and ``timed_out`` is set.

        ``binds`` (sandbox path → (host directory, read-only), where
        ``private_binds``): host directories the process, and only it and its
        children, sees at those paths (which must exist); what it writes there is
        read from the host. The process runs in a user namespace of its own, out
        of reach of the sandbox's other processes (``termrl/sandbox/enter.py``).
        ``user``: a name or uid of the sandbox to run as (default: the sandbox's
        user; the agent's shell may run as another, ``SandboxSpec.user``).
        """
        if binds and not self.sandbox.private_binds:
            raise ValueError(
                f"the {self.backend} backend cannot give a process private directories"
            )
        return await self._timed(
            lambda: self.sandbox.exec_fresh(
                command,
                env=env,
                workdir=workdir or self.workdir,
                timeout=timeout,
                output_limit=self.shell.output_limit,
                binds=binds,
                user=user,
            )
        )

    async def changed_files(self) -> dict[str, str] | None:
        """What changed in the filesystem since the sandbox started (``Sandbox.changed_files``)."""
        self._check()
        try:
            return await self.sandbox.changed_files()
        except SandboxDied as e:
            raise await self._died(e) from e

    @contextlib.asynccontextmanager
    async def system_paths_frozen(self) -> AsyncIterator[None]:
        """Inside the block, nothing in the sandbox but the tests' process (``exec_fresh`` with
        binds) can write the system folders (``Sandbox.freeze_system_paths``)."""
        self._check()
        try:
            await self.sandbox.freeze_system_paths()
        except SandboxDied as e:
            raise await self._died(e) from e
        try:
            yield
        finally:
            await self.sandbox.thaw_system_paths()

    @contextlib.asynccontextmanager
    async def agent_stopped(self) -> AsyncIterator[None]:
        """Keep the agent's processes stopped (SIGSTOP) inside the block; services keep running.

        Everything in the sandbox except its init process and the services
        (processes holding a listening socket, and their children) is stopped,
        the agent's shell included: use ``exec_fresh`` inside. They are resumed
        on the way out, so the session stays usable after scoring.
        """
        self._check()
        try:
            stopped = await self.sandbox.stop_agent_processes(self.shell.pid)
        except SandboxDied as e:
            raise await self._died(e) from e
        try:
            yield
        finally:
            if self.state is State.READY:
                await self.sandbox.resume_agent_processes(stopped)

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
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()
