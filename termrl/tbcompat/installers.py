"""Vendor installers a Dockerfile fetches at build time, served from local copies.

A task's Dockerfile, or a script one of its RUN steps runs, may install a tool
with its vendor's shell installer::

    curl -LsSf https://astral.sh/uv/0.7.13/install.sh | sh
    wget -qO- https://astral.sh/uv/install.sh | bash
    curl -fsSL -o /tmp/i.sh https://github.com/astral-sh/uv/releases/download/0.7.13/uv-installer.sh

Builds here reach the package index but not those hosts. ``scan_installers``
finds such URLs in the build context at import (the ``build_installers``
adaptation); for the build, ``build_tools_dir`` prepares a folder that podman
mounts read-only over ``/usr/local/sbin`` — first on the PATH of Debian, Ubuntu
and python images, empty in all of them, and never committed to the image::

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

import hashlib
import json
import re
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from termrl.artifacts.tasks import TaskFile
from termrl.sandbox.base_images import cache_root
from termrl.tbcompat.kit import installer_env_file, tool_binaries

__all__ = ["SHIM_DIR", "build_tools_dir", "scan_installers"]

SHIM_DIR = "/usr/local/sbin"
FORMAT = 1

_VERSION = r"(?P<version>\d+\.\d+\.\d+|\$\{?[A-Za-z_][A-Za-z0-9_]*\}?)"
_INSTALLER_URLS = (
    re.compile(rf"https?://astral\.sh/(?P<tool>uv|ruff)/(?:{_VERSION}/)?install\.sh"),
    re.compile(rf"https?://github\.com/astral-sh/(?P<tool>uv|ruff)/releases/download/{_VERSION}/(?:uv|ruff)-installer\.sh"),
    re.compile(r"https?://github\.com/astral-sh/(?P<tool>uv|ruff)/releases/latest/download/(?:uv|ruff)-installer\.sh"),
)
_DEFAULT = re.compile(r"^[ \t]*(?:ARG|ENV)[ \t]+(?P<name>[A-Za-z_][A-Za-z0-9_]*)[ \t]*=[ \t]*\"?(?P<value>[^\s\"]+)",
                      re.IGNORECASE | re.MULTILINE)  # fmt: skip


def scan_installers(environment_files: list[TaskFile]) -> tuple[dict[str, dict[str, Any]], list[str]]:
    """(the ``build_installers`` record of the build context, problems to note).

    Record: installer URL -> ``{"tool", "version" (None: the newest), "found_in"}``.
    A version written as a variable is read from the Dockerfile's ``ARG``/``ENV``
    defaults; one that cannot be read is a problem, not a guess.
    """
    texts: dict[str, str] = {}
    for f in environment_files:
        try:
            texts[f.path] = f.data.decode()
        except UnicodeDecodeError:
            continue
    defaults = {m.group("name"): m.group("value") for m in _DEFAULT.finditer(texts.get("Dockerfile", ""))}
    found: dict[str, dict[str, Any]] = {}
    problems: list[str] = []
    for path in sorted(texts):
        for pattern in _INSTALLER_URLS:
            for match in pattern.finditer(texts[path]):
                url, version = match.group(0), match.groupdict().get("version")
                if version and version.startswith("$"):
                    name = version.strip("${}")
                    if name not in defaults:
                        problems.append(f"{path}: cannot serve {url} offline (the version ${name} has no default)")
                        continue
                    version = defaults[name]
                    url = url.replace(match.group("version"), version)
                entry = found.setdefault(url, {"tool": match.group("tool"), "version": version, "found_in": []})
                if path not in entry["found_in"]:
                    entry["found_in"].append(path)
    return found, problems


def _shim(tool: str, mount_point: str) -> str:
    # curl: -o FILE / --output FILE / -O (remote name); wget: -O FILE / --output-document; short options
    # may be bunched (-LsSfo FILE, -qO-). Values of other options are never a recorded URL, so they
    # can be read as candidates harmlessly.
    out_short, remote_short = ("o", "O") if tool == "curl" else ("O", "")
    out_long = "--output" if tool == "curl" else "--output-document"
    default_out = "-" if tool == "curl" else "remote"
    remote_case = f"""
    -{remote_short}|--remote-name) out=remote ;;""" if remote_short else ""
    remote_bunched = f"""
    -*{remote_short}*) out=remote ;;""" if remote_short else ""
    return f"""#!/bin/sh
# termrl build shim (termrl/tbcompat/installers.py): installer URLs recorded on the task get a
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
    env_heredoc = env_template.replace("\\", "\\\\").replace("$", "\\$").replace("`", "\\`").replace("@BIN@", "${shown}")
    copies = "\n".join(f'cp "$src/{b}" "$dir/{b}" && chmod 755 "$dir/{b}" || exit 1\nsay "  {b}"' for b in binaries)
    return f"""#!/bin/sh
# Offline stand-in for astral's {tool} {version} installer (termrl/tbcompat/installers.py): the same
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


def build_tools_dir(record: dict[str, dict[str, Any]], log: Callable[[str], None] = lambda m: None,
                    mount_point: str = SHIM_DIR) -> Path:  # fmt: skip
    """The folder to mount at ``mount_point`` for a build with the ``build_installers`` ``record``.

    Blocking (binaries are fetched from the package index the first time);
    cached by content under ``$TERMRL_CACHE/tbcompat/build-tools/<key>``.
    """
    key = hashlib.sha256(json.dumps({"format": FORMAT, "at": mount_point, "record": {u: [e["tool"], e.get("version")]
                                                                   for u, e in record.items()}},
                                    sort_keys=True).encode()).hexdigest()[:20]  # fmt: skip
    final = cache_root() / "tbcompat" / "build-tools" / key
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
            version = (source / "VERSION").read_text().strip() if (source / "VERSION").is_file() else entry["version"]
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
