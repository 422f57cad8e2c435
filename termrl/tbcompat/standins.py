"""Which local base image stands in for a name a Dockerfile starts FROM.

There is no registry here, so ``ghcr.io/laude-institute/t-bench/python-3-13:20250620``,
``python:3.12-slim`` or ``ubuntu:24.04`` cannot be pulled. ``resolve_base``
maps such a name onto one of the locally built ``BASE_IMAGES`` and says how
the stand-in differs from the original, so the difference is recorded on the
task instead of being discovered when a test fails:

    t-bench/python-3-13, python:3.13-bookworm, python:3.13-slim-bookworm
                                                        ->  termrl/standin:bookworm-py3.13
    python:3.13, python:3.13-slim(-trixie), python:3.14+, debian:trixie  ->  termrl/standin:trixie
    python:3.11*, python:3.12 and older (unless -trixie)  ->  termrl/standin:bookworm
    t-bench/ubuntu-24-04, ubuntu:24.04                    ->  termrl/standin:noble
    debian:bookworm, ubuntu:22.04 / 20.04                 ->  termrl/base:bookworm

Python comes from Debian: its python3 (3.11 on bookworm, 3.13 on trixie), or
CPython compiled into /usr/local from a Debian source package, as the official
images compile it (3.13 on bookworm from trixie's ``python3.13``; built on first
use, ``base_images.ON_DEMAND_IMAGES``). No other CPython can be had offline
here: no suite of the Debian archive carries a ``python3.12`` source package
(they carry 3.11, 3.13, 3.14, 3.15), and PyPI and npm carry only installers that
download builds from elsewhere. A tag naming a release and a version that
exist together gets them; otherwise a tag asking for 3.11 or 3.13 gets the
release whose python3 it is, even when the tag names the other one (test
scripts run ``uvx -p 3.13``, and pins follow the version); any other tag gets
the release it names, else bookworm up to 3.12 (the official images' release
until August 2025, and 3.12's older neighbour) and trixie after. Whatever
differs from what the tag asks for is said plainly (``StandIn.mismatch``),
recorded on the task and printed at import.

Names are read as Docker reads them: the registries and mirrors in
``DOCKER_HUB_OFFICIAL`` serve Docker Hub's official images under the same
names (``public.ecr.aws/docker/library/python:3.11`` is ``python:3.11``), and a
digest is recorded but not checked (the stand-in is built here, so no digest
can match). A name that already is a local base tag resolves to itself
(nothing to rewrite). Names with no faithful stand-in (Alpine, other
distributions, private images) resolve to None: they must exist locally to
build.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from termrl.sandbox.base_images import BASE_IMAGES, ON_DEMAND_IMAGES, BaseImage, find_base_image

__all__ = [
    "ABSENT_FROM_DEBIAN",
    "BOOKWORM",
    "DOCKER_HUB_HOSTS",
    "DOCKER_HUB_OFFICIAL",
    "NOBLE",
    "PYTHON313_BOOKWORM",
    "PYTHON_BOOKWORM",
    "SUITES",
    "TRIXIE",
    "StandIn",
    "normalize_ref",
    "platform_problem",
    "python_mismatch",
    "release_mismatch",
    "resolve_base",
    "split_digest",
]

TRIXIE = "termrl/standin:trixie"
PYTHON_BOOKWORM = "termrl/standin:bookworm"
PYTHON313_BOOKWORM = "termrl/standin:bookworm-py3.13"
NOBLE = "termrl/standin:noble"
BOOKWORM = "termrl/base:bookworm"

DOCKER_HUB_OFFICIAL = (
    "docker.io/library/",
    "index.docker.io/library/",
    "registry-1.docker.io/library/",
    "public.ecr.aws/docker/library/",
    "mirror.gcr.io/library/",
)
"""Prefixes under which Docker Hub and its mirrors serve Docker Hub's official images, unchanged:
``<prefix>python:3.11-slim`` is the image ``python:3.11-slim``."""
DOCKER_HUB_HOSTS = ("docker.io/", "index.docker.io/", "registry-1.docker.io/", "mirror.gcr.io/")
"""Registries where a one-part name is an official image (``library/`` implied, as Docker does)."""
_LOCAL_PREFIXES = ("localhost/",)
_NATIVE_PLATFORMS = {"x86_64": "linux/amd64", "aarch64": "linux/arm64", "arm64": "linux/arm64"}
_BUILD_PLATFORM_ARGS = (
    "$BUILDPLATFORM",
    "${BUILDPLATFORM}",
    "$TARGETPLATFORM",
    "${TARGETPLATFORM}",
)

SUITES = {"bookworm": ("3.11", "2.36"), "trixie": ("3.13", "2.41")}
"""Debian suite -> (its python3 version, its glibc version): what wheels a stand-in takes."""

_DEBIAN_APT = "Debian package names and versions for apt-get"
_MAN_KEPT = (
    "man pages of preinstalled and apt-installed packages are kept (the official image's dpkg "
    "excludes /usr/share/man/*)"
)
_ENV_SET = "PIP_BREAK_SYSTEM_PACKAGES=1 and UV_BREAK_SYSTEM_PACKAGES=1 set (Debian's python3 is marked externally managed)"


@dataclass(frozen=True)
class StandIn:
    """A local base image standing in for ``ref`` and how it differs from the original."""

    ref: str
    image: str
    python: str
    glibc: str
    differences: tuple[str, ...] = ()
    rewrite: bool = True
    """False when ``ref`` already names the local image (nothing to rewrite)."""
    digest: str | None = None
    """The ``@sha256:...`` the reference pins: recorded, not checked (no registry here)."""
    mismatch: str | None = None
    """The plain statement of a Python version or Debian release the name asks for and the stand-in
    does not give (None: it gives both)."""
    interpreters: tuple[str, ...] = ()
    """Every CPython (major.minor) on the stand-in's PATH, ``python`` first: what ``uvx -p`` finds."""


def split_digest(ref: str) -> tuple[str, str | None]:
    """(``ref`` without its digest, the digest or None)."""
    name, at, digest = ref.partition("@")
    return name, digest if at else None


def normalize_ref(ref: str) -> str:
    """``ref`` as Docker resolves it: no digest, no Docker Hub or mirror prefix, with a tag."""
    ref = split_digest(ref)[0]
    for prefix in (*DOCKER_HUB_OFFICIAL, *_LOCAL_PREFIXES):
        if ref.startswith(prefix):
            ref = ref[len(prefix) :]
            break
    else:
        for (
            host
        ) in DOCKER_HUB_HOSTS:  # docker.io/python = python; docker.io/nvidia/cuda = nvidia/cuda
            if ref.startswith(host):
                ref = ref[len(host) :]
                break
    last = ref.rsplit("/", 1)[-1]
    return ref if ":" in last else f"{ref}:latest"


def platform_problem(ref: str, platform: str, machine: str) -> str | None:
    """Why ``FROM --platform=<platform> <ref>`` cannot be built on ``machine`` (None: it can).

    Build-platform arguments and this machine's own platform are honoured (the stand-ins are
    built for it); another platform would need emulation, which builds here do not have.
    """
    native = _NATIVE_PLATFORMS.get(machine, f"linux/{machine}")
    if platform in _BUILD_PLATFORM_ARGS or platform.lower().startswith(native):
        return None
    return (
        f"FROM --platform={platform} {ref}: this machine builds {native} images only "
        "(no emulation of other platforms here)"
    )


def _recipe(name: str) -> BaseImage:
    recipe = find_base_image(name)
    if recipe is None:
        raise KeyError(name)
    return recipe


def _python_of(recipe: BaseImage) -> tuple[str, str]:
    """(the python3 first on PATH, glibc) of a base image."""
    python, glibc = SUITES[recipe.suite]
    return recipe.python or python, glibc


def _interpreters(recipe: BaseImage) -> tuple[str, ...]:
    """The CPythons a base image has: a compiled one, and Debian's python3 where a package brings
    it (asciinema depends on it)."""
    own = SUITES[recipe.suite][0]
    debian = {"python3", "asciinema"} & set(recipe.packages) or not recipe.python
    return tuple(dict.fromkeys([recipe.python or own, *([own] if debian else [])]))


def _standin(
    ref: str, image: str, differences: list[str], rewrite: bool = True, mismatch: str | None = None
) -> StandIn:
    recipe = _recipe(image)
    python, glibc = _python_of(recipe)
    digest = split_digest(ref)[1]
    if digest:
        differences = [
            *differences,
            f"pinned to {digest}: recorded, not checked (the stand-in is built here)",
        ]
    differences = [mismatch, *differences] if mismatch else differences
    return StandIn(
        ref,
        image,
        python,
        glibc,
        tuple(differences),
        rewrite,
        digest,
        mismatch,
        _interpreters(recipe),
    )


_PYTHON_RELEASES = {"bookworm": PYTHON_BOOKWORM, "trixie": TRIXIE}
"""Debian releases the python stand-ins are built on -> the stand-in."""
_OLDER_RELEASES = ("bullseye", "buster", "stretch")


ABSENT_FROM_DEBIAN = ("3.12",)
"""Versions no suite of Debian's archive carries, packaged or as source (checked: bookworm, trixie,
their backports, forky, sid and experimental carry python3.11 and 3.13 to 3.15)."""


def python_mismatch(wanted: str, have: str, release: str) -> str:
    """The plain statement of a Python version the stand-in cannot give (recorded and printed)."""
    why = (
        f"no Python {wanted} can be had offline here: Debian's archive has no python{wanted} in "
        "any suite, packaged or as source, and PyPI and npm carry only installers that download "
        "CPython from elsewhere"
        if wanted in ABSENT_FROM_DEBIAN
        else f"no stand-in here has Python {wanted} (offline, CPython comes from Debian's archive "
        "only, as a release's python3 or compiled from a source package, and none is compiled "
        f"for {wanted})"
    )
    return (
        f"Python {have} (Debian {release}'s python3) instead of Python {wanted}: {why}; code or "
        f"pins that need exactly {wanted} may fail"
    )


def release_mismatch(named: str, chosen: str, wanted: str) -> str:
    """The plain statement of a Debian release the stand-in cannot give (recorded and printed)."""
    return (
        f"Debian {chosen} instead of Debian {named}: Python {wanted} can be had offline here only "
        f"as Debian {chosen}'s python3 (none for {named}), and the Python version decides more of "
        "a task (its pins, `uvx -p` in its tests) than the release; tools differ (OpenSSL, glibc, "
        "apt package versions)"
    )


def _python_release(tag: str, minor: int | None) -> tuple[str, str | None]:
    """(the Debian release of a python:<tag> stand-in, the plain statement of a release mismatch)."""
    named = next((r for r in (*_PYTHON_RELEASES, *_OLDER_RELEASES) if r in tag), None)
    by_version = {SUITES[r][0]: r for r in _PYTHON_RELEASES}
    wanted = f"3.{minor}" if minor is not None else None
    if wanted in by_version:  # the Python asked for exists here on one release only
        chosen = by_version[wanted]
    elif named in _PYTHON_RELEASES:
        chosen = named
    else:
        # No release named: bookworm up to 3.12, whose official images were bookworm-based until
        # August 2025 and whose pins far more often have 3.11 wheels than 3.13 ones; trixie after.
        chosen = "bookworm" if minor is not None and minor <= 12 else "trixie"
    if named is None or named == chosen:
        return chosen, None
    if named in _OLDER_RELEASES:
        return chosen, f"Debian {chosen} stands in for Debian {named} (no {named} stand-in)"
    return chosen, release_mismatch(named, chosen, wanted or SUITES[chosen][0])


_COMPILED = {("bookworm", "3.13"): PYTHON313_BOOKWORM}
"""(Debian release, Python) -> the stand-in with that CPython compiled into /usr/local (on demand)."""


def _compiled_differences(image: str, *, slim: bool, extra_python: str = "none") -> list[str]:
    recipe = _recipe(image)
    build = recipe.source_python
    if build is None:
        raise ValueError(f"{image} compiles no python")
    own = SUITES[recipe.suite][0]
    differences = [
        f"CPython {build.version} compiled here into /usr/local from Debian {build.source_suite}'s "
        f"python{build.version} source package (the upstream release tarball), with the official "
        "image's configure flags but without its PGO and LTO (somewhat slower) and without tkinter",
        f"Debian {recipe.suite}'s python3 {own} in /usr/bin too, as asciinema's dependency "
        f"(the original has {extra_python})",
        "built the first time a task needs it (compiling CPython takes minutes once, then cached)",
    ]
    if not slim:
        differences.append("no compilers or -dev headers (the full python image has them)")
    return [*differences, "tmux, asciinema and curl preinstalled", _MAN_KEPT]


def _python_image(ref: str, tag: str) -> StandIn | None:
    if "alpine" in tag or "windows" in tag:
        return None  # apk / Windows: no Debian stand-in behaves alike
    match = re.match(r"^(\d+)(?:\.(\d+))?", tag)
    if match and match.group(1) != "3":
        return None
    minor = int(match.group(2)) if match and match.group(2) else None  # python:3 / :latest / :slim
    compiled = next(
        (i for (r, v), i in _COMPILED.items() if f"3.{minor}" == v and r in tag.split("-")), None
    )
    if compiled is not None:
        return _standin(ref, compiled, _compiled_differences(compiled, slim="slim" in tag))
    release, release_note = _python_release(tag, minor)
    image = _PYTHON_RELEASES[release]
    have = SUITES[release][0]
    wanted = f"3.{minor}" if minor is not None else "the newest 3.x"
    differences = [
        f"Debian's python3 {have} in /usr/bin (pip under PIP_BREAK_SYSTEM_PACKAGES=1) "
        f"stands in for the official image's Python {wanted} in /usr/local",
        "python, pip and pip3 are Debian's (/usr/bin), not the official image's (/usr/local/bin)",
    ]
    mismatch = (
        python_mismatch(f"3.{minor}", have, release)
        if minor is not None and f"3.{minor}" != have
        else release_note
    )
    if release_note and mismatch != release_note:
        differences.append(release_note)
    if "slim" not in tag:
        differences.append("no compilers or -dev headers (the full python image has them)")
    differences += ["tmux, asciinema and curl preinstalled", _MAN_KEPT, _ENV_SET]
    differences.append(f"Debian {release} packages: {_DEBIAN_APT}")
    return _standin(ref, image, differences, mismatch=mismatch)


_UBUNTU = (  # tag prefixes -> (stand-in, Ubuntu version, Ubuntu's python3)
    (("24.04", "noble", "latest"), NOBLE, "24.04", "3.12"),
    (("22.04", "jammy"), BOOKWORM, "22.04", "3.10"),
    (("20.04", "focal"), BOOKWORM, "20.04", "3.8"),
)
_DEBIAN = (
    (("bookworm", "12"), BOOKWORM, ["extra tools preinstalled (python3, pip, git, jq, tmux, ...)"]),
    (
        ("trixie", "13", "stable", "latest"),
        TRIXIE,
        ["python3, pip, venv, tmux, asciinema and curl preinstalled"],
    ),
)


def _tag_is(tag: str, prefixes: tuple[str, ...]) -> bool:
    return any(tag == p or tag.startswith((f"{p}-", f"{p}.")) for p in prefixes)


def _distro_image(ref: str, name: str, tag: str) -> StandIn | None:
    if name == "debian":
        found = next(
            ((image, notes) for prefixes, image, notes in _DEBIAN if _tag_is(tag, prefixes)), None
        )
        return _standin(ref, *found) if found else None
    for prefixes, image, version, python in _UBUNTU:
        if _tag_is(tag, prefixes):
            suite = _recipe(image).suite
            have, glibc = SUITES[suite]
            if image == NOBLE:
                return _standin(
                    ref,
                    image,
                    _noble_differences(
                        f"tmux, asciinema and python3 {have} (asciinema's dependency) preinstalled; the official "
                        "ubuntu:24.04 has none of them"
                    ),
                )
            return _standin(
                ref,
                image,
                [
                    f"Debian {suite} stands in for Ubuntu {version}: {_DEBIAN_APT}, glibc {glibc}",
                    f"python3 {have} with pip and venv preinstalled (Ubuntu {version}'s python3 is {python})",
                ],
            )
    return None


def _tbench_image(ref: str, name: str) -> StandIn | None:
    if name.endswith("/python-3-13"):
        # Built FROM python:3.13-slim-bookworm (the release at the time of Terminal-Bench 1.0),
        # adding tmux and asciinema.
        return _standin(
            ref,
            PYTHON313_BOOKWORM,
            _compiled_differences(PYTHON313_BOOKWORM, slim=True, extra_python="it as well"),
        )
    if name.endswith("/ubuntu-24-04"):
        return _standin(
            ref,
            NOBLE,
            _noble_differences(
                "python3 3.13 (asciinema's dependency, as on the original) where Ubuntu 24.04 has 3.12"
            ),
        )
    return None


def _noble_differences(python: str) -> list[str]:
    return [
        f"Debian trixie stands in for Ubuntu 24.04: {_DEBIAN_APT}, glibc 2.41 (Ubuntu: 2.39)",
        python,
        "no `python` command, no pip, PEP 668 enforced: as on Ubuntu",
        "ca-certificates preinstalled",
        _MAN_KEPT.replace("the official image's dpkg", "Ubuntu's minimized image"),
    ]


def resolve_base(ref: str) -> StandIn | None:
    """The local stand-in for the FROM reference ``ref``, or None when there is none.

    Only a base image's own name (``termrl/base:bookworm``) is left as written;
    aliases and every other spelling are rewritten to the name, which podman
    always finds locally whatever its short-name settings.
    """
    name, _, tag = normalize_ref(ref).rpartition(":")
    if name.startswith("ghcr.io/laude-institute/t-bench/"):
        return _tbench_image(ref, name)
    if name == "python":
        return _python_image(ref, tag)
    if name in ("debian", "ubuntu"):
        return _distro_image(ref, name, tag)
    for image in (*BASE_IMAGES, *ON_DEMAND_IMAGES):
        if normalize_ref(ref) in {normalize_ref(t) for t in image.tags} and image.suite in SUITES:
            python, glibc = _python_of(image)
            return StandIn(
                ref,
                image.name,
                python,
                glibc,
                (),
                ref != image.name,
                split_digest(ref)[1],
                interpreters=_interpreters(image),
            )
    return None
