"""kit: the offline test kit's spec, its files, and a real fetch from the package registry."""

from __future__ import annotations

import subprocess
import tomllib
from pathlib import Path

import pytest

from termrl.errors import EnvInitFailed
from termrl.sandbox.build_tools import installer_env_file
from termrl.tbcompat.kit import (
    SANDBOX_KIT_DIR,
    KitSpec,
    _platforms,
    ensure_kit,
    kit_files,
    test_env,
)

SPEC = KitSpec(uv=None, python="3.13", glibc="2.41", groups=(("iniconfig==2.0.0",),), arch="x86_64")


def test_spec_round_trips_through_its_task_record_and_keys_on_content():
    record = {**SPEC.to_json(), "found_in": ["run-tests.sh"]}
    assert KitSpec.from_json(record) == SPEC
    assert KitSpec.from_json(record).key == SPEC.key
    assert KitSpec(uv=None, python="3.11", glibc="2.36", groups=SPEC.groups).key != SPEC.key
    assert KitSpec(uv="0.7.13", python="3.13", glibc="2.41", groups=SPEC.groups).key != SPEC.key


def test_platforms_cover_every_older_manylinux():
    tags = _platforms("2.41", "x86_64")
    assert tags[0] == "manylinux_2_41_x86_64"
    assert {
        "manylinux_2_17_x86_64",
        "manylinux2014_x86_64",
        "manylinux1_x86_64",
        "linux_x86_64",
    } <= set(tags)
    assert "manylinux_2_42_x86_64" not in tags


def test_the_installer_env_file_puts_uv_on_path_once(tmp_path):
    env = tmp_path / "env"
    env.write_bytes(installer_env_file("/root/.local/bin"))
    done = subprocess.run(
        ["sh", "-c", f'PATH=/usr/bin:/bin; . {env}; . {env}; printf %s "$PATH"'],
        capture_output=True,
        text=True,
        check=True,
    )
    assert done.stdout == "/root/.local/bin:/usr/bin:/bin"


def test_kit_files_hold_the_wheels_and_an_offline_uv_config(tmp_path):
    (tmp_path / "wheels").mkdir()
    (tmp_path / "wheels" / "iniconfig-2.0.0-py3-none-any.whl").write_bytes(b"PK")
    files = {f.path: f for f in kit_files(SPEC, tmp_path, "/root")}
    base = SANDBOX_KIT_DIR.lstrip("/")
    assert set(files) == {
        f"{base}/uv.toml",
        f"{base}/wheels/iniconfig-2.0.0-py3-none-any.whl",
    }  # no uv: none asked
    config = tomllib.loads(files[f"{base}/uv.toml"].data.decode())
    assert config == {
        "no-index": True,
        "find-links": [f"{SANDBOX_KIT_DIR}/wheels"],
        "offline": True,
        "python-downloads": "never",
    }
    env = test_env(SPEC)
    assert env["PIP_NO_INDEX"] == "1" and env["PIP_FIND_LINKS"] == f"{SANDBOX_KIT_DIR}/wheels"
    assert env["UV_CONFIG_FILE"] == f"{SANDBOX_KIT_DIR}/uv.toml"


@pytest.mark.slow
def test_a_kit_is_fetched_once_from_the_registry(tmp_path, monkeypatch):
    """Needs the PyPI mirror (the host's network), like `termrl tbcompat kit`."""
    monkeypatch.setenv("TERMRL_CACHE", str(tmp_path))
    spec = KitSpec(
        uv="0.7.13", python="3.13", glibc="2.41", groups=(("pytest==8.4.1",), ("pyyaml==6.0.2",))
    )
    folder = ensure_kit(spec)
    wheels = sorted(p.name for p in (folder / "wheels").glob("*.whl"))
    assert any(w.startswith("pytest-8.4.1-") for w in wheels)
    assert any(
        w.startswith("PyYAML-6.0.2-cp313-cp313-manylinux") for w in wheels
    )  # built for the sandbox's Python
    assert any(
        w.startswith("colorama-") for w in wheels
    )  # Windows-only, but `uv add` locks for every platform
    files = {f.path: f for f in kit_files(spec, folder, "/home/user")}
    assert (
        files["home/user/.local/bin/uv"].mode == 0o755
        and len(files["home/user/.local/bin/uv"].data) > 10**6
    )
    assert b'export PATH="/home/user/.local/bin:$PATH"' in files["home/user/.local/bin/env"].data
    assert ensure_kit(spec) == folder  # cached: no second fetch
    stamp = (folder / "manifest.json").stat().st_mtime_ns
    ensure_kit(spec)
    assert (folder / "manifest.json").stat().st_mtime_ns == stamp


@pytest.mark.slow
def test_a_pin_with_no_wheel_for_the_sandbox_fails_with_the_reason(tmp_path, monkeypatch):
    monkeypatch.setenv("TERMRL_CACHE", str(tmp_path))
    spec = KitSpec(
        uv=None, python="3.13", glibc="2.41", groups=(("numpy==1.26.4",),)
    )  # no cp313 wheels
    with pytest.raises(EnvInitFailed, match="numpy"):
        ensure_kit(spec)
    assert not (Path(tmp_path) / "tbcompat" / "kits" / spec.key).exists()
