"""Images of task environments, built with the podman (or docker) CLI and cached in its storage.

    builder = ImageBuilder("podman")
    image = await builder.build_image(spec)    # spec.image, or termrl/env:<hash> built once

Every backend runs what this builds: podman and docker from their own storage,
bwrap over ``podman image mount`` of it, Kubernetes after a push to its
registry (``pipelines/images.py``).

A task's environment is built on the engine's private (bridge) network, which
reaches the package registries but not the host's loopback, and cached under
``termrl/env:<hash>`` (the build files, salted with the ids of the local base
images it starts FROM). A build gets the host's CA bundle mounted and
``UV_NATIVE_TLS=1`` as a stage ARG (uv otherwise ignores the system CA store),
and a task's recorded build-time installers (``termrl.sandbox.build_tools``)
served from a folder mounted over ``/usr/local/sbin``; none of these is stored
in the image. A local base image the Dockerfile needs (a ``BASE_IMAGES`` tag,
e.g. a Terminal-Bench stand-in, or an ``ON_DEMAND_IMAGES`` one, whose first build
compiles CPython for minutes) is built first when missing; a prebuilt image
(``spec.image``) is never pulled.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import shutil
import tempfile
import time
from pathlib import Path

from termrl.artifacts.tasks import TaskFile
from termrl.errors import EnvInitFailed, SandboxUnavailable
from termrl.sandbox import hostca, metrics
from termrl.sandbox.base_images import (
    build_base_images,
    cache_root,
    find_base_image,
    is_current,
)
from termrl.sandbox.build_tools import SHIM_DIR, build_tools_dir
from termrl.sandbox.cli_calls import run_cli
from termrl.sandbox.dockerfile import base_refs, declare_build_args
from termrl.sandbox.spec import SandboxSpec, environment_hash

__all__ = ["BUILD_ARGS", "BUILD_NETWORK", "ImageBuilder", "base_image_refs"]

log = logging.getLogger(__name__)

BUILD_NETWORK = {"podman": "private", "docker": "default"}
"""Builds run on the engine's bridge: out to the registries, never the host's 127.0.0.1 (``host`` would)."""
BUILD_ARGS = {"UV_NATIVE_TLS": "1"}
"""In every RUN step of a build that gets the host CAs (as ARGs: not kept in the image)."""


def base_image_refs(spec: SandboxSpec) -> list[str]:
    """The images a spec's Dockerfile builds FROM (stand-ins applied; not its own earlier stages)."""
    dockerfile = next((f for f in spec.build_files() if f.path == "Dockerfile"), None)
    if dockerfile is None:
        return []
    return base_refs(dockerfile.data.decode(errors="replace"))


def _with_build_args(dockerfile: TaskFile) -> TaskFile:
    text = declare_build_args(dockerfile.data.decode(errors="surrogateescape"), BUILD_ARGS)
    return TaskFile(dockerfile.path, text.encode(errors="surrogateescape"), dockerfile.mode)


class ImageBuilder:
    """Builds task environments and checks for prebuilt images with one engine's CLI."""

    def __init__(self, binary: str = "podman", *, max_concurrent_builds: int = 1):
        if shutil.which(binary) is None:
            raise SandboxUnavailable(f"{binary} is not installed or not on PATH")
        self.binary = binary
        self.name = Path(binary).name
        self._engine_ok = False
        self._build_locks: dict[str, asyncio.Lock] = {}
        self._build_slots = asyncio.Semaphore(max_concurrent_builds)
        self._bases_seen: set[str] = set()
        self._base_builds = asyncio.Lock()

    async def ensure_engine(self) -> None:
        """Raise ``SandboxUnavailable`` once if the CLI cannot reach its engine (checked once)."""
        if self._engine_ok:
            return
        code, out = await run_cli([self.binary, "version"], timeout=60)
        if code != 0:
            raise SandboxUnavailable(
                f"{self.binary} cannot reach its engine",
                log_tail=out.decode(errors="replace")[-2000:],
            )
        self._engine_ok = True

    async def image_exists(self, ref: str) -> bool:
        code, _ = await run_cli([self.binary, "image", "exists", ref], timeout=60)
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
        """Build the missing local base images (their tags) the Dockerfile starts FROM."""
        for ref in base_image_refs(spec):
            await self._build_base_if_missing(ref)

    async def _build_base_if_missing(self, ref: str) -> None:
        """Build ``ref`` from its recipe when it is a local base image not built from its current
        recipe yet (a tag an older recipe left on another image is moved, not used)."""
        recipe = find_base_image(ref)
        if recipe is None or ref in self._bases_seen:
            return
        async with self._base_builds:
            if not await asyncio.to_thread(is_current, self.binary, recipe):
                await asyncio.to_thread(
                    build_base_images, [recipe], binary=self.binary, log=log.info
                )
        self._bases_seen.add(ref)

    async def _image_tag(self, spec: SandboxSpec) -> str:
        """``spec.image_key`` salted with the ids of the local images its Dockerfile starts
        FROM: rebuilding a base image (new recipe) must not reuse task images built on
        the old one."""
        ids = []
        for ref in base_image_refs(spec):
            code, out = await run_cli(
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
            code, out = await run_cli([*argv, str(root)], timeout=spec.build_timeout_sec)
        if code != 0:
            why = (
                f"timed out after {spec.build_timeout_sec:g}s"
                if code == 124
                else f"exit status {code}"
            )
            raise EnvInitFailed(
                f"image build failed ({why})", log_tail=out.decode(errors="replace")[-4000:]
            )
