"""Which local base image stands in for a name a Dockerfile starts FROM.

There is no registry here, so ``ghcr.io/laude-institute/t-bench/python-3-13:20250620``,
``python:3.12-slim`` or ``ubuntu:24.04`` cannot be pulled. ``resolve_base``
maps such a name onto one of the locally built ``BASE_IMAGES`` and says how
the stand-in differs from the original, so the difference is recorded on the
task instead of being discovered when a test fails:

    t-bench/python-3-13, python:3.12+, debian:trixie  ->  termrl/standin:trixie
    t-bench/ubuntu-24-04, ubuntu:24.04                ->  termrl/standin:noble
    python:<=3.11, debian:bookworm, ubuntu:22.04 / 20.04  ->  termrl/base:bookworm

A name that already is a local base tag resolves to itself (nothing to
rewrite). Names with no faithful stand-in (Alpine, other distributions,
private images) resolve to None: they must exist locally to build.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from termrl.sandbox.base_images import BASE_IMAGES, BaseImage

__all__ = ["BOOKWORM", "NOBLE", "SUITES", "TRIXIE", "StandIn", "normalize_ref", "resolve_base"]

TRIXIE = "termrl/standin:trixie"
NOBLE = "termrl/standin:noble"
BOOKWORM = "termrl/base:bookworm"

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


def normalize_ref(ref: str) -> str:
    """``ref`` without a digest, a Docker Hub prefix or ``localhost/``, with a tag."""
    ref = ref.split("@", 1)[0]
    for prefix in (
        "docker.io/library/",
        "index.docker.io/library/",
        "registry-1.docker.io/library/",
        "docker.io/",
        "localhost/",
    ):
        if ref.startswith(prefix):
            ref = ref[len(prefix) :]
            break
    last = ref.rsplit("/", 1)[-1]
    return ref if ":" in last else f"{ref}:latest"


def _recipe(name: str) -> BaseImage:
    return next(image for image in BASE_IMAGES if image.name == name)


def _standin(ref: str, image: str, differences: list[str], rewrite: bool = True) -> StandIn:
    python, glibc = SUITES[_recipe(image).suite]
    return StandIn(ref, image, python, glibc, tuple(differences), rewrite)


def _python_image(ref: str, tag: str) -> StandIn | None:
    if "alpine" in tag or "windows" in tag:
        return None  # apk / Windows: no Debian stand-in behaves alike
    match = re.match(r"^(\d+)(?:\.(\d+))?", tag)
    if match and match.group(1) != "3":
        return None
    minor = int(match.group(2)) if match and match.group(2) else None  # python:3 / :latest / :slim
    image = BOOKWORM if minor is not None and minor <= 11 else TRIXIE
    have = SUITES[_recipe(image).suite][0]
    wanted = f"3.{minor}" if minor is not None else "the newest 3.x"
    differences = [
        f"Debian's python3 {have} in /usr/bin (pip under PIP_BREAK_SYSTEM_PACKAGES=1) "
        f"stands in for the official image's Python {wanted} in /usr/local",
        "python, pip and pip3 are Debian's (/usr/bin), not the official image's (/usr/local/bin)",
    ]
    if "slim" not in tag:
        differences.append("no compilers or -dev headers (the full python image has them)")
    if image == BOOKWORM:
        differences.append(
            "extra Debian tools preinstalled (git, jq, sqlite3, python3-pytest, ...)"
        )
    else:
        differences += ["tmux, asciinema and curl preinstalled", _MAN_KEPT, _ENV_SET]
    differences.append(f"Debian {_recipe(image).suite} packages: {_DEBIAN_APT}")
    return _standin(ref, image, differences)


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
        return _standin(
            ref,
            TRIXIE,
            [
                "Debian trixie's python3 3.13 in /usr/bin (pip under PIP_BREAK_SYSTEM_PACKAGES=1) stands in "
                "for python:3.13-slim-bookworm's Python 3.13 in /usr/local",
                "python, pip and pip3 are Debian's (/usr/bin), not the official image's (/usr/local/bin)",
                f"Debian trixie packages instead of bookworm ones: {_DEBIAN_APT}",
                "curl preinstalled",
                _MAN_KEPT,
                _ENV_SET,
            ],
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
    for image in BASE_IMAGES:
        if normalize_ref(ref) in {normalize_ref(t) for t in image.tags} and image.suite in SUITES:
            python, glibc = SUITES[image.suite]
            return StandIn(ref, image.name, python, glibc, (), rewrite=ref != image.name)
    return None
