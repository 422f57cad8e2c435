"""Tamper evidence: what the agent changed that scoring will run, read from outside the sandbox.

Scoring runs the tests with the binaries in the sandbox, so a command the
agent replaced in a system path (``/usr/local/bin/bash``, a ``pytest`` earlier
on the PATH) or a Python startup hook it planted runs during the tests, with no
more privilege than the agent had. Installing software is often the task
itself, so such a change is flagged, not failed: ``find_tampering`` lists each
with why (``TestOutcome.tampering``, eval's ``tampering`` column, rollout's
``tampering`` episode flag, which masks the episode).

The changed paths come from the backend (``Session.changed_files``: podman's
diff, bwrap's overlay upper layer); the probes below run in a fresh process of
the sandbox with the agent's processes stopped.
"""

from __future__ import annotations

import base64
import posixpath
import shlex
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from termrl.sandbox.session import Session

__all__ = ["find_tampering"]

# Args "A path" / "C path": prints each changed file that replaces a command on this PATH, or
# that was added in front of a command of the same name further on (the same file via a symlinked
# directory, /bin -> /usr/bin, is no shadow).
SHADOW_PROBE = """\
IFS=: read -ra dirs <<< "$PATH"
for entry in "$@"; do
  kind=${entry%% *} f=${entry#* }; d=${f%/*} n=${f##*/} seen=0
  for e in "${dirs[@]}"; do
    if [ "$e" = "$d" ]; then
      seen=1
      if [ "$kind" = C ] && [ -f "$f" ]; then echo "$f: a command, replaced"; break; fi
      continue
    fi
    if ((seen)) && [ -x "$e/$n" ] && [ ! -d "$e/$n" ] && [ ! "$e/$n" -ef "$f" ]; then
      echo "$f: shadows $e/$n"; break
    fi
  done
done
"""
# Per .pth file: its path, its sha256 and the line of a *.dist-info/RECORD beside it that lists it.
PTH_PROBE = """\
for f in "$@"; do
  n=${f##*/} d=${f%/*}
  h=$(sha256sum < "$f" 2>/dev/null) h=${h%% *}
  r=$(cat "$d"/*.dist-info/RECORD 2>/dev/null | awk -F, -v n="$n" '$1 == n { print; exit }')
  printf '%s\\t%s\\t%s\\n' "$f" "$h" "$r"
done
"""
SHADOW_CANDIDATES_MAX = 1000
"""Files checked for shadowing at most (an apt-get install adds hundreds of commands, legitimately)."""


def _startup_hook(path: str) -> bool:
    """Files every Python (or every dynamically linked program) runs at start."""
    name = posixpath.basename(path)
    in_python = "/python" in path and ("site-packages" in path or "dist-packages" in path)
    return path == "/etc/ld.so.preload" or (
        in_python and (name in ("sitecustomize.py", "usercustomize.py") or name.endswith(".pth"))
    )


def _installed(probe_line: str) -> str | None:
    """The .pth path of a ``PTH_PROBE`` line when a package installed it as it is now, else None.

    pip records every file it installs, with its sha256, in the package's RECORD
    (setuptools' distutils-precedence.pth, editable installs' __editable__ hooks):
    such a hook is the package's, not the agent's. A .pth that no RECORD lists, or
    that was edited after the install, is flagged.
    """
    path, _, rest = probe_line.partition("\t")
    digest, _, record = rest.partition("\t")
    _, _, recorded = record.partition(",sha256=")
    recorded = recorded.split(",")[0]
    try:
        recorded_hex = base64.urlsafe_b64decode(recorded + "=" * (-len(recorded) % 4)).hex()
    except ValueError:
        return None
    return path if recorded and digest and recorded_hex == digest else None


async def find_tampering(session: Session) -> tuple[str, ...]:
    """Changes to system paths that run during scoring, each with why: a command replaced, a command
    shadowed further up the PATH (``/usr/local/bin/bash``), a Python startup hook or ld.so.preload.

    Read from outside the sandbox (``Session.changed_files``: podman's diff, bwrap's overlay upper
    layer); empty where the backend cannot tell. Call it with the agent's processes stopped.
    """
    changes = await session.changed_files()
    if not changes:
        return ()
    hooks = [path for path in sorted(changes) if _startup_hook(path)]
    pth = [path for path in hooks if path.endswith(".pth")]
    if pth:
        probe = await session.exec_fresh(
            f"set -- {' '.join(shlex.quote(p) for p in pth)}\n{PTH_PROBE}", timeout=60
        )
        installed = {_installed(line) for line in probe.output.splitlines()}
        hooks = [path for path in hooks if path not in installed]
    found = [f"{path}: a startup hook" for path in hooks]
    candidates = [
        f"{kind} {path}"
        for path, kind in sorted(changes.items())
        if posixpath.basename(posixpath.dirname(path)) in ("bin", "sbin")
    ]
    if candidates:
        args = " ".join(shlex.quote(c) for c in candidates[:SHADOW_CANDIDATES_MAX])
        probe = await session.exec_fresh(f"set -- {args}\n{SHADOW_PROBE}", timeout=60)
        found += [line for line in probe.output.splitlines() if line.startswith("/")]
    return tuple(found)
