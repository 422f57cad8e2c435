"""Build-time installers: which URLs are recorded, and what the shims and local installers do.

The shell tests run the generated shims and installer with the host's sh, curl
and wget, the folder standing where podman mounts it (a symlink), and uv's
cached binaries replaced by a script that prints its name: the installer's
work (files, env file, profile lines) is what is checked, not uv. The image
build itself is covered by the slow corpus test (test_corpus_eval.py).
"""

from __future__ import annotations

import platform
import shutil
import subprocess

import pytest

from termrl.artifacts.tasks import TaskFile
from termrl.sandbox.build_tools import build_tools_dir
from termrl.tbcompat.installers import scan_installers

UV_URL = "https://astral.sh/uv/0.7.13/install.sh"


def test_installer_urls_are_recorded_wherever_the_build_context_has_them():
    files = [
        TaskFile(
            "Dockerfile",
            b"FROM python:3.13-slim\nARG UV_VERSION=0.6.3\nCOPY install.sh /\nRUN bash /install.sh\n"
            b"RUN curl -LsSf https://astral.sh/uv/${UV_VERSION}/install.sh | sh\n",
        ),
        TaskFile(
            "install.sh",
            f"curl -LsSf {UV_URL} | sh\nwget -qO- https://astral.sh/ruff/install.sh | bash\n".encode(),
        ),
        TaskFile(
            "setup/get.sh",
            b"curl -fsSL -o /tmp/i.sh https://github.com/astral-sh/uv/releases/download/0.5.1/uv-installer.sh\n"
            b"curl -LsSf https://astral.sh/uv/$MISSING/install.sh | sh\n",
        ),
        TaskFile("logo.png", b"\x89PNG\xff\xfe"),
    ]
    record, problems = scan_installers(files)
    assert record == {
        "https://astral.sh/uv/0.6.3/install.sh": {
            "tool": "uv",
            "version": "0.6.3",
            "found_in": ["Dockerfile"],
        },
        UV_URL: {"tool": "uv", "version": "0.7.13", "found_in": ["install.sh"]},
        "https://astral.sh/ruff/install.sh": {
            "tool": "ruff",
            "version": None,
            "found_in": ["install.sh"],
        },
        "https://github.com/astral-sh/uv/releases/download/0.5.1/uv-installer.sh": {
            "tool": "uv",
            "version": "0.5.1",
            "found_in": ["setup/get.sh"],
        },
    }
    assert problems == [
        "setup/get.sh: cannot serve https://astral.sh/uv/$MISSING/install.sh offline "
        "(the version $MISSING has no default)"
    ]


def test_no_installer_no_record():
    assert scan_installers(
        [TaskFile("Dockerfile", b"FROM python:3.13\nRUN pip install uv==0.7.13\n")]
    ) == ({}, [])


@pytest.fixture
def mounted_tools(tmp_path, monkeypatch):
    """The tools folder for UV_URL, at the path it names (as podman would mount it)."""
    monkeypatch.setenv("TERMRL_CACHE", str(tmp_path / "cache"))
    fake = tmp_path / "cache" / "tbcompat" / "uv" / f"0.7.13-{platform.machine()}"
    fake.mkdir(parents=True)
    for name in ("uv", "uvx"):
        (fake / name).write_text(f"#!/bin/sh\necho {name} 0.7.13\n")
        (fake / name).chmod(0o755)
    mount = tmp_path / "mnt"
    folder = build_tools_dir({UV_URL: {"tool": "uv", "version": "0.7.13"}}, mount_point=str(mount))
    mount.symlink_to(folder)
    home = tmp_path / "home"
    home.mkdir()
    (home / ".bashrc").write_text("# bashrc\n")
    return mount, home


def _sh(script: str, mount, home, **env: str) -> subprocess.CompletedProcess[str]:
    path = f"{mount}:/usr/local/bin:/usr/bin:/bin"
    return subprocess.run(
        ["sh", "-c", script],
        capture_output=True,
        text=True,
        cwd=home,
        env={"PATH": path, "HOME": str(home), **env},
    )


@pytest.mark.skipif(shutil.which("curl") is None, reason="needs curl on the host")
def test_curl_pipe_sh_installs_uv_where_astrals_installer_does(mounted_tools):
    mount, home = mounted_tools
    done = _sh(f'curl -LsSf {UV_URL} | sh && . "$HOME/.local/bin/env" && uv && uvx', mount, home)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-2:] == ["uv 0.7.13", "uvx 0.7.13"]
    assert sorted(p.name for p in (home / ".local" / "bin").iterdir()) == ["env", "uv", "uvx"]
    assert (
        '"$HOME/.local/bin"' in (home / ".local" / "bin" / "env").read_text()
    )  # portable, like the original
    for rc in (".profile", ".bashrc"):  # .profile is created, an existing .bashrc gets the line
        assert (home / rc).read_text().count('. "$HOME/.local/bin/env"') == 1


@pytest.mark.skipif(shutil.which("curl") is None, reason="needs curl on the host")
def test_installer_options_and_variables_are_honoured(mounted_tools, tmp_path):
    mount, home = mounted_tools
    done = _sh(
        f"curl -fsSLo /tmp/../{home}/i.sh {UV_URL} && sh i.sh --quiet",
        mount,
        home,
        UV_INSTALL_DIR=str(tmp_path / "bin"),
        UV_NO_MODIFY_PATH="1",
    )
    assert done.returncode == 0 and done.stdout == "", done.stderr
    assert (tmp_path / "bin" / "uv").is_file() and not (home / ".profile").exists()


@pytest.mark.skipif(shutil.which("wget") is None, reason="needs wget on the host")
def test_wget_forms_are_served_too(mounted_tools):
    mount, home = mounted_tools
    assert _sh(f"wget -qO- {UV_URL} | bash -s -- --no-modify-path", mount, home).returncode == 0
    assert (home / ".local" / "bin" / "uv").is_file() and not (home / ".profile").exists()
    assert _sh(f"wget -q {UV_URL}", mount, home).returncode == 0
    assert (
        (home / "install.sh")
        .read_text()
        .startswith("#!/bin/sh\n# Offline stand-in for astral's uv 0.7.13")
    )


@pytest.mark.skipif(shutil.which("curl") is None, reason="needs curl on the host")
def test_other_calls_reach_the_real_tool_and_a_missing_tool_stays_missing(mounted_tools):
    mount, home = mounted_tools
    done = _sh("curl --version", mount, home)
    assert done.returncode == 0 and done.stdout.startswith("curl ")
    missing = subprocess.run(
        ["/bin/sh", "-c", f"curl -LsSf {UV_URL}"],
        capture_output=True,
        text=True,
        env={"PATH": str(mount), "HOME": str(home)},
    )
    assert missing.returncode == 127  # as in an image without curl
