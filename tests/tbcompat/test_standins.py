"""standins: which local base image stands in for a FROM name, and what differs."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from termrl.sandbox.base_images import BASE_IMAGES, ON_DEMAND_IMAGES, find_base_image
from termrl.tbcompat.standins import (
    BOOKWORM,
    DOCKER_HUB_HOSTS,
    DOCKER_HUB_OFFICIAL,
    NOBLE,
    PYTHON313_BOOKWORM,
    PYTHON_BOOKWORM,
    SUITES,
    TRIXIE,
    normalize_ref,
    platform_problem,
    resolve_base,
)

TBENCH = "ghcr.io/laude-institute/t-bench"


@pytest.mark.parametrize(
    ("ref", "image", "python", "mentions"),
    [
        # Built FROM python:3.13-slim-bookworm: CPython 3.13 compiled on bookworm, as the original.
        (f"{TBENCH}/python-3-13:20250620", PYTHON313_BOOKWORM, "3.13", "PGO and LTO"),
        (f"{TBENCH}/python-3-13@sha256:{'0' * 64}", PYTHON313_BOOKWORM, "3.13", "/usr/local"),
        (f"{TBENCH}/ubuntu-24-04:20250624", NOBLE, "3.13", "no `python` command"),
        ("python:3.13-slim-bookworm", PYTHON313_BOOKWORM, "3.13", "the original has none"),
        ("python:3.13-bookworm", PYTHON313_BOOKWORM, "3.13", "compilers"),
        ("python:3.11-slim-bookworm", PYTHON_BOOKWORM, "3.11", "Python 3.11 in /usr/local"),
        ("python:3.11-trixie", PYTHON_BOOKWORM, "3.11", "Debian bookworm instead of Debian trixie"),
        ("python:3.13-slim-trixie", TRIXIE, "3.13", "Python 3.13"),
        ("python:3.12-slim-trixie", TRIXIE, "3.13", "instead of Python 3.12"),
        ("docker.io/library/python:3.12-slim", PYTHON_BOOKWORM, "3.11", "instead of Python 3.12"),
        ("python:3.14", TRIXIE, "3.13", "instead of Python 3.14"),
        ("python:latest", TRIXIE, "3.13", "newest 3.x"),
        (
            "python:3.11",
            PYTHON_BOOKWORM,
            "3.11",
            "compilers",
        ),  # the full image has gcc; the stand-in has not
        ("python:3.10-slim-bullseye", PYTHON_BOOKWORM, "3.11", "Python 3.10"),
        ("python:3.11-slim-bullseye", PYTHON_BOOKWORM, "3.11", "Debian bullseye"),
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
    assert {TRIXIE, PYTHON_BOOKWORM, BOOKWORM} <= set(names)
    assert names[PYTHON_BOOKWORM].packages == names[TRIXIE].packages
    assert names[PYTHON_BOOKWORM].suite == "bookworm"
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


def test_the_compiled_python_stand_in_is_built_on_demand_only():
    """`make base-images` builds BASE_IMAGES; the CPython compile waits for a task that needs it."""
    assert PYTHON313_BOOKWORM not in {image.name for image in BASE_IMAGES}
    [compiled] = [image for image in ON_DEMAND_IMAGES if image.name == PYTHON313_BOOKWORM]
    assert find_base_image("python:3.13-slim-bookworm") is compiled
    assert find_base_image("localhost/termrl/standin:bookworm-py3.13") is compiled
    assert (compiled.suite, compiled.python, compiled.source_python.source_suite) == (
        "bookworm",
        "3.13",
        "trixie",
    )
    assert not any(
        "BREAK_SYSTEM_PACKAGES" in c for c in compiled.config
    )  # /usr/local is not managed
    bookworm_tags = {t for image in BASE_IMAGES for t in image.tags}
    assert not set(compiled.tags) & bookworm_tags  # one image per tag


@pytest.mark.parametrize("prefix", DOCKER_HUB_OFFICIAL)
def test_each_mirror_of_the_official_images_resolves_as_the_plain_name(prefix):
    plain = resolve_base("python:3.11-slim")
    mirrored = resolve_base(f"{prefix}python:3.11-slim")
    assert plain is not None and mirrored is not None
    assert (mirrored.image, mirrored.differences) == (plain.image, plain.differences)
    assert mirrored.ref == f"{prefix}python:3.11-slim" and mirrored.rewrite


@pytest.mark.parametrize("host", DOCKER_HUB_HOSTS)
def test_a_one_part_name_on_docker_hub_or_a_mirror_is_an_official_image(host):
    assert normalize_ref(f"{host}python:3.12") == "python:3.12"
    assert normalize_ref(f"{host}nvidia/cuda:12.4.0") == "nvidia/cuda:12.4.0"


def test_a_digest_is_recorded_not_required():
    digest = "sha256:" + "ab" * 32
    standin = resolve_base(f"public.ecr.aws/docker/library/python:3.11-slim@{digest}")
    assert standin is not None and standin.image == PYTHON_BOOKWORM
    assert standin.digest == digest
    assert any(digest in d and "not checked" in d for d in standin.differences)
    assert resolve_base("python:3.11-slim").digest is None


@pytest.mark.parametrize(
    ("platform", "machine", "problem"),
    [
        ("linux/amd64", "x86_64", None),
        ("linux/amd64/v2", "x86_64", None),
        ("$BUILDPLATFORM", "x86_64", None),
        ("${TARGETPLATFORM}", "aarch64", None),
        ("linux/arm64", "aarch64", None),
        ("linux/arm64", "x86_64", "this machine builds linux/amd64 images only"),
        ("linux/amd64", "aarch64", "this machine builds linux/arm64 images only"),
    ],
)
def test_a_platform_is_honoured_when_it_is_this_machines(platform, machine, problem):
    found = platform_problem("python:3.11", platform, machine)
    assert (found is None) if problem is None else (problem in found and platform in found)


@pytest.mark.parametrize(
    ("ref", "mismatch"),
    [
        ("python:3.11-slim-bookworm", None),
        ("python:3.13-slim-trixie", None),
        ("python:3.13-slim", None),
        ("python:3.12-slim", "Python 3.11 (Debian bookworm's python3) instead of Python 3.12"),
        ("python:3.13-bookworm", None),
        (f"{TBENCH}/python-3-13:20250620", None),
        ("python:3.14-slim", "Python 3.13 (Debian trixie's python3) instead of Python 3.14"),
    ],
)
def test_what_a_tag_asks_for_and_does_not_get_is_said_plainly(ref, mismatch):
    standin = resolve_base(ref)
    assert standin is not None
    if mismatch is None:
        assert standin.mismatch is None
    else:
        assert standin.mismatch.startswith(mismatch) and "offline" in standin.mismatch
        assert standin.differences[0] == standin.mismatch


def test_normalize_ref():
    assert normalize_ref("docker.io/library/python:3.13@sha256:abc") == "python:3.13"
    assert normalize_ref("ubuntu") == "ubuntu:latest"
    assert normalize_ref("localhost:5000/team/app") == "localhost:5000/team/app:latest"


_COMPILED = pytest.param(PYTHON313_BOOKWORM, marks=pytest.mark.slow)  # compiles CPython once


@pytest.mark.podman
@pytest.mark.parametrize("name", [TRIXIE, PYTHON_BOOKWORM, NOBLE, BOOKWORM, _COMPILED])
def test_the_python_and_glibc_recorded_for_a_stand_in_are_what_it_has(name):
    """The kit fetches wheels for these versions: they must match the built image."""
    if shutil.which("podman") is None:
        pytest.skip("podman is not installed")
    from termrl.sandbox import build_base_images

    build_base_images([find_base_image(name)])
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
    recipe = find_base_image(name)
    suite_python, glibc = SUITES[recipe.suite]
    assert (python, glibc_line.split()[-1]) == (recipe.python or suite_python, glibc)


@pytest.mark.podman
@pytest.mark.parametrize(
    ("name", "present", "absent"),
    [
        (
            TRIXIE,
            ["python", "python3", "pip", "pip3", "tmux", "asciinema"],
            [],
        ),  # as in python:3.13 images
        (PYTHON_BOOKWORM, ["python", "python3", "pip", "pip3", "tmux", "asciinema"], []),
        (NOBLE, ["python3", "tmux", "asciinema"], ["python", "pip", "pip3"]),  # as in Ubuntu 24.04
        pytest.param(
            PYTHON313_BOOKWORM,
            ["python", "python3", "python3.13", "pip", "pip3", "tmux", "asciinema"],
            [],
            marks=pytest.mark.slow,
        ),
    ],
)
def test_stand_ins_have_the_commands_of_the_originals_and_man_directories(name, present, absent):
    if shutil.which("podman") is None:
        pytest.skip("podman is not installed")
    from termrl.sandbox import build_base_images

    build_base_images([find_base_image(name)])
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


_COMPILED_CHECK = r"""
set -e
command -v python python3 pip | tr '\n' ' '; echo
python -c 'import sys; print(sys.version.split()[0], sys.prefix)'
/usr/bin/python3 -c 'import sys; print("debian", "%d.%d" % sys.version_info[:2])'
python3 -c 'import bz2, ctypes, curses, dbm.gnu, decimal, lzma, readline, sqlite3, ssl, uuid, zlib; print(ssl.OPENSSL_VERSION.split()[1][:3])'
python3 -m venv /tmp/v && /tmp/v/bin/pip --version | cut -d' ' -f1
cd /tmp && openssl req -x509 -newkey rsa:2048 -nodes -keyout k.pem -out c.pem -days 1 -subj /O=X/CN=a.b 2>/dev/null
openssl x509 -in c.pem -noout -subject
"""


@pytest.mark.slow
@pytest.mark.podman
def test_the_compiled_python_stand_in_is_bookworm_with_cpython_3_13_in_usr_local():
    """python:3.13-slim-bookworm as the original: /usr/local's CPython first on PATH, every
    extension module built, venv with pip, and bookworm's OpenSSL 3.0 (its own output format)."""
    if shutil.which("podman") is None:
        pytest.skip("podman is not installed")
    from termrl.sandbox import build_base_images

    build_base_images([find_base_image(PYTHON313_BOOKWORM)])
    done = subprocess.run(
        [
            "podman",
            "run",
            "--rm",
            "--network=none",
            PYTHON313_BOOKWORM,
            "bash",
            "-c",
            _COMPILED_CHECK,
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    paths, python, debian, openssl, pip, subject = done.stdout.splitlines()
    assert paths.split() == [
        "/usr/local/bin/python",
        "/usr/local/bin/python3",
        "/usr/local/bin/pip",
    ]
    assert python.startswith("3.13.") and python.endswith(" /usr/local")
    assert debian == "debian 3.11"  # asciinema's, in /usr/bin
    assert (openssl, pip) == ("3.0", "pip")
    assert subject == "subject=O = X, CN = a.b"  # OpenSSL 3.5 (trixie) prints "subject=O=X, CN=a.b"
