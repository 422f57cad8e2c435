"""The podman backend (and docker: the same CLI, another binary).

One container per session. Its pid 1 is the shell supervisor, attached with
``run -i --log-driver=passthrough``: the container's stdin/stdout are our
pipes, so creating a session costs one ``podman run`` (no ``exec`` per
command, no log file filling up with output) and removing it ends everything.

The session itself (files, fresh processes, stopping the agent's processes
during scoring) is ``termrl.sandbox.podman_sandbox``; the images sessions run
are built by ``termrl.sandbox.image_build``.

Limits: ``--cpus``, ``--memory`` with equal ``--memory-swap`` (no swap),
``--pids-limit``, ``--timeout`` (the lifetime, enforced by conmon even if this
process dies), ``--network=none`` unless egress, no-new-privileges, podman's
default capability set (smaller than Docker's), and ``storage_mb``: rootful
podman runs the container on a root it mounts itself, the image under a
writable layer on a sparse disk image of that size (``termrl.sandbox.disk_layer``;
docker and rootless podman: no disk limit). An egress session gets a
network stack of its own (slirp4netns, host loopback refused): no session
reaches another or a service on the host's 127.0.0.1.

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
import json
import math
import os
import time
import uuid
from pathlib import Path

from termrl.errors import EnvInitFailed, SandboxDied, SandboxUnavailable
from termrl.sandbox import hostca
from termrl.sandbox.backend import Backend
from termrl.sandbox.base_images import cache_root
from termrl.sandbox.cli_calls import run_cli
from termrl.sandbox.disk_layer import DiskLayer, mount_layer, remove_stale, unmount_layer
from termrl.sandbox.image_build import ImageBuilder
from termrl.sandbox.podman_sandbox import PodmanSandbox
from termrl.sandbox.shell import SUPERVISOR, ProcessChannel, Shell
from termrl.sandbox.spec import SandboxSpec
from termrl.sandbox.warden import LEASE_LABEL, lease_alive, own_lease, warden_for

__all__ = ["EGRESS_NETWORK", "PodmanBackend", "remote_engine"]

EGRESS_NETWORK = {"podman": "slirp4netns:allow_host_loopback=false"}
"""One user-mode network stack per egress session: no traffic between sessions, none to host loopback.
Docker has no such driver: its egress sessions share its default bridge."""

LABEL = "termrl.sandbox"

OWNER_FILE = "owner"
"""In a session root's folder: its owner's lease (``warden.own_lease``)."""

_REAPED: set[str] = set()
"""The CLIs whose dead owners' containers this process has reaped (``reap_dead_owners``)."""


def remote_engine(binary: str, environ: dict[str, str] | None = None) -> bool:
    """Whether ``binary`` is a podman client of a podman service elsewhere (``CONTAINER_HOST`` set)."""
    environ = os.environ if environ is None else environ
    return Path(binary).name == "podman" and bool(environ.get("CONTAINER_HOST"))


class PodmanBackend(Backend):
    """Starts containers with the podman (or docker) CLI; ``ImageBuilder`` builds their images."""

    def __init__(self, binary: str = "podman", *, max_concurrent_builds: int = 1):
        self.builder = ImageBuilder(binary, max_concurrent_builds=max_concurrent_builds)
        """Builds the images sessions run (raises ``SandboxUnavailable`` when ``binary`` is missing)."""
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
        self.warden = warden_for(binary, self.layers_dir if self.own_roots else None)
        """Removes this process's containers (and unmounts their roots) when it dies (``warden``)."""

    async def build_image(self, spec: SandboxSpec) -> str:
        """The image ``spec`` runs: its ``image``, or its environment built once and cached."""
        return await self.builder.build_image(spec)

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
        argv = [self.binary, "run", *self._limit_args(spec, name), *self._network_args(spec)]
        env = dict(spec.env)
        if rootfs is not None:
            image_env, rootfs_args = _rootfs_args(spec, image_config or {})
            env = {**image_env, **env}
            argv += rootfs_args
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

    def _limit_args(self, spec: SandboxSpec, name: str) -> list[str]:
        """The session's name, limits, privileges and labels (termrl's, its lease's, the spec's)."""
        argv = [
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
            "--label",
            f"{LEASE_LABEL}={own_lease()}",
        ]
        for key, value in sorted(spec.labels.items()):
            argv += ["--label", f"{key}={value}"]
        return argv

    def _network_args(self, spec: SandboxSpec) -> list[str]:
        """No network, or this backend's egress network with the host's CA bundle mounted."""
        if spec.network == "none":
            return ["--network=none"]
        argv = []
        if self.name in EGRESS_NETWORK:
            argv.append(f"--network={EGRESS_NETWORK[self.name]}")
        bundle = hostca.host_ca_bundle(cache_root() / "sandbox")
        if bundle is not None:
            argv += ["--volume", f"{bundle}:{hostca.SANDBOX_PATH}:ro"]
            argv += [a for k, v in sorted(hostca.CA_ENV.items()) for a in ("--env", f"{k}={v}")]
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
            code, out = await run_cli(
                [self.binary, "image", "inspect", "--format", "{{json .Config}}", image], timeout=60
            )
            if code != 0:
                raise EnvInitFailed(
                    f"cannot inspect image {image}", log_tail=out.decode(errors="replace")[-2000:]
                )
            config = json.loads(out or b"{}") or {}
            code, out = await run_cli([self.binary, "image", "mount", image], timeout=60)
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
        (layer.directory / OWNER_FILE).write_text(
            own_lease()
        )  # for ``cleanup``, once --rm took the container
        return layer, config

    async def start(
        self, spec: SandboxSpec, image: str, output_limit: int
    ) -> tuple[PodmanSandbox, Shell]:
        await self.reap_dead_owners()
        name = f"termrl-{uuid.uuid4().hex[:12]}"
        token = Shell.new_token()
        self.warden.announce(name)  # before anything exists that a death now would leave behind
        try:
            layer, config = (
                await self._mount_root(spec, image, name) if self.own_roots else (None, None)
            )
        except BaseException:
            self.warden.release(name)
            raise
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
            self.warden.release(name)
            if isinstance(e, OSError):
                raise SandboxUnavailable(f"cannot run {self.binary}: {e}") from e
            raise
        channel = ProcessChannel(process)
        sandbox = PodmanSandbox(
            self.binary,
            name,
            channel,
            image_user=image_user,
            layer=layer,
            remote=self.remote,
            warden=self.warden,
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
        code, out = await run_cli(
            [self.binary, "image", "inspect", "--format", "{{.Config.User}}", image], timeout=60
        )
        return out.decode(errors="replace").strip() if code == 0 else ""

    async def cleanup(self, older_than_sec: float | None = 6 * 3600) -> int:
        """Remove termrl containers left behind, and their roots; how many containers.

        A container whose owner is gone (its ``LEASE_LABEL``, ``warden.lease_alive``) is
        removed at once, running or not; one whose owner lives is kept, whatever its age. A
        container whose lease cannot be judged here (made by an older termrl, or by an owner
        in another pid namespace) is removed once stopped or past ``older_than_sec``; None
        leaves those alone.
        """
        code, out = await run_cli(
            [self.binary, "ps", "-a", "--format", "json", "--filter", f"label={LABEL}=1"]
        )
        if code != 0:
            raise SandboxUnavailable(
                f"{self.binary} ps failed", log_tail=out.decode(errors="replace")
            )
        now = time.time()
        stale: dict[str, list[str]] = {}  # id -> names
        for container in json.loads(out or b"[]"):
            owner_alive = lease_alive((container.get("Labels") or {}).get(LEASE_LABEL, ""))
            unjudged_and_done = (
                owner_alive is None
                and older_than_sec is not None
                and (
                    container.get("State") != "running"
                    or now - float(container.get("Created", now)) > older_than_sec
                )
            )
            if owner_alive is False or unjudged_and_done:
                stale[container["Id"]] = container.get("Names") or []
        if stale:
            await run_cli([self.binary, "rm", "--force", "--time", "0", *stale], timeout=300)
        if self.remote:  # the roots would be the service host's
            return len(stale)
        for name in (name for names in stale.values() for name in names):
            await asyncio.to_thread(unmount_layer, self.layers_dir / name)
        for owner_file in self.layers_dir.glob(f"*/{OWNER_FILE}"):
            with contextlib.suppress(OSError):  # removed meanwhile by its own session
                if lease_alive(owner_file.read_text()) is False:
                    await asyncio.to_thread(unmount_layer, owner_file.parent)
        # Roots of containers that are gone (by --rm after a crash of their owner).
        code, out = await run_cli(
            [self.binary, "ps", "--format", "{{.Names}}", "--filter", f"label={LABEL}=1"]
        )
        if code == 0:
            live = set(out.decode(errors="replace").split())
            await asyncio.to_thread(remove_stale, self.layers_dir, live)
        return len(stale)

    async def reap_dead_owners(self) -> None:
        """Once per process and CLI: remove what dead owners left (``cleanup(None)``).

        Every stage starts its sandboxes through here, so a crashed run's leftovers go when
        the next one starts; a failure to look is no reason to stop this one.
        """
        if self.binary in _REAPED:
            return
        _REAPED.add(self.binary)
        with contextlib.suppress(SandboxUnavailable):
            await self.cleanup(None)


def _rootfs_args(spec: SandboxSpec, config: dict) -> tuple[dict[str, str], list[str]]:
    """(the image's environment, the options) for a container run on the image's mounted rootfs:
    podman cannot read the image's Config then, so its working directory and user are passed here
    (the spec's user wins)."""
    env = dict(item.split("=", 1) for item in config.get("Env") or [] if "=" in item)
    argv = []
    if config.get("WorkingDir"):
        argv += ["--workdir", config["WorkingDir"]]
    if config.get("User") and not spec.user:
        argv += ["--user", config["User"]]
    argv.append("--rootfs")
    return env, argv
