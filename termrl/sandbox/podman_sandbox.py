"""One podman (or docker) session: a running container whose pid 1 is the shell supervisor.

``PodmanBackend.start`` (``termrl.sandbox.podman``) runs the container; this is
what a session does with it. Files move with ``podman cp`` (a tar stream);
``changed_files`` reads the writable layer of the session's root when termrl
mounted it (``disk_layer``), else asks ``podman diff``.

Scoring's fresh processes (``exec_fresh``) are ``podman exec``: runc starts
them with the container's capabilities, seccomp profile, no-new-privileges,
user and cgroup, from the container's configured environment (read once from
``podman inspect``, passed through ``env -i``). The tests themselves, which
need directories of their own (``binds``), are started by the host entering the
container as it enters a bwrap sandbox (``termrl/sandbox/enter.py``; rootful
podman only). The container's processes are
host processes, so stopping the agent's processes during scoring and killing a
fresh process past its timeout happen from the host (``termrl.sandbox.procs``),
never through a binary inside the container.

Remote mode (``remote``: the container runs on a podman service's host, see
``termrl.sandbox.podman``): no private binds (the tests are uploaded, as on
Kubernetes), and stopping the agent's processes and killing a timed-out fresh
process run helpers inside the container (``STOP_HELPER``, ``KILL_HELPER``)
through ``podman exec``.
"""

from __future__ import annotations

import asyncio
import io
import json
import math
import os
import secrets
import tarfile
import time
from pathlib import Path

from termrl.errors import SandboxDied
from termrl.sandbox import procs, seccomp
from termrl.sandbox.cli_calls import read_capped, run_cli
from termrl.sandbox.disk_layer import DiskLayer, unmount_layer
from termrl.sandbox.fresh import (
    PID_LINE_WAIT_SEC,
    EntryPoint,
    collect,
    exec_entering,
    fresh_argv,
    fresh_env,
    late_pid,
    pid_line_argv,
    split_pid_line,
)
from termrl.sandbox.reaping import ended_on_error
from termrl.sandbox.rootfs import overlay_changes
from termrl.sandbox.session import FileTooLarge, Sandbox, unpack_file
from termrl.sandbox.shell import KILL_HELPER, ProcessChannel
from termrl.sandbox.stop_helper import STOP_HELPER
from termrl.sandbox.warden import Warden

__all__ = ["PodmanSandbox"]


def _trim_tar(archive: bytes) -> bytes:
    """The archive cut right after its end-of-archive blocks.

    ``podman cp -`` stops reading there; the record padding after it (Python
    pads to 10 KiB) is then written into a closed pipe, and podman reports a
    failed copy although every file arrived.
    """
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        for _ in tar:
            pass
        end = tar.offset
    return archive[:end] + bytes(2 * tarfile.BLOCKSIZE)


class PodmanSandbox(Sandbox):
    """A running container whose pid 1 is the shell supervisor."""

    def __init__(
        self,
        binary: str,
        name: str,
        channel: ProcessChannel,
        *,
        image_user: str | None = None,
        layer: DiskLayer | None = None,
        remote: bool = False,
        warden: Warden | None = None,
    ):
        self.binary = binary
        self.warden = warden
        """Told when the container is gone; it removes it if this process dies first."""
        self.remote = remote
        """The containers run on a podman service's host (``remote_engine``): the helpers act from inside."""
        self.image_user = image_user
        """The image's own USER, for fresh processes, when the shell runs as another (``SandboxSpec.user``):
        ``podman exec`` would otherwise default to the shell's user. None: the container's user is the image's."""
        self.name = name
        self.backend = Path(binary).name
        self.channel = channel
        self.layer = layer
        """The root this container runs on, when termrl mounted it (``disk_layer``); None: podman's own."""
        self._init_pid: int | None = None
        self._config_env: dict[str, str] | None = None

    async def signal(self, pid: int, sig: str, mode: str) -> str:
        argv = [
            self.binary,
            "exec",
            self.name,
            "bash",
            "-c",
            KILL_HELPER,
            "kill-helper",
            sig,
            str(pid),
            mode,
        ]
        return (await run_cli(argv, timeout=30))[1].decode(errors="replace")

    async def put_archive(self, archive: bytes) -> None:
        code, out = await run_cli(
            [self.binary, "cp", "-", f"{self.name}:/"], stdin=_trim_tar(archive)
        )
        if code != 0:
            await self._raise_if_dead()
            raise OSError(f"upload into {self.name} failed: {out.decode(errors='replace').strip()}")

    async def get_file(self, path: str, max_bytes: int) -> bytes:
        # podman cp follows symlinks inside the container, archives a FIFO as a FIFO entry
        # (never reads it) and refuses devices ("no such file"). The tar adds headers and padding.
        code, out, over = await read_capped(
            [self.binary, "cp", f"{self.name}:{path}", "-"], max_bytes + 65536
        )
        if over:
            raise FileTooLarge(path, len(out), max_bytes)
        if code != 0:
            await self._raise_if_dead()
            message = out.decode(errors="replace").strip()
            if "no such file or directory" in message.lower() or "could not be found" in message:
                raise FileNotFoundError(path)
            raise OSError(f"download of {path} from {self.name} failed: {message}")
        return unpack_file(out, path, max_bytes)

    async def _inspect(self) -> tuple[int, dict[str, str]]:
        """(host pid of the container's pid 1, its configured environment), asked once."""
        if self._init_pid is None or self._config_env is None:
            fmt = "{{.State.Pid}} {{json .Config.Env}}"
            code, out = await run_cli(
                [self.binary, "inspect", "--type", "container", "--format", fmt, self.name],
                timeout=60,
            )
            pid, _, env = out.decode(errors="replace").partition(" ")
            if code != 0 or not pid.strip().isdigit() or int(pid) == 0:
                await self._raise_if_dead()
                raise SandboxDied(f"container {self.name} has no running process")
            self._init_pid = int(pid)
            self._config_env = dict(
                item.split("=", 1) for item in json.loads(env or "[]") if "=" in item
            )
        return self._init_pid, self._config_env

    @property
    def private_binds(self) -> bool:  # type: ignore[override]
        # Entering a container's namespaces from the host takes the host's root (rootful podman),
        # and the container's processes on this host (not a remote service's).
        return os.geteuid() == 0 and not self.remote

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
        user = user or self.image_user
        if binds:
            # ``podman exec`` cannot give one process a mount namespace of its own: the host
            # enters the container as ``enter.py`` enters a bwrap sandbox (``entry_point``).
            return await exec_entering(
                self,
                command,
                env=env,
                workdir=workdir,
                timeout=timeout,
                output_limit=output_limit,
                binds=binds,
                user=user,
                gone=f"container {self.name} is gone",
            )
        init, config_env = await self._inspect()
        # The first line names the process's pid inside the container: how a timeout finds what to kill.
        mark = f"__TERMRL_FRESH_{secrets.token_hex(8)}"
        started = time.monotonic()
        process = await asyncio.create_subprocess_exec(
            *self._exec_argv(mark, fresh_env(config_env, env), command, workdir, user),
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
        )
        stdout = process.stdout
        if stdout is None:
            raise ValueError("no stdout pipe")
        inner: int | None = None  # the process's pid inside the container, once it printed it

        def kill() -> None:
            # Remote: the process is on the service's host; KILL_HELPER reaches it from inside.
            if self.remote:
                process.kill()
                return
            # No pid line within the timeout: the wrapper carries the mark among its arguments
            # until it becomes the command.
            if inner is not None:
                targets = [pid] if (pid := procs.host_pid_of(init, inner)) is not None else []
            else:
                targets = procs.with_argument(init, mark)
            for target in targets:
                procs.kill_tree(target)
            process.kill()

        try:
            async with ended_on_error(process, kill):
                head = b""
                try:
                    head = await asyncio.wait_for(stdout.readline(), timeout)
                # ValueError: a first line past the stream's limit
                except (TimeoutError, ValueError):
                    pass
                except BaseException:
                    # Cancelled before the pid line came (podman relays it late under load): the
                    # command may run already, under arguments without the mark (``exec``).
                    inner = await asyncio.shield(
                        late_pid(lambda: stdout.read(256), mark, b"", PID_LINE_WAIT_SEC)
                    )
                    raise
                inner, head = split_pid_line(mark, head)
                remaining = max(timeout - (time.monotonic() - started), 0.001)
                output, code, timed_out, truncated = await collect(
                    process, stdout, remaining, output_limit, kill, head=head
                )
        except BaseException:
            if self.remote and inner is not None:  # the caller gave up: the process goes too
                await asyncio.shield(self.signal(inner, "KILL", "all"))
            raise
        if timed_out and self.remote and inner is not None:
            await self.signal(inner, "KILL", "all")
        if code in (125, 126, 127) and not await self.alive():
            raise SandboxDied(f"container {self.name} is gone")
        return output, code, timed_out, truncated

    def _exec_argv(
        self, mark: str, env: dict[str, str], command: str, workdir: str, user: str | None
    ) -> list[str]:
        """``podman exec`` of ``command`` in a fresh process with exactly ``env``, which first
        prints ``mark`` and its pid (``pid_line_argv``)."""
        variables = [f"{k}={v}" for k, v in env.items()]
        return [
            self.binary,
            "exec",
            *(["--user", user] if user else []),
            self.name,
            *pid_line_argv(mark, ["/usr/bin/env", "-i", *variables, *fresh_argv(command, workdir)]),
        ]

    async def entry_point(self) -> EntryPoint:
        """The container's init, as ``podman inspect`` names it: a process entering there gets its
        namespaces, root, user and capabilities, its cgroups, and the seccomp filter of
        ``termrl.sandbox.seccomp`` (Docker's defaults, as bwrap's sandboxes have them)."""
        init, config_env = await self._inspect()
        try:
            cgroups = procs.cgroup_dirs(init)
        except OSError as exc:
            await self._raise_if_dead()
            raise SandboxDied(f"container {self.name} has no running process: {exc}") from exc
        return EntryPoint(init, cgroups, seccomp.program(), config_env)

    async def changed_files(self) -> dict[str, str] | None:
        if self.layer is not None:
            return await asyncio.to_thread(overlay_changes, self.layer.upper, self.layer.lower)
        code, out = await run_cli([self.binary, "diff", "--format", "json", self.name], timeout=120)
        if code != 0:
            await self._raise_if_dead()
            raise OSError(
                f"{self.binary} diff {self.name} failed: {out.decode(errors='replace').strip()[-500:]}"
            )
        diff = json.loads(out or b"{}")
        return {
            **{p: "C" for p in diff.get("changed") or []},
            **{p: "A" for p in diff.get("added") or []},
        }

    async def stop_agent_processes(self, shell_pid: int | None) -> object:
        if self.remote:  # as on Kubernetes: STOP_HELPER in the container, PID:START of each stopped
            settled = [] if shell_pid is None else [str(shell_pid)]
            argv = [self.binary, "exec", self.name, "bash", "-c", STOP_HELPER, "termrl", "stop"]
            _, out = await run_cli([*argv, str(math.ceil(procs.SERVICE_GRACE_SEC)), *settled])
            return out.decode(errors="replace").split()
        init, _ = await self._inspect()  # the supervisor is init here

        def stop() -> list[procs.StoppedProcess]:
            shell = procs.host_pid_of(init, shell_pid) if shell_pid is not None else None
            return procs.stop_agent_processes(init, settled=() if shell is None else (shell,))

        return await asyncio.to_thread(stop)

    async def resume_agent_processes(self, stopped: object) -> None:
        if self.remote:
            if stopped:
                argv = [self.binary, "exec", self.name, "bash", "-c", STOP_HELPER, "termrl", "cont"]
                await run_cli([*argv, *stopped])  # type: ignore[misc]
            return
        await asyncio.to_thread(procs.resume, stopped)  # type: ignore[arg-type]

    async def enter_target(self) -> int | None:
        return (await self._inspect())[0] if self.private_binds else None

    async def _raise_if_dead(self) -> None:
        if not await self.alive():
            raise SandboxDied(f"container {self.name} is gone")

    async def alive(self) -> bool:
        return self.channel.process.returncode is None

    async def destroy(self) -> None:
        await run_cli([self.binary, "rm", "--force", "--time", "0", self.name], timeout=60)
        try:
            await asyncio.wait_for(self.channel.process.wait(), 10)
        except TimeoutError:
            self.channel.process.kill()
            await self.channel.process.wait()
        if self.layer is not None:
            await asyncio.to_thread(unmount_layer, self.layer.directory)
            self.layer = None
        if self.warden is not None:
            self.warden.release(self.name)
