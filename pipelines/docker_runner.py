"""``termrl run --runner docker``: every stage in its stage image, through kfp's DockerRunner over podman.

    podman system service ─ socket ─┬─► kfp.local.DockerRunner (DOCKER_HOST=unix://SOCKET): one
                                    │   container per task, from the task's image, with its compiled
                                    │   command and executor input; kfp mounts the pipeline root at
                                    │   its own path, so artifacts pass as on a cluster's volume
                                    └─► mounted into every stage container at SOCKET_IN_CONTAINER,
                                        CONTAINER_HOST pointing at it: the sandbox stages start their
                                        sandboxes on the host's podman (``termrl.sandbox.podman``'s
                                        remote mode); the stage image carries the podman client

The termrl cache (``TERMRL_CACHE``) is mounted at the same path inside and out:
the model cache is shared with the host, and a file the podman backend hands
the service by path (a ``--volume`` of the host CA bundle, build-time
installers) is where the service, which resolves it on the host, looks.

This is a local stand-in for a Kubernetes backend, not one: the stages see the
host's podman rather than sandbox pods, there are no resource requests or
accelerators (kfp's local runner does retry a failed task, in a new container
with the same executor input, as a cluster does), and a path given as a parameter (a model
folder) is seen inside only under the pipeline root, the termrl cache or a
folder mounted on purpose (``--mount``).
kfp's DockerRunner tries to pull an image that is missing; with no registry
that fails, so ``require_image`` checks the stage image first.

A stage container killed from outside (the OOM killer, ``podman kill``) must
fail its task, so that kfp retries it (the stages resume from their progress
folders, ``components.progress``) and never caches its missing outputs. kfp
2.17's DockerRunner runs containers with auto-remove and, when the container is
gone before its exit status is read, assumes success (or, where podman answers
500 for a removed container, crashes the run). For the block,
``stage_containers`` puts ``_run_stage_container`` in its place: the container
is kept until its status is read, and a container that vanished is a failure.

``RunnerChoice`` is ``--runner`` and the options above as ``termrl run`` and
``termrl rerun`` take them: a run records its choice in ``run.json``'s shape,
and a rerun makes the same one unless told otherwise, in the same cache.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket as sockets
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from termrl.errors import ConfigError, SandboxUnavailable

__all__ = [
    "SOCKET_IN_CONTAINER",
    "RUNNERS",
    "ContainerSettings",
    "RunnerChoice",
    "container_run_args",
    "docker_host",
    "docker_runner",
    "podman_service",
    "require_image",
    "stage_containers",
]

SOCKET_IN_CONTAINER = "/run/podman/podman.sock"
"""Where a stage container sees the host's podman socket."""

RUNNERS = ("subprocess", "docker")
"""``--runner``: every stage a subprocess of this venv, or in its stage image (this module)."""


@dataclass(frozen=True)
class ContainerSettings:
    """How the stage containers are run."""

    socket: Path
    """The host's podman API socket (``podman system service``)."""
    cache: Path
    """The host's termrl cache: mounted at the same path, and the stages' ``TERMRL_CACHE``."""
    network: str = "none"
    """The stage containers' network: none, as in an air-gapped cluster (the sandboxes reach the
    host's podman through the socket, not the network); ``bridge`` for API models."""
    mounts: tuple[Path, ...] = ()
    """Host folders a parameter names (a ``base_model`` folder), mounted read-only at their own path."""


def container_run_args(settings: ContainerSettings) -> dict[str, Any]:
    """The ``docker`` SDK's ``containers.run`` arguments of every stage (kfp adds image, command and
    the pipeline root): the socket and the cache mounted, the podman client pointed at the socket."""
    from docker.types import Mount

    cache = str(settings.cache.resolve())
    return {
        "mounts": [
            Mount(SOCKET_IN_CONTAINER, str(settings.socket), type="bind"),
            Mount(cache, cache, type="bind"),
            *(
                Mount(str(p.resolve()), str(p.resolve()), type="bind", read_only=True)
                for p in settings.mounts
            ),
        ],
        "environment": {
            "CONTAINER_HOST": f"unix://{SOCKET_IN_CONTAINER}",
            "TERMRL_CACHE": cache,
        },
        "network_mode": settings.network,
    }


def docker_runner(settings: ContainerSettings) -> Any:
    """kfp's ``DockerRunner`` with ``container_run_args``; ``ConfigError`` without the ``docker`` package."""
    try:
        from kfp import local
    except ImportError as exc:  # pragma: no cover - kfp is a dependency
        raise ConfigError(f"kfp.local is unavailable: {exc}") from exc
    try:
        return local.DockerRunner(**container_run_args(settings))
    except ImportError as exc:
        raise ConfigError(
            "--runner docker needs the `docker` Python package: pip install 'termrl[docker]'"
        ) from exc


def _listening(path: Path) -> bool:
    """Whether something accepts connections on the unix socket ``path``."""
    if not path.is_socket():
        return False
    with sockets.socket(sockets.AF_UNIX, sockets.SOCK_STREAM) as client:
        client.settimeout(5)
        try:
            client.connect(str(path))
        except OSError:
            return False
    return True


@contextlib.contextmanager
def podman_service(
    socket: Path | None = None, *, binary: str = "podman", timeout: float = 60
) -> Iterator[Path]:
    """A podman API service's socket: ``socket`` when something listens there, else a service started
    for the block (``podman system service --time=0``, on ``socket`` or a fresh temporary path) and
    stopped after it."""
    if socket is not None and _listening(socket):
        yield socket
        return
    if shutil.which(binary) is None:
        raise SandboxUnavailable(f"{binary} is not installed")
    # A short path: a unix socket's path has at most 107 bytes.
    folder = None if socket is not None else Path(tempfile.mkdtemp(prefix="termrl-podman-"))
    path = socket if socket is not None else folder / "podman.sock"  # type: ignore[operator]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.unlink(missing_ok=True)  # a socket nothing listens on any more
    service = subprocess.Popen(
        [binary, "system", "service", "--time=0", f"unix://{path}"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + timeout
        while not _listening(path):
            if service.poll() is not None or time.monotonic() > deadline:
                error = service.stderr.read().decode(errors="replace") if service.stderr else ""
                raise SandboxUnavailable(
                    f"{binary} system service did not listen on {path}", log_tail=error[-2000:]
                )
            time.sleep(0.1)
        yield path
    finally:
        service.terminate()
        try:
            service.wait(timeout=30)
        except subprocess.TimeoutExpired:
            service.kill()
            service.wait()
        if folder is not None:
            shutil.rmtree(folder, ignore_errors=True)


@contextlib.contextmanager
def docker_host(socket: Path) -> Iterator[None]:
    """``DOCKER_HOST`` pointing at ``socket`` for the block: where kfp's ``docker.from_env()`` connects."""
    saved = os.environ.get("DOCKER_HOST")
    os.environ["DOCKER_HOST"] = f"unix://{socket}"
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop("DOCKER_HOST", None)
        else:
            os.environ["DOCKER_HOST"] = saved


def require_image(image: str, *, binary: str = "podman") -> None:
    """``ConfigError`` unless ``image`` is in podman's local storage (nothing is pulled)."""
    try:
        found = subprocess.run(
            [binary, "image", "exists", image], capture_output=True, timeout=120
        ).returncode
    except FileNotFoundError as exc:
        raise SandboxUnavailable(f"{binary} is not installed") from exc
    if found != 0:
        raise ConfigError(
            f"the stage image {image} is not in {binary}'s local storage: build it with "
            "`termrl images build` (it is tagged with the code version of this source), "
            "or name another with --image"
        )


def _run_stage_container(
    client: Any, image: str, command: list[str], volumes: dict[str, Any], **run_args: Any
) -> int:
    """kfp's ``run_docker_container`` (same arguments, same log lines), with the exit status read
    from a container kept until then; one that vanished first returns 137, never success."""
    import docker
    from kfp.local import docker_task_handler

    image = docker_task_handler.add_latest_tag_if_not_present(image=image)
    print(f"Found image {image!r}\n")  # require_image checked it: nothing is pulled
    container = client.containers.run(
        image=image,
        command=command,
        detach=True,
        stdout=True,
        stderr=True,
        volumes=volumes,
        auto_remove=False,
        **run_args,
    )
    try:
        for line in container.logs(stream=True):
            print(line.decode(errors="replace"), end="")
        return int(container.wait()["StatusCode"])
    except docker.errors.APIError as exc:  # NotFound included
        print(f"stage container {container.short_id} vanished before its exit status: {exc}")
        return 137
    finally:
        with contextlib.suppress(docker.errors.APIError):
            container.remove(force=True)


@contextlib.contextmanager
def _exit_status_from_containers() -> Iterator[None]:
    """kfp's DockerRunner with ``_run_stage_container`` for the block (see the module docstring)."""
    from kfp.local import docker_task_handler

    saved = docker_task_handler.run_docker_container
    docker_task_handler.run_docker_container = _run_stage_container
    try:
        yield
    finally:
        docker_task_handler.run_docker_container = saved


@contextlib.contextmanager
def stage_containers(
    image: str,
    socket: Path | None = None,
    network: str = "none",
    *,
    mounts: tuple[Path, ...] = (),
    cache: Path | None = None,
) -> Iterator[Any]:
    """kfp's DockerRunner for the block, over a podman service (``podman_service``) with ``DOCKER_HOST``
    set; ``image`` (the stage image) must be local. ``cache``: the termrl cache (default: this host's)."""
    from termrl.sandbox.base_images import cache_root

    require_image(image)
    with podman_service(socket) as path, docker_host(path), _exit_status_from_containers():
        yield docker_runner(ContainerSettings(path, cache or cache_root(), network, mounts))


@dataclass(frozen=True)
class RunnerChoice:
    """Where the stages of a local run execute: ``--runner`` and the docker runner's options.

    ``None`` is unset: ``termrl run`` sets ``runner``; ``termrl rerun`` leaves it unset to make the
    choice the run recorded (``or_recorded``).
    """

    runner: str | None = None
    """One of ``RUNNERS``."""
    image: str | None = None
    """docker: the stage image of every stage (default: the stage-cpu image of this source)."""
    socket: Path | None = None
    """docker: a podman API socket (default: a service started for the run)."""
    network: str | None = None
    """docker: the stage containers' network (default: ``ContainerSettings.network``)."""
    mounts: tuple[Path, ...] = ()
    """docker: host folders mounted read-only at their own path (``ContainerSettings.mounts``)."""

    def or_recorded(self, shape: dict[str, Any]) -> RunnerChoice:
        """This choice, what it leaves unset taken from a run's recorded ``shape`` (a run recorded
        without a runner ran as subprocesses); the image, network and mounts only from a run made
        by the same runner, the mounts added to this choice's."""
        recorded = shape.get("runner", "subprocess")
        runner = self.runner or recorded
        if runner != "docker" or recorded != "docker":
            return replace(self, runner=runner)
        mounts = (*map(Path, shape.get("mounts", ())), *self.mounts)
        return replace(
            self,
            runner=runner,
            image=self.image or shape.get("cpu_image"),
            network=self.network or shape.get("container_network"),
            mounts=tuple(dict.fromkeys(mounts)),
        )

    def with_image(self, code_version: str) -> RunnerChoice:
        """docker: the image given, or the stage-cpu image ``termrl images build`` tags ``code_version``."""
        if self.runner != "docker" or self.image:
            return self
        from pipelines.images import STAGE_IMAGES

        return replace(self, image=STAGE_IMAGES["stage-cpu"].local_tag(code_version))

    def images(self) -> dict[str, str]:
        """The shape's image fields: the docker runner runs every stage in its one image."""
        return {"cpu_image": self.image, "gpu_image": self.image} if self.image else {}

    def shape_fields(self) -> dict[str, Any]:
        """What a run records of this choice in its shape (what ``or_recorded`` reads back)."""
        if self.runner != "docker":
            return {"runner": self.runner}
        return {
            "runner": self.runner,
            **self.images(),
            "container_network": self.network,
            "mounts": [str(p.resolve()) for p in self.mounts],
        }

    def cache_dir(self, runs_dir: Path) -> Path:
        """kfp's cache of this runner's runs in ``runs_dir``: one per runner, since a cache hit
        would hide which runner ran a stage."""
        return runs_dir / (".cache" if self.runner == "subprocess" else f".cache-{self.runner}")

    def kfp_runner(self, inputs: tuple[Path, ...] = ()) -> contextlib.AbstractContextManager[Any]:
        """kfp's runner for a block: None (its subprocesses) or ``stage_containers``; ``inputs``
        (artifacts from outside the pipeline root: a rerun's imports) are mounted like ``mounts``."""
        if self.runner == "subprocess":
            return contextlib.nullcontext(None)
        if self.runner != "docker":
            raise ConfigError(f"unknown runner {self.runner!r}: one of {', '.join(RUNNERS)}")
        if not self.image:
            raise ConfigError("the docker runner needs a stage image (RunnerChoice.with_image)")
        return stage_containers(
            self.image,
            self.socket,
            self.network or ContainerSettings.network,
            mounts=tuple(dict.fromkeys((*self.mounts, *inputs))),
        )
