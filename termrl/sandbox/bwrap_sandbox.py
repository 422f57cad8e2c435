"""One bwrap session: its launcher process, session directory, cgroups and (egress) slirp4netns.

``BwrapBackend.start`` (``termrl.sandbox.bwrap``) starts it; this is what a
session does with it.

Files move host-side through ``/proc/<pid>/root`` of a sandbox process with a
component-by-component walk that resolves symlinks inside the sandbox root
(a symlink planted by the agent cannot point the host at its own files), off
the event loop. A download opens what it found with ``O_PATH`` and reads it
only if it is a regular file within the size limit (a symlink to /dev/zero or
a FIFO cannot exhaust or block the host); an upload replaces a FIFO or device
found at its path.

Fresh processes (``exec_fresh``, what scoring runs) come from
``termrl/sandbox/enter.py``, run by the host: it joins the session's cgroups
and the supervisor's namespaces and root, takes the supervisor's user and
capability sets, no_new_privs and the same seccomp filter, then executes the
command. The sandbox's processes are host processes: stopping the agent's
during scoring and killing a fresh one past its timeout happen from the host
(``termrl.sandbox.procs``).
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import os
import shutil
import signal
import tarfile
from pathlib import Path, PurePosixPath

from termrl.errors import SandboxDied
from termrl.sandbox import procs
from termrl.sandbox.fresh import EntryPoint, exec_entering
from termrl.sandbox.interrupt import run_kill_helper
from termrl.sandbox.rootfs import open_in, overlay_changes, read_regular, walk, write_in
from termrl.sandbox.session import Sandbox
from termrl.sandbox.shell import ProcessChannel

__all__ = ["BwrapSandbox"]


def _children_map() -> dict[int, list[int]]:
    kids: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        kids.setdefault(ppid, []).append(int(entry.name))
    return kids


def _descendants(root: int) -> list[int]:
    kids, found, todo = _children_map(), [], list(_children_map().get(root, []))
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo.extend(kids.get(pid, []))
    return found


def _status_field(pid: int, key: str) -> str | None:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        return None
    return None


class BwrapSandbox(Sandbox):
    """One bwrap sandbox: its launcher process, session directory and cgroups."""

    private_binds = True

    backend = "bwrap"

    def __init__(
        self,
        name: str,
        channel: ProcessChannel,
        session_dir: Path,
        cgroups: list[Path],
        *,
        env: dict[str, str] | None = None,
        seccomp: bytes = b"",
        lower: Path | None = None,
    ):
        self.name = name
        self.channel = channel
        self.session_dir = session_dir
        self.cgroups = cgroups
        self.env = env or {}
        """The environment bwrap started the sandbox with (HOME, image ENV, spec env)."""
        self.seccomp = seccomp
        """The seccomp program bwrap loaded; fresh processes load the same."""
        self.lower = lower
        """The image's rootfs, the overlay's lower layer (what ``changed_files`` compares against)."""
        self.slirp: asyncio.subprocess.Process | None = None
        self.slirp_exit_fd: int | None = None  # closing it ends slirp4netns
        self._host_pids: dict[int, int] = {}

    def host_pid(self, ns_pid: int) -> int:
        """The host pid of the sandbox process whose pid inside the sandbox is ``ns_pid``."""
        if ns_pid not in self._host_pids:
            for pid in _descendants(self.channel.process.pid):
                nspid = (_status_field(pid, "NSpid") or "").split()
                if len(nspid) > 1 and int(nspid[-1]) == ns_pid:
                    self._host_pids[ns_pid] = pid
                    break
            else:
                raise SandboxDied(f"sandbox {self.name} has no process {ns_pid}")
        return self._host_pids[ns_pid]

    async def signal(self, pid: int, sig: str, mode: str) -> str:
        return await run_kill_helper(sig, self.host_pid(pid), mode)  # the host's /proc sees it all

    def _root_fd(self) -> int:
        # The supervisor: bwrap's pid 1 in the sandbox forks it as pid 2.
        try:
            return os.open(f"/proc/{self.host_pid(2)}/root", os.O_RDONLY | os.O_DIRECTORY)
        except OSError as e:
            raise SandboxDied(f"sandbox {self.name} is gone") from e

    async def put_archive(self, archive: bytes) -> None:
        await asyncio.to_thread(self._put_archive, archive)

    def _put_archive(self, archive: bytes) -> None:
        root = self._root_fd()
        try:
            with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
                for member in tar:
                    data = tar.extractfile(member)
                    if not member.isfile() or data is None:
                        continue
                    path = PurePosixPath("/" + member.name)
                    parent = walk(root, path.parent.parts[1:], create=True)
                    try:
                        write_in(parent, path.name, data.read(), member.mode & 0o7777, str(path))
                    finally:
                        os.close(parent)
        finally:
            os.close(root)

    async def get_file(self, path: str, max_bytes: int) -> bytes:
        # Off the event loop: a walk through the sandbox's tree is disk work.
        return await asyncio.to_thread(self._get_file, path, max_bytes)

    def _get_file(self, path: str, max_bytes: int) -> bytes:
        target = PurePosixPath(path)
        root = self._root_fd()
        try:
            parent = walk(root, target.parent.parts[1:], create=False)
            try:
                handle = open_in(root, parent, target.name)  # O_PATH: opening it has no side effect
            finally:
                os.close(parent)
            try:
                return read_regular(handle, path, max_bytes)
            finally:
                os.close(handle)
        finally:
            os.close(root)

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
        return await exec_entering(
            self,
            command,
            env=env,
            workdir=workdir,
            timeout=timeout,
            output_limit=output_limit,
            binds=binds,
            user=user,
            gone=f"sandbox {self.name} is gone",
        )

    async def entry_point(self) -> EntryPoint:
        """The supervisor, with the sandbox's cgroups, seccomp filter and environment."""
        return EntryPoint(
            await self.enter_target(), [str(c) for c in self.cgroups], self.seccomp, self.env
        )

    async def changed_files(self) -> dict[str, str] | None:
        if self.lower is None:
            return None
        # The layer may be mounted in the launcher's mount namespace only: read it through its root.
        upper = (
            Path(f"/proc/{self.channel.process.pid}/root")
            / self.session_dir.relative_to("/")
            / "layer"
            / "upper"
        )
        return await asyncio.to_thread(overlay_changes, upper, self.lower)

    async def stop_agent_processes(self, shell_pid: int | None) -> list[procs.StoppedProcess]:
        settled = [self.host_pid(2)]  # the supervisor
        if shell_pid is not None:
            with contextlib.suppress(SandboxDied):  # a shell that is gone is not waited for anyway
                settled.append(self.host_pid(shell_pid))
        return await asyncio.to_thread(
            procs.stop_agent_processes, self.host_pid(1), settled=settled
        )

    async def resume_agent_processes(self, stopped: object) -> None:
        await asyncio.to_thread(procs.resume, stopped)  # type: ignore[arg-type]

    async def enter_target(self) -> int:
        return self.host_pid(2)  # the supervisor: the sandbox's namespaces, root and credentials

    async def alive(self) -> bool:
        return self.channel.process.returncode is None

    async def destroy(self) -> None:
        process = self.channel.process
        if process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                for pid in [*_descendants(process.pid), process.pid]:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(process.wait(), 10)
        await self._stop_slirp()
        for cgroup in self.cgroups:
            for _ in range(200):  # the kernel needs a moment to drop the killed tasks
                try:
                    cgroup.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    await asyncio.sleep(0.005)
        await asyncio.to_thread(shutil.rmtree, self.session_dir, True)

    async def _stop_slirp(self) -> None:
        if self.slirp_exit_fd is not None:
            os.close(self.slirp_exit_fd)
            self.slirp_exit_fd = None
        if self.slirp is not None and self.slirp.returncode is None:
            try:
                await asyncio.wait_for(self.slirp.wait(), 5)
            except TimeoutError:
                self.slirp.kill()
                await self.slirp.wait()
