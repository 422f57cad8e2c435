"""Local base images: Debian rootfs built with mmdebstrap, imported into podman.

There is no container registry here (nor on air-gapped clusters), so the names
task Dockerfiles start ``FROM`` are built locally and tagged. ``BASE_IMAGES``
is the one list of what gets built and under which names; add a stand-in name
to a recipe's ``aliases`` and ``build_base_images()`` tags it.

Each recipe's content hash is stored as the image label ``termrl.recipe``; a
build is skipped when every tag exists with the current hash (idempotent, and
cheap enough for ``make test``). The rootfs tarball is kept in the cache for
the bwrap backend:

    $TERMRL_CACHE/sandbox/rootfs/<name>-<hash>.tar   (tag name with / and : as -)

The host's CA certificates are never part of an image: mmdebstrap downloads
with the host's apt and the image's ``ca-certificates`` bundle is Debian's own.
Sandboxes and builds get the host bundle injected when they run (``host_ca``).

``ON_DEMAND_IMAGES`` are recipes too costly for every ``make test`` (a CPython
compiled from source, ``termrl.sandbox.source_python``): ``build_base_images()``
leaves them out unless named, and a task build makes them the first time a
Dockerfile starts FROM one of their tags (``find_base_image``). Their tree is
unpacked into the rootfs, so the tarball and the image hold the same files.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from termrl.errors import EnvInitFailed, SandboxUnavailable
from termrl.sandbox.source_python import SourcePython, build_source_python

__all__ = [
    "BASE_IMAGES",
    "BaseImage",
    "NOBLE_PACKAGES",
    "ON_DEMAND_IMAGES",
    "STANDIN_PACKAGES",
    "build_base_images",
    "cache_root",
    "find_base_image",
    "is_current",
    "rootfs_tarball",
]

RECIPE_LABEL = "termrl.recipe"

# Enough for most Terminal-Bench style tasks to run their set-up offline.
DEFAULT_PACKAGES = (
    "python3",
    "python3-pip",
    "python3-venv",
    "git",
    "curl",
    "procps",
    "ca-certificates",
    "sqlite3",
    "jq",
    "tmux",
    "zip",
    "unzip",
    "xz-utils",
    "bzip2",
    "file",
    "less",
    "cron",
    "netcat-openbsd",
    "iproute2",
    "psmisc",
    "tar",
    "gzip",
    # Terminal-Bench 1.0 run-tests.sh scripts that do not install pytest themselves.
    "python3-pytest",
)

_DOC_AND_MAN = ("/usr/share/doc/*", "/usr/share/man/*")

# ENV/WORKDIR/CMD given to `podman import --change`; a Dockerfile base has these.
DEFAULT_CONFIG = (
    "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "ENV LANG=C.UTF-8",
    # Debian's python refuses `pip install` outside a venv (PEP 668); task
    # Dockerfiles written for python:3.x images expect it to work.
    "ENV PIP_BREAK_SYSTEM_PACKAGES=1",
    "WORKDIR /app",
    'CMD ["bash"]',
)


@dataclass(frozen=True)
class BaseImage:
    """One base image recipe and every name it is tagged under."""

    name: str
    suite: str = "bookworm"
    packages: tuple[str, ...] = DEFAULT_PACKAGES
    config: tuple[str, ...] = DEFAULT_CONFIG
    aliases: tuple[str, ...] = ()
    # Files written into the rootfs (path -> text), e.g. /etc/pip.conf.
    files: dict[str, str] = field(default_factory=dict)
    # dpkg path-exclude patterns (kept in the image: later apt installs skip them too).
    dpkg_excludes: tuple[str, ...] = _DOC_AND_MAN
    # CPython compiled into /usr/local (None: the suite's own python3 only, if packages has it).
    source_python: SourcePython | None = None

    @property
    def python(self) -> str | None:
        """The Python a ``python3`` on PATH is (major.minor), when it is not the suite's own."""
        return self.source_python.version if self.source_python else None

    @property
    def recipe_hash(self) -> str:
        recipe = {
            "v": 1,
            "suite": self.suite,
            **(
                {"dpkg_excludes": list(self.dpkg_excludes)}
                if self.dpkg_excludes != _DOC_AND_MAN
                else {}
            ),
            "packages": sorted(self.packages),
            "config": list(self.config),
            "files": self.files,
            **({"source_python": self.source_python.recipe()} if self.source_python else {}),
        }
        return hashlib.sha256(json.dumps(recipe, sort_keys=True).encode()).hexdigest()[:16]

    @property
    def tags(self) -> tuple[str, ...]:
        return (self.name, *self.aliases)


# The stand-ins for Terminal-Bench's base images and the public names they are built from.
# t-bench/python-3-13 and python:3.13+ (a slim Python 3.13 with tmux, asciinema): Debian
# trixie's python3 is 3.13, `python`, `pip` and `pip3` on PATH as in the python images. The
# same recipe on bookworm (python3 3.11) serves python:3.11 and python:<=3.12 tags.
# t-bench/ubuntu-24-04 and ubuntu:24.04: Ubuntu with tmux and asciinema, whose python3
# comes with asciinema; Ubuntu has no `python` command and no pip, and enforces PEP 668.
# Kept as lean as the originals; man pages are kept (man-db tasks install pages and run
# mandb). termrl.tbcompat.standins maps names onto them and records every difference.
STANDIN_PACKAGES = (
    "python3",
    "python3-pip",
    "python3-venv",
    "python-is-python3",
    "tmux",
    "asciinema",
    "curl",
    "ca-certificates",
)
NOBLE_PACKAGES = ("tmux", "asciinema", "ca-certificates")
_STANDIN_NAMES = (
    "python:3.13",
    "python:3.13-slim",
    "python:3.13-slim-trixie",
    "debian:trixie",
    "debian:trixie-slim",
)
_PYTHON_BOOKWORM_NAMES = (
    "python:3.11",
    "python:3.11-slim",
    "python:3.11-bookworm",
    "python:3.11-slim-bookworm",
)
_NOBLE_NAMES = ("ubuntu:24.04", "ubuntu:noble")
_NOBLE_CONFIG = tuple(c for c in DEFAULT_CONFIG if "BREAK_SYSTEM_PACKAGES" not in c)

BASE_IMAGES: list[BaseImage] = [
    BaseImage(
        name="termrl/base:bookworm",
        aliases=(
            "debian:bookworm",
            "debian:bookworm-slim",
            "docker.io/library/debian:bookworm",
            "docker.io/library/debian:bookworm-slim",
        ),
    ),
    BaseImage(
        name="termrl/standin:trixie",
        suite="trixie",
        packages=STANDIN_PACKAGES,
        # python:3.x images carry no EXTERNALLY-MANAGED marker: `uv pip install --system` works there.
        config=(*DEFAULT_CONFIG, "ENV UV_BREAK_SYSTEM_PACKAGES=1"),
        aliases=(*_STANDIN_NAMES, *(f"docker.io/library/{n}" for n in _STANDIN_NAMES)),
        dpkg_excludes=("/usr/share/doc/*",),
    ),
    BaseImage(
        name="termrl/standin:bookworm",
        suite="bookworm",
        packages=STANDIN_PACKAGES,
        config=(*DEFAULT_CONFIG, "ENV UV_BREAK_SYSTEM_PACKAGES=1"),
        aliases=(
            *_PYTHON_BOOKWORM_NAMES,
            *(f"docker.io/library/{n}" for n in _PYTHON_BOOKWORM_NAMES),
        ),
        dpkg_excludes=("/usr/share/doc/*",),
    ),
    BaseImage(
        name="termrl/standin:noble",
        suite="trixie",
        packages=NOBLE_PACKAGES,
        config=_NOBLE_CONFIG,
        aliases=(*_NOBLE_NAMES, *(f"docker.io/library/{n}" for n in _NOBLE_NAMES)),
        dpkg_excludes=("/usr/share/doc/*",),
    ),
]

_PYTHON313_BOOKWORM_NAMES = ("python:3.13-bookworm", "python:3.13-slim-bookworm")
# A python under /usr/local carries no EXTERNALLY-MANAGED marker: pip works as in the original.
_SOURCE_PYTHON_CONFIG = tuple(c for c in DEFAULT_CONFIG if "BREAK_SYSTEM_PACKAGES" not in c)

# python:3.13-slim-bookworm made as the official image is: CPython 3.13 compiled on bookworm into
# /usr/local (from trixie's python3.13 source package), with bookworm's OpenSSL 3.0, glibc and apt.
# tmux and asciinema as on Terminal-Bench 1.0's python-3-13 image, which was built FROM it
# (asciinema brings Debian's python3 3.11 into /usr/bin, there too). The compile costs minutes.
ON_DEMAND_IMAGES: list[BaseImage] = [
    BaseImage(
        name="termrl/standin:bookworm-py3.13",
        suite="bookworm",
        packages=("tmux", "asciinema", "curl", "ca-certificates", "netbase", "tzdata"),
        config=_SOURCE_PYTHON_CONFIG,
        aliases=(
            *_PYTHON313_BOOKWORM_NAMES,
            *(f"docker.io/library/{n}" for n in _PYTHON313_BOOKWORM_NAMES),
        ),
        dpkg_excludes=("/usr/share/doc/*",),
        source_python=SourcePython("3.13", source_suite="trixie"),
    ),
]


def find_base_image(ref: str) -> BaseImage | None:
    """The recipe (``BASE_IMAGES`` or ``ON_DEMAND_IMAGES``) one of whose tags is ``ref``."""
    names = {ref, ref.removeprefix("localhost/"), f"localhost/{ref}"}
    return next((b for b in (*BASE_IMAGES, *ON_DEMAND_IMAGES) if names & set(b.tags)), None)


def cache_root() -> Path:
    """The termrl cache: ``$TERMRL_CACHE`` or ``~/.cache/termrl``."""
    env = os.environ.get("TERMRL_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "termrl"


def rootfs_tarball(image: BaseImage) -> Path:
    """Where the rootfs tarball of ``image`` is kept (it may not exist yet)."""
    slug = image.name.replace("/", "-").replace(":", "-")
    return cache_root() / "sandbox" / "rootfs" / f"{slug}-{image.recipe_hash}.tar"


def _run(argv: list[str], timeout: float, what: str) -> subprocess.CompletedProcess[str]:
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as e:
        raise EnvInitFailed(f"{what}: timed out after {timeout:.0f}s") from e
    if done.returncode != 0:
        tail = (done.stdout + done.stderr)[-4000:]
        raise EnvInitFailed(f"{what}: exit status {done.returncode}", log_tail=tail)
    return done


def _image_label(binary: str, ref: str) -> str | None:
    done = subprocess.run(
        [binary, "image", "inspect", "--format", f'{{{{index .Labels "{RECIPE_LABEL}"}}}}', ref],
        capture_output=True,
        text=True,
    )
    return done.stdout.strip() if done.returncode == 0 else None


def is_current(binary: str, image: BaseImage) -> bool:
    """Whether every tag of ``image`` is an image built from its current recipe (a tag left on
    an older image, or on another recipe's image, is not)."""
    return all(_image_label(binary, tag) == image.recipe_hash for tag in image.tags)


def _build_rootfs(
    image: BaseImage,
    out: Path,
    log: Callable[[str], None],
    *,
    extra_packages: tuple[str, ...] = (),
    extra_hooks: tuple[str, ...] = (),
) -> None:
    if shutil.which("mmdebstrap") is None:
        raise SandboxUnavailable("mmdebstrap is not installed (apt-get install mmdebstrap)")
    out.parent.mkdir(parents=True, exist_ok=True)
    hooks = ['mkdir -p "$1/app"', *extra_hooks]
    for path, text in sorted(image.files.items()):
        hooks.append(
            f'mkdir -p "$1{os.path.dirname(path)}" && printf %s {_sh_quote(text)} > "$1{path}"'
        )
    with tempfile.TemporaryDirectory(dir=out.parent) as tmp:
        partial = Path(tmp) / out.name
        argv = [
            "mmdebstrap",
            "--mode=root",
            "--variant=minbase",
            "--quiet",
            "--include=" + ",".join(dict.fromkeys((*image.packages, *extra_packages))),
            # Documentation is dead weight in thousands of sandboxes (stand-ins keep man pages: tasks read them).
            *(f"--dpkgopt=path-exclude={pattern}" for pattern in image.dpkg_excludes),
            "--dpkgopt=path-include=/usr/share/doc/*/copyright",
            *(f"--customize-hook={h}" for h in hooks),
            image.suite,
            str(partial),
        ]
        log(f"mmdebstrap {image.suite} -> {out}")
        _run(argv, timeout=1800, what=f"mmdebstrap {image.name}")
        os.replace(partial, out)


def _sh_quote(text: str) -> str:
    return "'" + text.replace("'", "'\\''") + "'"


def _import(
    binary: str,
    image: BaseImage,
    tarball: Path,
    log: Callable[[str], None],
    extra_config: tuple[str, ...] = (),
) -> None:
    changes = [*image.config, *extra_config, f"LABEL {RECIPE_LABEL}={image.recipe_hash}"]
    argv = [
        binary,
        "import",
        *(a for c in changes for a in ("--change", c)),
        str(tarball),
        image.name,
    ]
    log(f"{binary} import {tarball.name} -> {image.name}")
    _run(argv, timeout=900, what=f"{binary} import {image.name}")
    for alias in image.aliases:
        _run([binary, "tag", image.name, alias], timeout=60, what=f"{binary} tag {alias}")


def build_base_images(
    images: list[BaseImage] | None = None,
    *,
    binary: str = "podman",
    force: bool = False,
    log: Callable[[str], None] = lambda message: None,
) -> list[str]:
    """Build, import and tag every base image that is missing or out of date.

    ``images`` defaults to ``BASE_IMAGES`` (``ON_DEMAND_IMAGES`` are built only when named).
    Returns the names that were (re)built; an empty list means all were current.
    Raises ``SandboxUnavailable`` when podman or mmdebstrap is missing and
    ``EnvInitFailed`` (with the tool's log tail) when a build step fails.
    """
    if shutil.which(binary) is None:
        raise SandboxUnavailable(f"{binary} is not installed")
    built = []
    for image in BASE_IMAGES if images is None else images:
        tarball = rootfs_tarball(image)
        if not force and is_current(binary, image) and tarball.exists():
            continue
        started = time.monotonic()
        python = _compiled_python(image, binary, log)
        if force or not tarball.exists():
            _build_rootfs(image, tarball, log, **python.rootfs)
        _import(binary, image, tarball, log, python.config)
        log(f"built {image.name} in {time.monotonic() - started:.0f}s")
        built.append(image.name)
    return built


@dataclass(frozen=True)
class _CompiledPython:
    rootfs: dict[str, tuple[str, ...]] = field(default_factory=dict)
    """Keyword arguments of ``_build_rootfs``: its runtime packages and the hooks unpacking it."""
    config: tuple[str, ...] = ()


def _compiled_python(image: BaseImage, binary: str, log: Callable[[str], None]) -> _CompiledPython:
    """The CPython ``image`` compiles into /usr/local (built once in a container of its suite)."""
    if image.source_python is None:
        return _CompiledPython()
    builder = next(
        (b for b in BASE_IMAGES if b.suite == image.suite and b.source_python is None), None
    )
    if builder is None:
        raise EnvInitFailed(f"{image.name}: no base image of Debian {image.suite} to compile in")
    build_base_images([builder], binary=binary, log=log)
    tree, info = build_source_python(
        image.source_python,
        suite=image.suite,
        builder_image=builder.name,
        cache=cache_root() / "sandbox" / "cpython",
        binary=binary,
        log=log,
    )
    hooks = (f'tar -C "$1" -xf {_sh_quote(str(tree))}', 'chroot "$1" ldconfig')
    return _CompiledPython(
        rootfs={"extra_packages": tuple(info["runtime_packages"]), "extra_hooks": hooks},
        config=(f"ENV PYTHON_VERSION={info['version']}",),
    )
