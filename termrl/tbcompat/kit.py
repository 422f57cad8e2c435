"""The offline test kit: uv and the pinned test wheels, prepared on the host, put in at test time.

A Terminal-Bench test script downloads uv and pytest when it runs; the test
phase here has no network. The kit makes those downloads unnecessary without
touching the script:

    <home>/.local/bin/uv, uvx        uv from its PyPI wheel (the version the installer line names)
    <home>/.local/bin/env            the file astral's installer writes (``source $HOME/.local/bin/env``)
    /opt/termrl-testkit/wheels/      wheels of every pinned test requirement and its dependencies
    /opt/termrl-testkit/uv.toml      no index, find-links = the wheels, offline, no Python downloads
    /opt/termrl-testkit-uv-cache/    uv's cache (``UV_CACHE_DIR``), empty when the tests start

plus ``PIP_NO_INDEX``/``PIP_FIND_LINKS``/``UV_CONFIG_FILE`` in the test
phase's environment. Where the backend mounts directories for the tests' process
alone (``kit_binds``), the kit is mounted read-only at those paths for it, out
of reach of anything running in the sandbox; elsewhere it is uploaded
(``kit_files``). The installer line itself then fails quietly (no
network; ``curl | sh`` exits with sh's status) and everything after it finds
uv and the wheels in place.

Kits are built on the host from the package registries it may use, once per
``KitSpec``, and cached under ``$TERMRL_CACHE/tbcompat``:

    uv/<version>-<arch>/{uv,uvx}        extracted from ``pip download uv==<version>`` (``tool_binaries``)
    kits/<key>/wheels/*.whl, manifest.json

Each install command's requirements are resolved with ``uv pip compile
--universal`` for the sandbox's Python: ``uv add`` locks for every platform,
so a dependency only Windows needs (colorama under pytest) must be in the
folder too. Wheels are then fetched with ``pip download`` for the sandbox's
Python, glibc and architecture. Air-gapped clusters ship this cache (see
``termrl tbcompat kit``).
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from packaging.requirements import Requirement

from termrl.artifacts.tasks import TaskFile
from termrl.errors import EnvInitFailed
from termrl.sandbox import hostca
from termrl.sandbox.base_images import cache_root
from termrl.sandbox.build_tools import (
    FileLock,
    fetch_cache,
    installer_env_file,
    pip_download,
    run_fetch,
    tool_binaries,
)

__all__ = [
    "DEFAULT_UV_VERSION",
    "SANDBOX_KIT_DIR",
    "SANDBOX_UV_CACHE_DIR",
    "KitSpec",
    "ensure_kit",
    "kit_binds",
    "kit_files",
    "remove_kit",
    "test_env",
    "uv_binaries",
]

DEFAULT_UV_VERSION = "0.7.13"
"""uv for scripts that use uv without a versioned installer line (Terminal-Bench 1.0's pin)."""
SANDBOX_KIT_DIR = "/opt/termrl-testkit"
SANDBOX_UV_CACHE_DIR = "/opt/termrl-testkit-uv-cache"
"""uv's cache in the test phase (``UV_CACHE_DIR``): empty when the tests start, so nothing the agent
left in a cache is installed, and, where the tests get private mounts, theirs alone
(``termrl.tbcompat.testphase``)."""
KIT_FORMAT = 1


@dataclass(frozen=True)
class KitSpec:
    """What one kit holds; its JSON is the ``test_kit`` adaptation recorded on a task."""

    uv: str | None
    """uv version to put in place; None when no script uses uv."""
    python: str
    """The sandbox's python3 version (major.minor): wheels are fetched for it."""
    glibc: str
    """The sandbox's glibc (major.minor): the newest manylinux tag its wheels may carry."""
    groups: tuple[tuple[str, ...], ...] = ()
    """Requirements of each install command, resolved separately."""
    arch: str = "x86_64"

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "groups": [list(g) for g in self.groups]}

    @classmethod
    def from_json(cls, record: dict[str, Any]) -> KitSpec:
        """Read a ``test_kit`` record (extra keys such as ``found_in`` are ignored)."""
        return cls(
            uv=record.get("uv"),
            python=str(record["python"]),
            glibc=str(record["glibc"]),
            groups=tuple(tuple(g) for g in record.get("groups", [])),
            arch=record.get("arch") or platform.machine(),
        )

    @property
    def key(self) -> str:
        text = json.dumps({"format": KIT_FORMAT, **self.to_json()}, sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:20]


def uv_binaries(
    version: str, arch: str | None = None, log: Callable[[str], None] = lambda m: None
) -> Path:
    """The folder holding ``uv`` and ``uvx`` of ``version`` (fetched from PyPI once)."""
    return tool_binaries("uv", version, arch, log)


def _platforms(glibc: str, arch: str) -> list[str]:
    """Every manylinux tag a system with ``glibc`` runs (pip does not widen an explicit one)."""
    major, minor = (int(x) for x in glibc.split("."))
    tags = [f"manylinux_{major}_{m}_{arch}" for m in range(minor, 4, -1)]
    return [
        *tags,
        f"manylinux2014_{arch}",
        f"manylinux2010_{arch}",
        f"manylinux1_{arch}",
        f"linux_{arch}",
    ]


def _target_environment(spec: KitSpec) -> dict[str, str]:
    return {
        "python_version": spec.python,
        "python_full_version": f"{spec.python}.0",
        "os_name": "posix",
        "sys_platform": "linux",
        "platform_system": "Linux",
        "platform_machine": spec.arch,
        "implementation_name": "cpython",
        "platform_python_implementation": "CPython",
        "extra": "",
    }


def _resolve(uv: Path, spec: KitSpec, group: tuple[str, ...]) -> list[str]:
    """Every pin (``name==version ; marker``) the group needs on any platform, for the sandbox's Python."""
    env = {"UV_CACHE_DIR": str(fetch_cache() / "uv-cache")}
    bundle = hostca.host_ca_bundle(cache_root() / "sandbox")
    if bundle is not None:
        env["SSL_CERT_FILE"] = str(bundle)
    # uv ignores pip's configuration; a mirror given to pip by environment is honoured.
    if os.environ.get("PIP_INDEX_URL") and not os.environ.get("UV_DEFAULT_INDEX"):
        env["UV_DEFAULT_INDEX"] = os.environ["PIP_INDEX_URL"]
    out = run_fetch(
        [
            str(uv / "uv"),
            "pip",
            "compile",
            "-",
            "--universal",
            "--python-version",
            spec.python,
            "--no-header",
            "--no-annotate",
            "--quiet",
        ],
        f"offline test kit: resolving {' '.join(group)}",
        stdin="\n".join(group) + "\n",
        env=env,
    )
    return [
        line.strip()
        for line in out.splitlines()
        if line.strip() and not line.lstrip().startswith(("#", "-"))
    ]


def _fetch_wheels(spec: KitSpec, pins: list[str], dest: Path) -> list[str]:
    """Download a wheel of every pin; returns the pins no wheel was found for (none needed here)."""
    target = [
        "--python-version",
        spec.python,
        "--implementation",
        "cp",
        "--abi",
        "cp" + spec.python.replace(".", ""),
    ]
    linux = [a for p in _platforms(spec.glibc, spec.arch) for a in ("--platform", p)]
    bare = sorted({p.split(";")[0].strip() for p in pins})
    try:
        pip_download(
            [*target, *linux, *bare], dest, "offline test kit: pip download of the test wheels"
        )
        return []
    except EnvInitFailed:
        pass  # find out which one, and whether the sandbox needs it
    environment = _target_environment(spec)
    missing: list[str] = []
    for pin in sorted(set(pins)):
        requirement = Requirement(pin)
        needed = requirement.marker is None or requirement.marker.evaluate(environment)
        name = pin.split(";")[0].strip()
        # A package only another OS needs still has to be findable for `uv add`'s lock.
        attempts = (
            [linux]
            if needed
            else [linux, ["--platform", "win_amd64"], ["--platform", "macosx_11_0_arm64"]]
        )
        for platforms in attempts:
            try:
                pip_download(
                    [*target, *platforms, name], dest, f"offline test kit: pip download {name}"
                )
                break
            except EnvInitFailed as exc:
                error = exc
        else:
            if needed:
                raise EnvInitFailed(
                    f"offline test kit: no wheel of {name} for Python {spec.python} on "
                    f"{spec.arch} linux (glibc {spec.glibc})",
                    log_tail=error.log_tail,
                )
            missing.append(pin)
    return missing


def ensure_kit(spec: KitSpec, log: Callable[[str], None] = lambda m: None) -> Path:
    """The kit folder of ``spec``, built from the host's package registries if not cached.

    Blocking (run it in a thread from async code). Raises ``EnvInitFailed``
    when a wheel the sandbox needs cannot be fetched.
    """
    final = fetch_cache() / "kits" / spec.key
    if (final / "manifest.json").is_file():
        return final
    with FileLock(final.with_name(final.name + ".lock")):
        if (final / "manifest.json").is_file():
            return final
        started = time.monotonic()
        uv = uv_binaries(spec.uv or DEFAULT_UV_VERSION, spec.arch, log)
        with tempfile.TemporaryDirectory(dir=final.parent) as tmp:
            staging = Path(tmp) / "kit"
            (staging / "wheels").mkdir(parents=True)
            resolved = [_resolve(uv, spec, group) for group in spec.groups]
            log(
                f"fetching {len({p for g in resolved for p in g})} test wheel(s) for Python {spec.python}"
            )
            missing = (
                _fetch_wheels(spec, [p for g in resolved for p in g], staging / "wheels")
                if resolved
                else []
            )
            manifest = {
                "spec": spec.to_json(),
                "resolved": resolved,
                "missing": missing,
                "wheels": sorted(p.name for p in (staging / "wheels").glob("*.whl")),
                "fetched_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            }
            (staging / "manifest.json").write_text(json.dumps(manifest, indent=1))
            staging.rename(final)
        log(f"test kit {spec.key} ready in {time.monotonic() - started:.0f}s")
    return final


def _uv_toml(with_wheels: bool) -> bytes:
    # uv refuses a find-links folder that does not exist: a kit without wheels names none.
    links = f'find-links = ["{SANDBOX_KIT_DIR}/wheels"]\n' if with_wheels else ""
    return (
        "# termrl offline test kit: no index, only the kit's wheels, no network, no Python downloads\n"
        "no-index = true\n"
        f"{links}"
        "offline = true\n"
        'python-downloads = "never"\n'
    ).encode()


def kit_files(spec: KitSpec, kit_dir: Path, home: str) -> list[TaskFile]:
    """The kit as files relative to ``/`` (uv goes to ``home``/.local/bin, like the installer's)."""
    base = SANDBOX_KIT_DIR.lstrip("/")
    files = [TaskFile(f"{base}/uv.toml", _uv_toml(bool(spec.groups)))]
    files += [
        TaskFile(f"{base}/wheels/{w.name}", w.read_bytes())
        for w in sorted((kit_dir / "wheels").glob("*.whl"))
    ]
    if spec.uv:
        bin_dir = f"{home.rstrip('/')}/.local/bin"
        uv = uv_binaries(spec.uv, spec.arch)
        files += [
            TaskFile(f"{bin_dir.lstrip('/')}/{name}", (uv / name).read_bytes(), 0o755)
            for name in ("uv", "uvx")
        ]
        files.append(TaskFile(f"{bin_dir.lstrip('/')}/env", installer_env_file(bin_dir)))
    return files


def kit_binds(spec: KitSpec, kit_dir: Path, home: str, host: Path) -> dict[str, tuple[str, bool]]:
    """The kit as read-only mounts for the tests' process alone: sandbox path → (host path, True).

    Writes the kit's folder and the installer's ``env`` file under ``host``
    (a private scratch folder); uv's binaries are mounted from the cache.
    """
    folder = host / "kit"
    (folder / "wheels").mkdir(parents=True)
    (folder / "uv.toml").write_bytes(_uv_toml(bool(spec.groups)))
    for wheel in sorted((kit_dir / "wheels").glob("*.whl")):
        shutil.copyfile(wheel, folder / "wheels" / wheel.name)
    binds = {SANDBOX_KIT_DIR: (str(folder), True)}
    if spec.uv:
        bin_dir = f"{home.rstrip('/')}/.local/bin"
        (host / "env").write_bytes(installer_env_file(bin_dir))
        (host / "env").chmod(0o644)
        uv = uv_binaries(spec.uv, spec.arch)
        binds |= {f"{bin_dir}/{name}": (str(uv / name), True) for name in ("uv", "uvx")}
        binds[f"{bin_dir}/env"] = (str(host / "env"), True)
    for path in [folder, *folder.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)  # whatever user the tests run as reads them
    return binds


def test_env(spec: KitSpec) -> dict[str, str]:
    """Environment of the test phase when the kit is in place."""
    env = {
        "PIP_NO_INDEX": "1",
        "UV_CONFIG_FILE": f"{SANDBOX_KIT_DIR}/uv.toml",
        "UV_PYTHON_DOWNLOADS": "never",
        "UV_CACHE_DIR": SANDBOX_UV_CACHE_DIR,
        # The cache and a private virtualenv are separate mounts: uv would try hard links, fail
        # across them and print a warning into the tests' output before copying anyway.
        "UV_LINK_MODE": "copy",
    }
    if spec.groups:
        env["PIP_FIND_LINKS"] = f"{SANDBOX_KIT_DIR}/wheels"
    return env


test_env.__test__ = False  # type: ignore[attr-defined]  # not a pytest test


def remove_kit(spec: KitSpec) -> None:
    """Drop a cached kit (the next ``ensure_kit`` fetches it again)."""
    shutil.rmtree(fetch_cache() / "kits" / spec.key, ignore_errors=True)
