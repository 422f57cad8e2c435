"""standins: which local base image stands in for a FROM name, and what differs."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from termrl.sandbox.base_images import BASE_IMAGES
from termrl.tbcompat.standins import BOOKWORM, NOBLE, SUITES, TRIXIE, normalize_ref, resolve_base

TBENCH = "ghcr.io/laude-institute/t-bench"


@pytest.mark.parametrize(
    ("ref", "image", "python", "mentions"),
    [
        (f"{TBENCH}/python-3-13:20250620", TRIXIE, "3.13", "python:3.13-slim-bookworm"),
        (f"{TBENCH}/python-3-13@sha256:{'0' * 64}", TRIXIE, "3.13", "/usr/local"),
        (f"{TBENCH}/ubuntu-24-04:20250624", NOBLE, "3.13", "no `python` command"),
        ("python:3.13-slim-bookworm", TRIXIE, "3.13", "Python 3.13"),
        ("docker.io/library/python:3.12-slim", TRIXIE, "3.13", "Python 3.12"),
        ("python:latest", TRIXIE, "3.13", "newest 3.x"),
        (
            "python:3.11",
            BOOKWORM,
            "3.11",
            "compilers",
        ),  # the full image has gcc; the stand-in has not
        ("python:3.10-slim-bullseye", BOOKWORM, "3.11", "Python 3.10"),
        ("debian:bookworm-slim", BOOKWORM, "3.11", "extra tools"),
        ("debian:12", BOOKWORM, "3.11", "extra tools"),
        ("debian:trixie", TRIXIE, "3.13", "preinstalled"),
        ("ubuntu:24.04", NOBLE, "3.13", "the official ubuntu:24.04 has none of them"),
        ("python:3.13-slim", TRIXIE, "3.13", "man pages"),
        ("ubuntu:jammy", BOOKWORM, "3.11", "Ubuntu 22.04"),
    ],
)
def test_known_names_resolve_to_a_local_base_with_their_differences(ref, image, python, mentions):
    standin = resolve_base(ref)
    assert standin is not None
    assert (standin.ref, standin.image, standin.python, standin.rewrite) == (
        ref,
        image,
        python,
        True,
    )
    assert any(mentions in d for d in standin.differences), standin.differences


@pytest.mark.parametrize(
    "ref",
    [
        f"{TBENCH}/deveval:latest",
        "python:3.12-alpine",
        "python:2.7",
        "alpine:3.20",
        "debian:bullseye",
        "ubuntu:18.04",
        "nvidia/cuda:12.4.0-runtime-ubuntu22.04",
        "registry.example.invalid/team/app:1",
    ],
)
def test_names_without_a_faithful_stand_in_are_left_alone(ref):
    assert resolve_base(ref) is None


def test_a_local_base_name_builds_as_written():
    exact = resolve_base("termrl/base:bookworm")
    assert exact is not None and not exact.rewrite and exact.differences == ()
    spelled = resolve_base("localhost/termrl/base:bookworm")
    assert spelled is not None and spelled.rewrite and spelled.image == BOOKWORM


def test_every_stand_in_is_a_recipe_that_build_base_builds():
    names = {image.name: image for image in BASE_IMAGES}
    assert {TRIXIE, BOOKWORM} <= set(names)
    assert {names[TRIXIE].suite, names[BOOKWORM].suite} <= set(SUITES)
    trixie = names[TRIXIE]
    for package in ("tmux", "asciinema", "curl", "python3-pip", "python3-venv"):
        assert package in trixie.packages
    assert {"WORKDIR /app", 'CMD ["bash"]', "ENV PIP_BREAK_SYSTEM_PACKAGES=1"} <= set(trixie.config)
    noble = names[
        NOBLE
    ]  # Ubuntu: python3 only through asciinema, no `python`, no pip, PEP 668 enforced
    assert set(noble.packages) == {"tmux", "asciinema", "ca-certificates"} and noble.suite in SUITES
    assert not any("BREAK_SYSTEM_PACKAGES" in c for c in noble.config)
    for image in (trixie, noble):  # man-db tasks install pages and run mandb
        assert not any("/usr/share/man" in p for p in image.dpkg_excludes)


def test_normalize_ref():
    assert normalize_ref("docker.io/library/python:3.13@sha256:abc") == "python:3.13"
    assert normalize_ref("ubuntu") == "ubuntu:latest"
    assert normalize_ref("localhost:5000/team/app") == "localhost:5000/team/app:latest"


@pytest.mark.podman
@pytest.mark.parametrize("name", [TRIXIE, NOBLE, BOOKWORM])
def test_the_python_and_glibc_recorded_for_a_stand_in_are_what_it_has(name):
    """The kit fetches wheels for these versions: they must match the built image."""
    if shutil.which("podman") is None:
        pytest.skip("podman is not installed")
    from termrl.sandbox import build_base_images

    build_base_images([b for b in BASE_IMAGES if b.name == name])
    script = (
        "python3 -c 'import sys; print(\"%d.%d\" % sys.version_info[:2])'; ldd --version | head -n1"
    )
    done = subprocess.run(
        ["podman", "run", "--rm", "--network=none", name, "bash", "-c", script],
        capture_output=True,
        text=True,
        timeout=120,
    )
    python, glibc_line = done.stdout.splitlines()
    suite = next(b.suite for b in BASE_IMAGES if b.name == name)
    assert (python, glibc_line.split()[-1]) == SUITES[suite]


@pytest.mark.podman
@pytest.mark.parametrize(
    ("name", "present", "absent"),
    [
        (
            TRIXIE,
            ["python", "python3", "pip", "pip3", "tmux", "asciinema"],
            [],
        ),  # as in python:3.13 images
        (NOBLE, ["python3", "tmux", "asciinema"], ["python", "pip", "pip3"]),  # as in Ubuntu 24.04
    ],
)
def test_stand_ins_have_the_commands_of_the_originals_and_man_directories(name, present, absent):
    if shutil.which("podman") is None:
        pytest.skip("podman is not installed")
    from termrl.sandbox import build_base_images

    build_base_images([b for b in BASE_IMAGES if b.name == name])
    script = 'for c in "$@"; do command -v "$c" >/dev/null && echo "$c"; done; test -d /usr/share/man/man1 && echo man1'
    done = subprocess.run(
        [
            "podman",
            "run",
            "--rm",
            "--network=none",
            name,
            "bash",
            "-c",
            script,
            "-",
            *present,
            *absent,
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.stdout.split() == [*present, "man1"], done.stderr
