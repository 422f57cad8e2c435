"""The podman backend (and docker: the same CLI, another binary).

One container per session. Its pid 1 is the shell supervisor, attached with
``run -i --log-driver=passthrough``: the container's stdin/stdout are our
pipes, so creating a session costs one ``podman run`` (no ``exec`` per
command, no log file filling up with output) and removing it ends everything.

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

Limits: ``--cpus``, ``--memory`` with equal ``--memory-swap`` (no swap),
``--pids-limit``, ``--timeout`` (the lifetime, enforced by conmon even if this
process dies), ``--network=none`` unless egress, no-new-privileges, podman's
default capability set (smaller than Docker's), and ``storage_mb``: rootful
podman runs the container on a root it mounts itself, the image under a
writable layer on a sparse disk image of that size (``termrl.sandbox.disk_layer``;
docker and rootless podman: no disk limit). An egress session gets a
network stack of its own (slirp4netns, host loopback refused): no session
reaches another or a service on the host's 127.0.0.1. Images of task
environments are built on podman's private (bridge) network, which reaches the
package registries but not the host's loopback, and cached under ``termrl/env:<hash>``;
a build gets the host's CA bundle mounted and ``UV_NATIVE_TLS=1`` as a
stage ARG (uv otherwise ignores the system CA store), and a task's recorded
build-time installers (``termrl.sandbox.build_tools``) served from a folder
mounted over ``/usr/local/sbin``; none of these is stored in the image. A local base image the Dockerfile needs (a ``BASE_IMAGES`` tag, e.g.
a Terminal-Bench stand-in) is built first when missing.

Remote mode (``CONTAINER_HOST`` set: ``podman`` talks to a podman service through
its socket, as the sandbox stages do in a stage container under ``termrl run
--runner docker``): the containers run on the service's host, where this process
sees neither their processes nor their mounts. So a session's output comes over
the attach stream (``--log-driver=none``: podman refuses ``passthrough`` remotely),
there is no root of termrl's own (no disk limit), no private binds (the tests are
uploaded, as on Kubernetes), and stopping the agent's processes and killing a timed-out
fresh process run helpers inside the container (``STOP_HELPER``, ``KILL_HELPER``)
through ``podman exec``. A ``--volume`` path is resolved on the service's host: the
files passed so (the host CA bundle, build-time installers) live under the termrl
cache, which ``--runner docker`` mounts at the same path on both sides.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import io
import json
import math
import os
import secrets
import shutil
import tarfile
import tempfile
import time
import uuid
from pathlib import Path

from termrl.artifacts.tasks import TaskFile
from termrl.errors import EnvInitFailed, SandboxDied, SandboxUnavailable
from termrl.sandbox import hostca, metrics, procs, seccomp
from termrl.sandbox.backend import Backend
from termrl.sandbox.base_images import BASE_IMAGES, build_base_images, cache_root
from termrl.sandbox.build_tools import SHIM_DIR, build_tools_dir
from termrl.sandbox.disk_layer import DiskLayer, mount_layer, remove_stale, unmount_layer
from termrl.sandbox.dockerfile import base_refs, declare_build_args
from termrl.sandbox.fresh import (
    UnknownUser,
    collect,
    enter,
    fresh_argv,
    fresh_env,
    pid_line_argv,
    split_pid_line,
    user_ids,
)
from termrl.sandbox.kubernetes import STOP_HELPER
from termrl.sandbox.reaping import ended_on_error
from termrl.sandbox.rootfs import overlay_changes
from termrl.sandbox.session import FileTooLarge, Sandbox, unpack_file
from termrl.sandbox.shell import KILL_HELPER, SUPERVISOR, ProcessChannel, Shell
from termrl.sandbox.spec import SandboxSpec, environment_hash

__all__ = ["BUILD_NETWORK", "EGRESS_NETWORK", "PodmanBackend", "PodmanSandbox", "remote_engine"]

BUILD_NETWORK = {"podman": "private", "docker": "default"}
"""Builds run on the engine's bridge: out to the registries, never the host's 127.0.0.1 (``host`` would)."""
EGRESS_NETWORK = {"podman": "slirp4netns:allow_host_loopback=false"}
"""One user-mode network stack per egress session: no traffic between sessions, none to host loopback.
Docker has no such driver: its egress sessions share its default bridge."""

LABEL = "termrl.sandbox"
BUILD_ARGS = {"UV_NATIVE_TLS": "1"}
"""In every RUN step of a build that gets the host CAs (as ARGs: not kept in the image)."""


def remote_engine(binary: str, environ: dict[str, str] | None = None) -> bool:
    """Whether ``binary`` is a podman client of a podman service elsewhere (``CONTAINER_HOST`` set)."""
    environ = os.environ if environ is None else environ
    return Path(binary).name == "podman" and bool(environ.get("CONTAINER_HOST"))


def base_image_refs(spec: SandboxSpec) -> list[str]:
    """The images a spec's Dockerfile builds FROM (stand-ins applied; not its own earlier stages)."""
    dockerfile = next((f for f in spec.build_files() if f.path == "Dockerfile"), None)
    if dockerfile is None:
        return []
    return base_refs(dockerfile.data.decode(errors="replace"))


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


def _with_build_args(dockerfile: TaskFile) -> TaskFile:
    text = declare_build_args(dockerfile.data.decode(errors="surrogateescape"), BUILD_ARGS)
    return TaskFile(dockerfile.path, text.encode(errors="surrogateescape"), dockerfile.mode)


async def _run(
    argv: list[str], stdin: bytes | None = None, timeout: float = 120
) -> tuple[int, bytes]:
    """Run a CLI call; (exit status, stdout+stderr). Status 124 on timeout."""
    process = await asyncio.create_subprocess_exec(
        *argv,
        stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    async with ended_on_error(process):
        try:
            out, _ = await asyncio.wait_for(process.communicate(stdin), timeout)
        except TimeoutError:
            process.kill()
            out, _ = await process.communicate()
            return 124, out or b""
    return process.returncode or 0, out


async def _read_capped(
    argv: list[str], limit: int, timeout: float = 120
) -> tuple[int, bytes, bool]:
    """Run a CLI call reading at most ``limit`` bytes of its stdout; (status, stdout+stderr, over the limit)."""
    process = await asyncio.create_subprocess_exec(
        *argv,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    stdout = process.stdout
    if stdout is None:
        raise ValueError("no stdout pipe")
    out = bytearray()

    async def read() -> bool:
        while chunk := await stdout.read(65536):
            out.extend(chunk)
            if len(out) > limit:
                return True
        return False

    async with ended_on_error(process):
        try:
            over = await asyncio.wait_for(read(), timeout)
        except TimeoutError:
            process.kill()
            await process.wait()
            return 124, bytes(out), False
        if over:
            process.kill()
        await process.wait()
    return process.returncode or 0, bytes(out), over


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
    ):
        self.binary = binary
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
        return (await _run(argv, timeout=30))[1].decode(errors="replace")

    async def put_archive(self, archive: bytes) -> None:
        code, out = await _run([self.binary, "cp", "-", f"{self.name}:/"], stdin=_trim_tar(archive))
        if code != 0:
            await self._raise_if_dead()
            raise OSError(f"upload into {self.name} failed: {out.decode(errors='replace').strip()}")

    async def get_file(self, path: str, max_bytes: int) -> bytes:
        # podman cp follows symlinks inside the container, archives a FIFO as a FIFO entry
        # (never reads it) and refuses devices ("no such file"). The tar adds headers and padding.
        code, out, over = await _read_capped(
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
            code, out = await _run(
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
            return await self._exec_entered(
                command,
                env=env,
                workdir=workdir,
                timeout=timeout,
                output_limit=output_limit,
                binds=binds,
                user=user,
            )
        init, config_env = await self._inspect()
        variables = [f"{k}={v}" for k, v in fresh_env(config_env, env).items()]
        # The first line names the process's pid inside the container: how a timeout finds what to kill.
        mark = f"__TERMRL_FRESH_{secrets.token_hex(8)}"
        argv = [
            self.binary,
            "exec",
            *(["--user", user] if user else []),
            self.name,
            *pid_line_argv(mark, ["/usr/bin/env", "-i", *variables, *fresh_argv(command, workdir)]),
        ]
        started = time.monotonic()
        process = await asyncio.create_subprocess_exec(
            *argv,
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
            # Under load `podman exec` may not have printed the pid yet: then the process still
            # carries the mark among its arguments.
            if inner is not None:
                targets = [pid] if (pid := procs.host_pid_of(init, inner)) is not None else []
            else:
                targets = procs.with_argument(init, mark)
            for target in targets:
                procs.kill_tree(target)
            process.kill()

        async with ended_on_error(process, kill):
            head = b""
            with contextlib.suppress(
                TimeoutError, ValueError
            ):  # ValueError: a first line past the stream's limit
                head = await asyncio.wait_for(stdout.readline(), timeout)
            inner, head = split_pid_line(mark, head)
            remaining = max(timeout - (time.monotonic() - started), 0.001)
            output, code, timed_out, truncated = await collect(
                process, stdout, remaining, output_limit, kill, head=head
            )
        if timed_out and self.remote and inner is not None:
            await self.signal(inner, "KILL", "all")
        if code in (125, 126, 127) and not await self.alive():
            raise SandboxDied(f"container {self.name} is gone")
        return output, code, timed_out, truncated

    async def _exec_entered(
        self,
        command: str,
        *,
        env: dict[str, str] | None,
        workdir: str,
        timeout: float,
        output_limit: int,
        binds: dict[str, tuple[str, bool]],
        user: str | None,
    ) -> tuple[str, int | None, bool, bool]:
        """``exec_fresh`` with private binds: the host enters the container as ``enter.py`` enters a bwrap
        sandbox (``podman exec`` cannot give one process a mount namespace of its own). The process gets
        the container init's namespaces, root, user and capabilities, its cgroups, and the seccomp
        filter of ``termrl.sandbox.seccomp`` (Docker's defaults, as bwrap's sandboxes have them)."""
        try:
            ids = None if user is None else await user_ids(self.exec_fresh, user)
        except UnknownUser as exc:
            return str(exc), 126, False, False
        init, config_env = await self._inspect()
        try:
            cgroups = procs.cgroup_dirs(init)
        except OSError as exc:
            await self._raise_if_dead()
            raise SandboxDied(f"container {self.name} has no running process: {exc}") from exc
        result = await enter(
            init,
            cgroups=cgroups,
            seccomp=seccomp.program(),
            env=fresh_env(config_env, env),
            argv=fresh_argv(command, workdir),
            binds=binds,
            timeout=timeout,
            output_limit=output_limit,
            user=ids,
            unfreeze=self.frozen.names if self.frozen else (),
        )
        if result[1] in (125, 126) and not await self.alive():
            raise SandboxDied(f"container {self.name} is gone")
        return result

    async def changed_files(self) -> dict[str, str] | None:
        if self.layer is not None:
            return await asyncio.to_thread(overlay_changes, self.layer.upper, self.layer.lower)
        code, out = await _run([self.binary, "diff", "--format", "json", self.name], timeout=120)
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
            _, out = await _run([*argv, str(math.ceil(procs.SERVICE_GRACE_SEC)), *settled])
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
                await _run([*argv, *stopped])  # type: ignore[misc]
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
        await _run([self.binary, "rm", "--force", "--time", "0", self.name], timeout=60)
        try:
            await asyncio.wait_for(self.channel.process.wait(), 10)
        except TimeoutError:
            self.channel.process.kill()
            await self.channel.process.wait()
        if self.layer is not None:
            await asyncio.to_thread(unmount_layer, self.layer.directory)
            self.layer = None


class PodmanBackend(Backend):
    """Builds and starts containers with the podman (or docker) CLI."""

    def __init__(self, binary: str = "podman", *, max_concurrent_builds: int = 1):
        if shutil.which(binary) is None:
            raise SandboxUnavailable(f"{binary} is not installed or not on PATH")
        self.binary = binary
        self.name = Path(binary).name
        # conmon marks an OOM kill by creating a file "oom" in its working
        # directory: sessions run from here, never from the caller's directory.
        self.conmon_dir = cache_root() / "sandbox" / "podman"
        self.conmon_dir.mkdir(parents=True, exist_ok=True)
        self.layers_dir = self.conmon_dir / "roots"
        """Session roots (``disk_layer``), one folder per container name."""
        self.remote = remote_engine(binary)
        """The CLI drives a podman service elsewhere (``CONTAINER_HOST``): see the module docstring."""
        self.own_roots = self.name == "podman" and os.geteuid() == 0 and not self.remote
        """Whether sessions run on a root termrl mounts (the disk limit); needs root, ``podman image mount``
        and the containers on this host."""
        self._images: dict[str, tuple[Path, dict]] = {}
        self._image_locks: dict[str, asyncio.Lock] = {}
        self._engine_ok = False
        self._build_locks: dict[str, asyncio.Lock] = {}
        self._build_slots = asyncio.Semaphore(max_concurrent_builds)
        self._bases_seen: set[str] = set()
        self._base_builds = asyncio.Lock()

    async def ensure_engine(self) -> None:
        """Raise ``SandboxUnavailable`` once if the CLI cannot reach its engine (checked once)."""
        if self._engine_ok:
            return
        code, out = await _run([self.binary, "version"], timeout=60)
        if code != 0:
            raise SandboxUnavailable(
                f"{self.binary} cannot reach its engine",
                log_tail=out.decode(errors="replace")[-2000:],
            )
        self._engine_ok = True

    async def image_exists(self, ref: str) -> bool:
        code, _ = await _run([self.binary, "image", "exists", ref], timeout=60)
        return code == 0

    async def build_image(self, spec: SandboxSpec) -> str:
        """The image ``spec`` runs: its ``image``, or its environment built once and cached."""
        await self.ensure_engine()
        if spec.image is not None:
            await self._ensure_local_image(spec.image)
            return spec.image
        await self._ensure_base_images(spec)
        tag = await self._image_tag(spec)
        lock = self._build_locks.setdefault(tag, asyncio.Lock())
        async with lock:
            if await self.image_exists(tag):
                metrics.BUILDS.labels(self.name, "cached").inc()
                return tag
            async with self._build_slots:
                started = time.monotonic()
                try:
                    await self._build(spec, tag)
                except EnvInitFailed:
                    metrics.BUILDS.labels(self.name, "failed").inc()
                    raise
                metrics.BUILDS.labels(self.name, "built").inc()
                metrics.BUILD_SECONDS.labels(self.name).observe(time.monotonic() - started)
        return tag

    async def _ensure_local_image(self, ref: str) -> None:
        """A prebuilt image (a task's ``docker_image``, after its stand-in) must be here: a local base image
        is built from its recipe; anything else that is missing stops the task (nothing is pulled)."""
        await self._build_base_if_missing(ref)
        if not await self.image_exists(ref):
            why = (
                f"image {ref} is not in {self.binary}'s local storage and is not pulled (no registry is used): "
                f"load or build it first ({self.binary} load / {self.binary} build -t {ref})"
            )
            raise EnvInitFailed(why, log_tail=why)

    async def _ensure_base_images(self, spec: SandboxSpec) -> None:
        """Build the missing local base images (``BASE_IMAGES`` tags) the Dockerfile starts FROM."""
        for ref in base_image_refs(spec):
            await self._build_base_if_missing(ref)

    async def _build_base_if_missing(self, ref: str) -> None:
        """Build ``ref`` from its recipe when it is a local base image (``BASE_IMAGES``) not built yet."""
        recipe = next(
            (b for b in BASE_IMAGES if ref in b.tags or f"localhost/{ref}" in b.tags), None
        )
        if recipe is None or ref in self._bases_seen:
            return
        async with self._base_builds:
            if not await self.image_exists(ref):
                await asyncio.to_thread(build_base_images, [recipe], binary=self.binary)
        self._bases_seen.add(ref)

    async def _image_tag(self, spec: SandboxSpec) -> str:
        """``spec.image_key`` salted with the ids of the local images its Dockerfile starts
        FROM: rebuilding a base image (new recipe) must not reuse task images built on
        the old one."""
        ids = []
        for ref in base_image_refs(spec):
            code, out = await _run(
                [self.binary, "image", "inspect", "--format", "{{.Id}}", ref], timeout=60
            )
            ids.append(out.decode().strip() if code == 0 else f"missing:{ref}")
        if not ids:
            return spec.image_key
        salt = hashlib.sha256("\n".join([spec.image_key, *ids]).encode()).hexdigest()[:24]
        return f"termrl/env:{salt}"

    async def _build(self, spec: SandboxSpec, tag: str) -> None:
        with tempfile.TemporaryDirectory(prefix="termrl-build-") as context:
            root = Path(context).resolve()
            bundle = hostca.host_ca_bundle(cache_root() / "sandbox")
            files = spec.build_files()
            if bundle is not None:
                files = [_with_build_args(f) if f.path == "Dockerfile" else f for f in files]
            for f in files:
                target = (root / f.path).resolve()
                if not target.is_relative_to(root):
                    raise EnvInitFailed(f"environment file escapes the build context: {f.path!r}")
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(f.data)
                target.chmod(f.mode & 0o7777)
            argv = [
                self.binary,
                "build",
                f"--network={BUILD_NETWORK.get(self.name, 'default')}",
                "--pull=missing",
                "--label",
                f"termrl.environment={environment_hash(spec.environment_files)}",
                "--tag",
                tag,
            ]
            if bundle is not None:
                argv += ["--volume", f"{bundle}:{hostca.SYSTEM_BUNDLE}:ro"]
            if spec.build_installers:
                try:
                    tools = await asyncio.to_thread(build_tools_dir, spec.build_installers)
                except EnvInitFailed as exc:
                    raise EnvInitFailed(
                        f"build-time installers: {exc}", log_tail=exc.log_tail
                    ) from exc
                argv += ["--volume", f"{tools}:{SHIM_DIR}:ro"]
            code, out = await _run([*argv, str(root)], timeout=spec.build_timeout_sec)
        if code != 0:
            why = (
                f"timed out after {spec.build_timeout_sec:g}s"
                if code == 124
                else f"exit status {code}"
            )
            raise EnvInitFailed(
                f"image build failed ({why})", log_tail=out.decode(errors="replace")[-4000:]
            )

    def run_argv(
        self,
        spec: SandboxSpec,
        image: str,
        name: str,
        token: str,
        *,
        rootfs: Path | None = None,
        image_config: dict | None = None,
    ) -> list[str]:
        """The ``podman run`` command line of one session (public for tests and bench).

        With ``rootfs`` the container runs on that folder (``--rootfs``) instead of ``image``, and
        gets the image's environment, working directory and user from ``image_config`` (its
        ``podman image inspect`` Config), which podman then cannot read itself.
        """
        argv = [
            self.binary,
            "run",
            "--interactive",
            "--rm",
            "--name",
            name,
            # remote: the attach stream carries the shell; no log keeps a copy of its output
            "--log-driver=none" if self.remote else "--log-driver=passthrough",
            "--hostname",
            "sandbox",
            "--cpus",
            f"{spec.cpus:g}",
            "--memory",
            f"{spec.memory_mb}m",
            "--memory-swap",
            f"{spec.memory_mb}m",
            "--pids-limit",
            str(spec.pids),
            "--timeout",
            str(max(1, math.ceil(spec.lifetime_sec))),
            "--security-opt",
            "no-new-privileges",
            "--label",
            f"{LABEL}=1",
        ]
        for key, value in sorted(spec.labels.items()):
            argv += ["--label", f"{key}={value}"]
        if spec.network == "none":
            argv.append("--network=none")
        else:
            if self.name in EGRESS_NETWORK:
                argv.append(f"--network={EGRESS_NETWORK[self.name]}")
            bundle = hostca.host_ca_bundle(cache_root() / "sandbox")
            if bundle is not None:
                argv += ["--volume", f"{bundle}:{hostca.SANDBOX_PATH}:ro"]
                argv += [a for k, v in sorted(hostca.CA_ENV.items()) for a in ("--env", f"{k}={v}")]
        env = dict(spec.env)
        if rootfs is not None:
            config = image_config or {}
            env = {
                **dict(item.split("=", 1) for item in config.get("Env") or [] if "=" in item),
                **env,
            }
            if config.get("WorkingDir"):
                argv += ["--workdir", config["WorkingDir"]]
            if config.get("User") and not spec.user:
                argv += ["--user", config["User"]]
            argv.append("--rootfs")
        for key, value in sorted(env.items()):
            argv += ["--env", f"{key}={value}"]
        if spec.user:  # the supervisor, so the agent's every shell, runs as this user; no-new-privileges keeps it so
            argv += ["--user", spec.user]
        argv += [
            "--entrypoint",
            "bash",
            str(rootfs) if rootfs is not None else image,
            "-c",
            SUPERVISOR,
            "termrl-supervisor",
            token,
        ]
        return argv

    async def _mounted_image(self, image: str) -> tuple[Path, dict]:
        """(the image's rootfs, mounted by ``podman image mount``; its Config), once per image and backend.

        The mount stays for the process's life, as bwrap's lower layers do: podman counts
        mounts per image, so sessions in other processes are unaffected, and ``podman rmi``
        does not wait for it. Two podman calls per session start would cost more than the
        rest of the start under load.
        """
        async with self._image_locks.setdefault(image, asyncio.Lock()):
            known = self._images.get(image)
            if known is not None and os.path.ismount(known[0]):
                return known
            code, out = await _run(
                [self.binary, "image", "inspect", "--format", "{{json .Config}}", image], timeout=60
            )
            if code != 0:
                raise EnvInitFailed(
                    f"cannot inspect image {image}", log_tail=out.decode(errors="replace")[-2000:]
                )
            config = json.loads(out or b"{}") or {}
            code, out = await _run([self.binary, "image", "mount", image], timeout=60)
            if code != 0:
                raise EnvInitFailed(
                    f"cannot mount image {image}", log_tail=out.decode(errors="replace")[-2000:]
                )
            self._images[image] = (Path(out.decode().strip()), config)
            return self._images[image]

    async def _mount_root(self, spec: SandboxSpec, image: str, name: str) -> tuple[DiskLayer, dict]:
        """A session root for ``image`` with a writable layer of ``spec.storage_mb`` (``disk_layer``), and
        the image's Config; ``PodmanSandbox.destroy`` unmounts it."""
        lower, config = await self._mounted_image(image)
        layer = await asyncio.to_thread(mount_layer, self.layers_dir / name, lower, spec.storage_mb)
        return layer, config

    async def start(
        self, spec: SandboxSpec, image: str, output_limit: int
    ) -> tuple[PodmanSandbox, Shell]:
        name = f"termrl-{uuid.uuid4().hex[:12]}"
        token = Shell.new_token()
        layer, config = (
            await self._mount_root(spec, image, name) if self.own_roots else (None, None)
        )
        argv = self.run_argv(
            spec, image, name, token, rootfs=layer and layer.root, image_config=config
        )
        try:
            image_user = None
            if spec.user:  # fresh processes run as the image's USER (root when it names none)
                image_user = (
                    (config or {}).get("User")
                    if layer is not None
                    else await self._image_user(image)
                ) or "0"
            process = await asyncio.create_subprocess_exec(
                *argv,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.STDOUT,
                cwd=self.conmon_dir,
            )
        except BaseException as e:  # cancelled too: leave no root mounted
            if layer is not None:
                await asyncio.to_thread(unmount_layer, layer.directory)
            if isinstance(e, OSError):
                raise SandboxUnavailable(f"cannot run {self.binary}: {e}") from e
            raise
        channel = ProcessChannel(process)
        sandbox = PodmanSandbox(
            self.binary, name, channel, image_user=image_user, layer=layer, remote=self.remote
        )
        shell = Shell(channel, token, sandbox.signal, output_limit=output_limit)
        setup = hostca.install_command() if spec.network == "egress" else ""
        try:
            await shell.start(spec.workdir, setup=setup)
        except SandboxDied as e:
            await sandbox.destroy()
            raise EnvInitFailed(f"container for {image} did not start", log_tail=e.log_tail) from e
        except BaseException:  # cancelled: leave no container behind
            await sandbox.destroy()
            raise
        return sandbox, shell

    async def _image_user(self, image: str) -> str:
        """The image's USER ('' when it names none)."""
        code, out = await _run(
            [self.binary, "image", "inspect", "--format", "{{.Config.User}}", image], timeout=60
        )
        return out.decode(errors="replace").strip() if code == 0 else ""

    async def cleanup(self, older_than_sec: float = 6 * 3600) -> int:
        """Remove termrl containers left behind: stopped ones, or running past ``older_than_sec``.

        Running sessions of other processes are younger than that (their
        ``--timeout`` lifetime ends them first), so they are left alone.
        """
        code, out = await _run(
            [self.binary, "ps", "-a", "--format", "json", "--filter", f"label={LABEL}=1"]
        )
        if code != 0:
            raise SandboxUnavailable(
                f"{self.binary} ps failed", log_tail=out.decode(errors="replace")
            )
        now = time.time()
        stale = [
            c["Id"]
            for c in json.loads(out or b"[]")
            if c.get("State") != "running" or now - float(c.get("Created", now)) > older_than_sec
        ]
        if stale:
            await _run([self.binary, "rm", "--force", "--time", "0", *stale], timeout=300)
        # Roots of containers that are gone (removed above, or by --rm after a crash of their owner).
        code, out = await _run(
            [self.binary, "ps", "--format", "{{.Names}}", "--filter", f"label={LABEL}=1"]
        )
        if code == 0 and not self.remote:  # remote: the roots would be the service host's
            live = set(out.decode(errors="replace").split())
            await asyncio.to_thread(remove_stale, self.layers_dir, live)
        return len(stale)
