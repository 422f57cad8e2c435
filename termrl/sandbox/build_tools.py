"""Fetching tools from the package index for task builds, and serving vendor installers offline.

Two parts, both cached under ``fetch_cache()`` (``$TERMRL_CACHE/tbcompat``, a
name kept so existing caches stay valid):

    tool_binaries(tool, version)     the executables of a binary-only PyPI package (uv, ruff),
                                     ``<tool>/<version>-<arch>/``; also what the offline test kit
                                     (``termrl.tbcompat.kit``) puts in a sandbox
    build_tools_dir(record)          the folder a podman build mounts over ``SHIM_DIR``, for the
                                     installer URLs ``termrl.tbcompat.installers`` recorded on a task

A task's Dockerfile may run a vendor's shell installer (``curl -LsSf
https://astral.sh/uv/0.7.13/install.sh | sh``); builds here reach the package
index but not those hosts. The build folder is mounted read-only over
``/usr/local/sbin`` — first on the PATH of Debian, Ubuntu and python images,
empty in all of them, and never committed to the image::

    curl, wget                       shims: a recorded URL gets its local installer; any other call
                                     runs the real tool further down PATH (none there: 127, as before)
    termrl-installers/urls           URL <TAB> local installer, one a line
    termrl-installers/<tool>-<v>.sh  what astral's installer does, offline: the binaries into
                                     $<TOOL>_INSTALL_DIR, $XDG_BIN_HOME or $HOME/.local/bin, the
                                     ``env`` file beside them, the profile lines (unless told not to)
    termrl-installers/<tool>-<v>/    the binaries, from the tool's wheel on the package index

The task's bytes are untouched: its script still runs ``curl ... | sh``, and
everything after the installer (``source $HOME/.local/bin/env``, ``uv add``)
runs as written against the package index.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from termrl.errors import EnvInitFailed
from termrl.sandbox.base_images import cache_root

__all__ = [
    "SHIM_DIR",
    "FileLock",
    "build_tools_dir",
    "fetch_cache",
    "installer_env_file",
    "pip_download",
    "run_fetch",
    "tool_binaries",
]

SHIM_DIR = "/usr/local/sbin"
FORMAT = 1

FETCH_TIMEOUT_SEC = 900.0


def fetch_cache() -> Path:
    """Where fetched tools, build folders and test kits are kept."""
    return cache_root() / "tbcompat"


def run_fetch(
    argv: list[str], what: str, *, stdin: str | None = None, env: dict[str, str] | None = None
) -> str:
    try:
        done = subprocess.run(
            argv,
            input=stdin,
            capture_output=True,
            text=True,
            timeout=FETCH_TIMEOUT_SEC,
            env={**os.environ, **(env or {})},
        )
    except subprocess.TimeoutExpired as exc:
        raise EnvInitFailed(f"{what} timed out") from exc
    if done.returncode != 0:
        raise EnvInitFailed(
            f"{what} failed (exit status {done.returncode})",
            log_tail=(done.stdout + done.stderr)[-3000:],
        )
    return done.stdout


# pip reads the host's own pins (a PIP_CONSTRAINT capping torch, say); they say nothing about a sandbox.
_PIP_ENV = {"PIP_CONSTRAINT": "", "PIP_DISABLE_PIP_VERSION_CHECK": "1"}


def pip_download(args: list[str], dest: Path, what: str) -> None:
    run_fetch(
        [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--only-binary=:all:",
            "--quiet",
            "-d",
            str(dest),
            *args,
        ],
        what,
        env=_PIP_ENV,
    )


class FileLock:
    """An exclusive lock file: one fetch of a thing across threads and processes."""

    def __init__(self, path: Path):
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path

    def __enter__(self) -> None:
        self.handle = open(self.path, "w")  # noqa: SIM115 - held until __exit__
        fcntl.flock(self.handle, fcntl.LOCK_EX)

    def __exit__(self, *exc: object) -> None:
        fcntl.flock(self.handle, fcntl.LOCK_UN)
        self.handle.close()


def tool_binaries(
    tool: str,
    version: str | None,
    arch: str | None = None,
    log: Callable[[str], None] = lambda m: None,
) -> Path:
    """The folder holding the executables of a binary-only PyPI package (uv, ruff) at ``version``.

    astral ships the same static binaries in its wheels (``<tool>-<v>.data/scripts/``) as
    its installers download. ``version`` None takes the newest on the index at the
    first call and keeps it (``<tool>/latest-<arch>``), so later builds stay alike.
    """
    arch = arch or platform.machine()
    final = fetch_cache() / tool / f"{version or 'latest'}-{arch}"
    if final.is_dir():  # renamed into place complete
        return final
    with FileLock(final.with_name(final.name + ".lock")):
        if final.is_dir():
            return final
        requirement = f"{tool}=={version}" if version else tool
        log(f"fetching {requirement} ({arch}) from the package index")
        with tempfile.TemporaryDirectory(dir=final.parent) as tmp:
            platforms = [f"manylinux_2_17_{arch}", f"manylinux2014_{arch}"]
            pip_download(
                [requirement, *(a for p in platforms for a in ("--platform", p))],
                Path(tmp),
                f"pip download {requirement}",
            )
            wheel = next(Path(tmp).glob(f"{tool}-*.whl"))
            staging = Path(tmp) / "bin"
            staging.mkdir()
            with zipfile.ZipFile(wheel) as archive:
                scripts = [
                    n
                    for n in archive.namelist()
                    if re.fullmatch(rf"{tool}-[^/]+\.data/scripts/[^/]+", n)
                ]
                if not scripts:
                    raise EnvInitFailed(f"{wheel.name} holds no executables")
                for name in scripts:
                    target = staging / name.rsplit("/", 1)[1]
                    target.write_bytes(archive.read(name))
                    target.chmod(0o755)
            (staging / "VERSION").write_text(wheel.name.split("-")[1])
            staging.rename(final)
    return final


def installer_env_file(bin_dir: str) -> bytes:
    """The ``env`` file astral's uv installer writes beside uv (puts ``bin_dir`` on PATH once)."""
    return (
        "#!/bin/sh\n"
        "# add binaries to PATH if they aren't added yet\n"
        "# affix colons on either side of $PATH to simplify matching\n"
        'case ":${PATH}:" in\n'
        f'    *:"{bin_dir}":*)\n'
        "        ;;\n"
        "    *)\n"
        "        # Prepending path in case a system-installed binary needs to be overridden\n"
        f'        export PATH="{bin_dir}:$PATH"\n'
        "        ;;\n"
        "esac\n"
    ).encode()


def _shim(tool: str, mount_point: str) -> str:
    # curl: -o FILE / --output FILE / -O (remote name); wget: -O FILE / --output-document; short options
    # may be bunched (-LsSfo FILE, -qO-). Values of other options are never a recorded URL, so they
    # can be read as candidates harmlessly.
    out_short, remote_short = ("o", "O") if tool == "curl" else ("O", "")
    out_long = "--output" if tool == "curl" else "--output-document"
    default_out = "-" if tool == "curl" else "remote"
    remote_case = (
        f"""
    -{remote_short}|--remote-name) out=remote ;;"""
        if remote_short
        else ""
    )
    remote_bunched = (
        f"""
    -*{remote_short}*) out=remote ;;"""
        if remote_short
        else ""
    )
    return f"""#!/bin/sh
# termrl build shim (termrl/sandbox/build_tools.py): installer URLs recorded on the task get a
# local installer; every other call runs the real {tool}.
shims={mount_point}
real=
saved_ifs=$IFS
IFS=:
for dir in $PATH; do
    [ "$dir" = "$shims" ] && continue
    if [ -x "$dir/{tool}" ]; then real=$dir/{tool}; break; fi
done
IFS=$saved_ifs
if [ -z "$real" ]; then
    echo "{tool}: command not found" >&2
    exit 127
fi
tab=$(printf '\\t')
out={default_out}
installer=
url=
expect=
for arg in "$@"; do
    if [ -n "$expect" ]; then out=$arg; expect=; continue; fi
    case $arg in
    -{out_short}|{out_long}) expect=1 ;;{remote_case}
    {out_long}=*) out=${{arg#*=}} ;;
    --*) ;;
    -*{out_short}) expect=1 ;;
    -*{out_short}*) out=${{arg#*{out_short}}} ;;{remote_bunched}
    *)
        while IFS=$tab read -r known local; do
            if [ "$arg" = "$known" ]; then url=$arg; installer=$local; fi
        done < "$shims/termrl-installers/urls" ;;
    esac
done
[ -z "$installer" ] && exec "$real" "$@"
[ "$out" = remote ] && out=${{url##*/}}
if [ "$out" = - ]; then cat "$installer"; else cp "$installer" "$out"; fi
"""


def _installer(tool: str, version: str, binaries: list[str], mount_point: str) -> str:
    upper = tool.upper()
    env_template = installer_env_file("@BIN@").decode()
    env_heredoc = (
        env_template.replace("\\", "\\\\")
        .replace("$", "\\$")
        .replace("`", "\\`")
        .replace("@BIN@", "${shown}")
    )
    copies = "\n".join(
        f'cp "$src/{b}" "$dir/{b}" && chmod 755 "$dir/{b}" || exit 1\nsay "  {b}"' for b in binaries
    )
    return f"""#!/bin/sh
# Offline stand-in for astral's {tool} {version} installer (termrl/sandbox/build_tools.py): the same
# binaries in the same place, the same env file and profile lines; nothing is downloaded.
src={mount_point}/termrl-installers/{tool}-{version}
quiet=0
modify=1
for arg in "$@"; do
    case $arg in
    -q|--quiet) quiet=1 ;;
    --no-modify-path) modify=0 ;;
    esac
done
say() {{ [ "$quiet" = 1 ] || echo "$@"; }}
[ -n "${{{upper}_NO_MODIFY_PATH:-}}${{INSTALLER_NO_MODIFY_PATH:-}}" ] && modify=0
if [ -n "${{{upper}_UNMANAGED_INSTALL:-}}" ]; then
    dir=${{{upper}_UNMANAGED_INSTALL}}
    modify=0
elif [ -n "${{{upper}_INSTALL_DIR:-}}" ]; then
    dir=${{{upper}_INSTALL_DIR}}
elif [ -n "${{XDG_BIN_HOME:-}}" ]; then
    dir=$XDG_BIN_HOME
elif [ -n "${{XDG_DATA_HOME:-}}" ]; then
    dir=$XDG_DATA_HOME/../bin
else
    dir=$HOME/.local/bin
fi
say "downloading {tool} {version} (termrl: a local copy; this build is offline)"
say "installing to $dir"
mkdir -p "$dir" || exit 1
{copies}
case $dir in
"$HOME"/*) shown="\\$HOME${{dir#"$HOME"}}" ;;
*) shown=$dir ;;
esac
cat > "$dir/env" <<TERMRL_ENV
{env_heredoc}TERMRL_ENV
if [ "$modify" = 1 ]; then
    line=". \\"$shown/env\\""
    for rc in "$HOME/.profile" "$HOME/.bashrc" "$HOME/.bash_profile" "$HOME/.bash_login" "$HOME/.zshrc"; do
        [ "$rc" = "$HOME/.profile" ] || [ -f "$rc" ] || continue
        grep -qsF "$line" "$rc" || printf '\\n%s\\n' "$line" >> "$rc"
    done
fi
say "everything's installed!"
"""


def build_tools_dir(
    record: dict[str, dict[str, Any]],
    log: Callable[[str], None] = lambda m: None,
    mount_point: str = SHIM_DIR,
) -> Path:
    """The folder to mount at ``mount_point`` for a build with the ``build_installers`` ``record``.

    Blocking (binaries are fetched from the package index the first time);
    cached by content under ``$TERMRL_CACHE/tbcompat/build-tools/<key>``.
    """
    key = hashlib.sha256(
        json.dumps(
            {
                "format": FORMAT,
                "at": mount_point,
                "record": {u: [e["tool"], e.get("version")] for u, e in record.items()},
            },
            sort_keys=True,
        ).encode()
    ).hexdigest()[:20]
    final = fetch_cache() / "build-tools" / key
    if final.is_dir():
        return final
    final.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=final.parent) as tmp:
        staging = Path(tmp) / "tools"
        installers = staging / "termrl-installers"
        installers.mkdir(parents=True)
        table = []
        for url, entry in sorted(record.items()):
            tool = entry["tool"]
            source = tool_binaries(tool, entry.get("version"), log=log)
            version = (
                (source / "VERSION").read_text().strip()
                if (source / "VERSION").is_file()
                else entry["version"]
            )
            binaries = sorted(p.name for p in source.iterdir() if p.name != "VERSION")
            folder = installers / f"{tool}-{version}"
            if not folder.exists():
                folder.mkdir()
                for name in binaries:
                    shutil.copy2(source / name, folder / name)
            script = installers / f"{tool}-{version}.sh"
            script.write_text(_installer(tool, version, binaries, mount_point))
            script.chmod(0o755)
            table.append(f"{url}\t{mount_point}/termrl-installers/{script.name}\n")
        (installers / "urls").write_text("".join(table))
        for tool in ("curl", "wget"):
            (staging / tool).write_text(_shim(tool, mount_point))
            (staging / tool).chmod(0o755)
        staging.chmod(0o755)
        try:
            staging.rename(final)
        except OSError:
            if not final.is_dir():  # another process put the same folder in place first
                raise
    return final
