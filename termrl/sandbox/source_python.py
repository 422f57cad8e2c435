"""CPython built from a Debian source package into /usr/local, as the official python images have it.

Debian ships one python3 per release (bookworm 3.11, trixie 3.13), while the
official ``python:3.13-slim-bookworm`` image compiles CPython 3.13 on bookworm
into ``/usr/local``. Offline, the upstream source comes from the Debian source
package of that version (``python3.13`` in trixie): its ``.orig`` tarball is the
upstream release tarball (apt checks it against the archive's signed index), and
Debian's patches are left out. It is compiled once in a container of the
target release (a base image of that suite) with the official image's
configure flags except PGO and LTO (they run the test suite during the build,
several times the plain compile) and with the test modules left out, checked
(ssl, sqlite3, ctypes, readline, ... import),
and cached:

    $TERMRL_CACHE/sandbox/cpython/<v>-from-<source suite>-on-<suite>-<arch>-<hash>.tar   the /usr/local tree
    $TERMRL_CACHE/sandbox/cpython/<same>.json        exact version, source package, runtime packages

The runtime packages are what the built binaries link against (found with
``ldd`` and ``dpkg-query``, as the official image's Dockerfile does); the
stand-in's rootfs installs them and unpacks the tree (``base_images``).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import platform
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from termrl.errors import EnvInitFailed

__all__ = ["BUILD_SCRIPT", "SourcePython", "build_source_python"]

BUILD_TIMEOUT_SEC = 3600.0

# Runs as root in a throwaway container of the target suite, on the engine's bridge network
# (the Debian mirror its apt sources name). $1 = major.minor, $2 = the suite whose source
# package is used. Writes /out/cpython.tar (usr/local) and /out/info.json.
BUILD_SCRIPT = r"""#!/bin/sh
set -eu
version=$1 source_suite=$2
export DEBIAN_FRONTEND=noninteractive
mirror=$(sed -n 's/^URIs: *//p' /etc/apt/sources.list.d/*.sources 2>/dev/null | head -n1)
[ -n "$mirror" ] || mirror=$(awk '$1 == "deb" {print $2; exit}' /etc/apt/sources.list)
echo "deb-src $mirror $source_suite main" > /etc/apt/sources.list.d/termrl-python-src.list
apt-get update -qq
# The official image's build dependencies, less Tk and Bluetooth.
apt-get install -y -qq --no-install-recommends dpkg-dev gcc make libbz2-dev libc6-dev \
  libdb-dev libffi-dev libgdbm-dev liblzma-dev libncurses-dev libreadline-dev libsqlite3-dev \
  libssl-dev pkg-config uuid-dev xz-utils zlib1g-dev >/dev/null
mkdir -p /src && cd /src
apt-get source --download-only -qq "python$version"
dsc=$(ls python"$version"_*.dsc)
tar -xf python"$version"_*.orig.tar.xz
cd Python-"$version".*/
./configure -q --build="$(dpkg-architecture -qDEB_BUILD_GNU_TYPE)" --prefix=/usr/local \
  --enable-loadable-sqlite-extensions --enable-option-checking=fatal --enable-shared \
  --with-ensurepip --disable-test-modules LDFLAGS="-Wl,--strip-all -Wl,-rpath=/usr/local/lib"
make -s -j"$(nproc)" >/tmp/make.log 2>&1 || { tail -n 60 /tmp/make.log; exit 1; }
make -s install >/tmp/install.log 2>&1 || { tail -n 60 /tmp/install.log; exit 1; }
cd /usr/local
find . -depth \( \( -type d -a \( -name test -o -name tests -o -name idle_test \) \) \
  -o \( -type f -a -name 'libpython*.a' \) \) -exec rm -rf '{}' +
for pair in idle3:idle pydoc3:pydoc python3:python python3-config:python-config pip3:pip; do
  if [ -e "bin/${pair%%:*}" ]; then ln -sf "${pair%%:*}" "bin/${pair##*:}"; fi
done
bin/python3 -c 'import bz2, ctypes, curses, dbm.gnu, decimal, ensurepip, hashlib, lzma, readline, sqlite3, ssl, uuid, venv, zlib'
runtime=$(find /usr/local -type f \( -perm -u+x -o -name '*.so*' \) -exec ldd '{}' + 2>/dev/null \
  | awk '/=>/ { so = $(NF-1); if (index(so, "/usr/local/") == 1) next; gsub("^/(usr/)?", "", so); print "*" so }' \
  | sort -u | xargs -r dpkg-query --search | cut -d: -f1 | sort -u | tr '\n' ' ')
full=$(bin/python3 -c 'import platform; print(platform.python_version())')
printf '{"version": "%s", "source": "%s (Debian %s)", "runtime_packages": "%s"}\n' \
  "$full" "${dsc%.dsc}" "$source_suite" "$runtime" > /out/info.json
tar -C / -cf /out/cpython.tar usr/local
"""


@dataclass(frozen=True)
class SourcePython:
    """CPython ``version`` compiled from Debian ``source_suite``'s ``python<version>`` source package."""

    version: str
    """major.minor, e.g. ``3.13``."""
    source_suite: str
    """The Debian suite whose source package gives the upstream tarball (``trixie`` for 3.13)."""

    def recipe(self) -> dict[str, Any]:
        script = hashlib.sha256(BUILD_SCRIPT.encode()).hexdigest()[:12]
        return {"version": self.version, "source_suite": self.source_suite, "script": script}


def _tree_paths(build: SourcePython, suite: str, cache: Path) -> tuple[Path, Path]:
    digest = hashlib.sha256(
        json.dumps({**build.recipe(), "suite": suite}, sort_keys=True).encode()
    ).hexdigest()[:12]
    stem = f"{build.version}-from-{build.source_suite}-on-{suite}-{platform.machine()}-{digest}"
    return cache / f"{stem}.tar", cache / f"{stem}.json"


def build_source_python(
    build: SourcePython,
    *,
    suite: str,
    builder_image: str,
    cache: Path,
    binary: str = "podman",
    log: Callable[[str], None] = lambda message: None,
) -> tuple[Path, dict[str, Any]]:
    """(the /usr/local tree as a tar, its info) of ``build`` compiled on ``suite``, built once.

    ``builder_image`` is a local image of ``suite`` (compilers are installed in a throwaway
    container of it). Raises ``EnvInitFailed`` with the build's log tail when it fails.
    """
    tree, info_path = _tree_paths(build, suite, cache)
    cache.mkdir(parents=True, exist_ok=True)
    with open(cache / f"{tree.stem}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another process may be compiling the same tree
        if not (tree.exists() and info_path.exists()):
            _compile(build, builder_image, tree, info_path, binary, log)
    info = json.loads(info_path.read_text())
    info["runtime_packages"] = info["runtime_packages"].split()
    return tree, info


def _compile(
    build: SourcePython,
    builder_image: str,
    tree: Path,
    info_path: Path,
    binary: str,
    log: Callable[[str], None],
) -> None:
    started = time.monotonic()
    log(f"compiling CPython {build.version} from Debian {build.source_suite}'s source package")
    with tempfile.TemporaryDirectory(dir=tree.parent) as tmp:
        out = Path(tmp)
        (out / "build.sh").write_text(BUILD_SCRIPT)
        argv = [
            binary,
            "run",
            "--rm",
            "--network=private",  # the Debian mirror, never the host's loopback
            "--volume",
            f"{out}:/out",
            builder_image,
            "sh",
            "/out/build.sh",
            build.version,
            build.source_suite,
        ]
        try:
            done = subprocess.run(argv, capture_output=True, text=True, timeout=BUILD_TIMEOUT_SEC)
        except subprocess.TimeoutExpired as e:
            raise EnvInitFailed(
                f"compiling CPython {build.version}: timed out after {BUILD_TIMEOUT_SEC:.0f}s"
            ) from e
        if done.returncode != 0:
            raise EnvInitFailed(
                f"compiling CPython {build.version} from Debian {build.source_suite}'s source "
                f"package: exit status {done.returncode}",
                log_tail=(done.stdout + done.stderr)[-4000:],
            )
        (out / "cpython.tar").replace(tree)
        (out / "info.json").replace(info_path)
    log(f"compiled CPython {build.version} in {time.monotonic() - started:.0f}s")
