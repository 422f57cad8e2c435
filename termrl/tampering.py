"""Tamper evidence: what the agent changed that scoring will run, read from outside the sandbox.

Scoring runs the tests with the binaries in the sandbox, so a command the
agent replaced in a system path (``/usr/local/bin/bash``, a ``pytest`` earlier
on the PATH), a Python startup hook it planted, a pytest plugin it installed
(an entry point in the ``pytest11`` group: every pytest that sees it loads it),
an edit to installed code (pytest's, the standard library's, a shared
library) or a module in the working directory named like an installed one
runs during the tests, with no more privilege than the agent had. Installing
software is often the task itself, so such a change is flagged, not failed:
``find_tampering`` lists each with why (``TestOutcome.tampering``, eval's
``tampering`` column, rollout's ``tampering`` episode flag, which masks the
episode). A file that pip's RECORD or dpkg's md5sums list as it is now came
from an install or an upgrade and is not flagged.

The changed paths come from the backend (``Session.changed_files``: podman's
diff, bwrap's overlay upper layer); the probes below run in a fresh process of
the sandbox with the agent's processes stopped. They run through the
sandbox's bash and python3, so those, what they load and the standard library
are judged from the host on the changed paths alone (``SCORING_RUNS``,
``STANDARD_LIBRARY``), never by a probe.
"""

from __future__ import annotations

import posixpath
import re
import shlex
from collections.abc import Iterator
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from termrl.sandbox.session import Session

__all__ = ["find_tampering"]

# Args "A path" / "C path": prints each changed file that replaces a command on this PATH, or
# that was added in front of a command of the same name further on (the same file via a symlinked
# directory, /bin -> /usr/bin, is no shadow). The PATH is the tests' after `source
# $HOME/.local/bin/env` (astral's installer, which Terminal-Bench's scripts run): ~/.local/bin first.
SHADOW_PROBE = """\
IFS=: read -ra dirs <<< "$HOME/.local/bin:$PATH"
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
# Args: paths. Prints "differs<TAB>path" for each regular file that a package database lists with
# other contents than it has now, "unknown<TAB>path" for one it does not list at all; a file listed
# as it is now (pip's RECORD: sha256; dpkg's md5sums) is printed not at all. RECORDs are looked up
# in the file's own site folder and, for a command, in those under its prefix (console scripts).
PACKAGE_PROBE = r"""
import base64, csv, glob, hashlib, io, os, stat, sys
def read(path):  # a regular file only (a FIFO would block, a device never end), at most 64 MiB
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError:
        return None
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode) or info.st_size > 1 << 26:
        os.close(fd)
        return None
    with os.fdopen(fd, "rb") as f:
        return f.read()
def aliases(path):  # the same file under merged /usr: dpkg may list either
    found = {path}
    for top in ("/bin/", "/sbin/", "/lib/", "/lib32/", "/lib64/", "/libx32/"):
        if path.startswith(top):
            found.add("/usr" + path)
        if path.startswith("/usr" + top):
            found.add(path[4:])
    return found
wanted = set(sys.argv[1:])
names = {alias: path for path in wanted for alias in aliases(path)}
sites = set()
for path in wanted:
    parts = path.split("/")
    for marker in ("site-packages", "dist-packages"):
        if marker in parts[:-1]:
            sites.add("/".join(parts[: parts.index(marker) + 1]))
    if len(parts) > 2 and parts[-2] in ("bin", "sbin"):
        prefix = "/".join(parts[:-2]) or "/"
        sites.update(glob.glob(os.path.join(glob.escape(prefix), "lib", "python3*", "*-packages")))
sha, md5 = {}, {}
for site in sites:
    for record in glob.glob(os.path.join(glob.escape(site), "*.dist-info", "RECORD")):
        for row in csv.reader(io.StringIO((read(record) or b"").decode("utf-8", "replace"))):
            if len(row) > 1 and row[1].startswith("sha256="):
                path = names.get(os.path.normpath(os.path.join(site, row[0])))
                if path:
                    sha.setdefault(path, set()).add(row[1][7:])
for listing in glob.glob("/var/lib/dpkg/info/*.md5sums"):
    for line in (read(listing) or b"").decode("utf-8", "replace").splitlines():
        digest, _, rel = line.partition("  ")
        path = names.get("/" + rel.strip())
        if path:
            md5.setdefault(path, set()).add(digest)
for path in sorted(wanted):
    data = read(path)
    if data is None:
        continue  # removed since, or not a file: nothing that runs
    mine = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).decode().rstrip("=")
    if mine in sha.get(path, ()) or hashlib.md5(data).hexdigest() in md5.get(path, ()):
        continue
    print(("differs" if path in sha or path in md5 else "unknown") + "\t" + path)
"""
# Args: entry_points.txt files; prints each that declares a pytest plugin (bash builtins only).
PLUGIN_PROBE = """\
for f in "$@"; do
  [ -f "$f" ] || continue  # never a FIFO or a device
  n=0
  while ((n++ < 1000)) && { IFS= read -r line || [ -n "$line" ]; }; do
    line=${line//[[:space:]]/}
    if [ "$line" = "[pytest11]" ]; then echo "$f"; break; fi
  done < "$f"
done 2>/dev/null
"""
TEST_RUNNER_PACKAGES = ("_pytest", "pytest", "pluggy")
"""Top-level packages whose code decides what a test run reports."""
# Args: module names; prints those an isolated python3 (no working directory on its path) finds
# as a file or package: a module of the same name in the working directory would win over it.
INSTALLED_PROBE = r"""
import importlib.util, sys
for name in sys.argv[1:]:
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        continue
    if spec is not None and spec.origin not in ("built-in", "frozen"):
        print(name)
"""
SCORING_RUNS = re.compile(
    r"(/usr)?/bin/(bash|python3[.\d]*)|/usr/local/bin/python3[.\d]*"
    r"|(/usr)?/lib(32|64|x32)?/([^/]+/)?(ld-linux|libc\.so|libtinfo\.so|libpython3)[^/]*"
)
"""What every scoring command starts with (``/bin/bash``: termrl.sandbox.fresh), the python3 the
probes here run, and what those two load first: a change to any of them is flagged from the host
alone, since a replaced bash or python3 would answer every probe in the sandbox as it likes."""
STANDARD_LIBRARY = re.compile(
    r"((?:/usr|/usr/local)/lib/python3\.\d+)/(?!(?:site|dist)-packages/)[^\s]*\.(?:py|pyc|so)"
)
"""A Python standard library's module (group 1: the library's folder). A compiled ``.pyc`` counts
when changed, not when added: Python writes those where the image has none (the official python
images ship none), so a planted one is beyond telling from the paths alone."""
PROBE_PYTHONS = ("/usr/bin/python3", "/usr/local/bin/python3")
"""The python3 the probes run, the first of these that the agent neither added nor replaced."""
BIN_DIRS = ("bin", "sbin")
CODE_DIRS = ("/usr/lib/", "/usr/lib32/", "/usr/lib64/", "/usr/libexec/", "/usr/local/lib/")
CODE_DIRS += tuple(d.replace("/usr", "", 1) for d in CODE_DIRS[:3])  # /lib... (merged /usr or not)
SHARED_OBJECT = re.compile(r"\.so(\.\d+)*$")
NEVER_IMPORTED = frozenset({"test", "tests"})
"""Module names no test run imports from the working directory (CPython's own test suite; a test
folder, which pytest imports from the path it puts first): an agent's ``test.py`` is no shadow."""
MODULE_SUFFIX = re.compile(r"\.(py|pyc|so|(cpython|abi3|pypy)[-.\w]*\.so)$")
PROBE_ARGS_BYTES = 64 * 1024
"""Arguments of one probe at most (``_batches``)."""
CANDIDATES_MAX = 1000
"""Files each check looks at, at most (an apt-get install adds hundreds of commands, legitimately)."""


def _batches(args: list[str]) -> Iterator[str]:
    """``args`` quoted for a shell, in runs short enough for one probe each: a probe's command is a
    single argument of bash, which Linux caps at 128 KiB."""
    batch: list[str] = []
    size = 0
    for arg in map(shlex.quote, args):
        if batch and size + len(arg) > PROBE_ARGS_BYTES:
            yield " ".join(batch)
            batch, size = [], 0
        batch.append(arg)
        size += len(arg) + 1
    if batch:
        yield " ".join(batch)


def _in_site(path: str) -> tuple[str, str] | None:
    """(site folder, path inside it) for a file of a Python site-packages or dist-packages folder."""
    for name in ("/site-packages/", "/dist-packages/"):
        site, found, rel = path.partition(name)
        if found and rel:
            return site + name.rstrip("/"), rel
    return None


def _startup_hook(path: str) -> bool:
    """Files every Python (or every dynamically linked program) runs at start."""
    name = posixpath.basename(path)
    in_python = "/python" in path and ("site-packages" in path or "dist-packages" in path)
    return path == "/etc/ld.so.preload" or (
        in_python and (name in ("sitecustomize.py", "usercustomize.py") or name.endswith(".pth"))
    )


def _module_name(path: str, workdir: str) -> str | None:
    """The top-level module ``path`` makes importable from ``workdir`` (``NAME.py``, ``NAME.pyc``,
    an extension ``NAME.*.so``, a package's ``NAME/__init__.py``), else None."""
    parent, name = posixpath.split(path)
    if parent != workdir:
        parent, package = posixpath.split(parent)
        if parent != workdir or MODULE_SUFFIX.sub("", name) != "__init__":
            return None
        name = package + ".py"
    module, found = MODULE_SUFFIX.subn("", name)
    return module if found and module.isidentifier() else None


async def _shadowing_modules(session: Session, paths: list[str], python: str) -> list[str]:
    """Modules the agent added to the working directory under the name of an installed one.

    ``python3 -m pytest`` (and ``python3 -c``, ``python3 -m anything``) started
    there puts the working directory first on ``sys.path``: a ``pytest.py`` or an
    ``inspect.py`` there is what pytest imports, and a ``requests.py`` what the
    tests do. pytest's own packages count even where the sandbox's python3 has
    none (the tests may install them), other names where it has such a module.
    """
    workdir = posixpath.normpath(session.workdir)
    modules = {path: _module_name(path, workdir) for path in paths}
    modules = {path: name for path, name in modules.items() if name and name not in NEVER_IMPORTED}
    if not modules:
        return []
    names = sorted(set(modules.values()) - set(TEST_RUNNER_PACKAGES))[:CANDIDATES_MAX]
    installed = set(TEST_RUNNER_PACKAGES)
    for args in _batches(names):
        probe = await session.exec_fresh(
            f"{python} -I -c {shlex.quote(INSTALLED_PROBE)} {args}", timeout=60
        )
        if probe.exit_code == 0:  # else no python3: nothing installed for a module to shadow
            installed |= set(probe.output.split())
    return [
        f"{path}: shadows the module {name} (Python started in {workdir} imports it from there)"
        for path, name in modules.items()
        if name in installed
    ]


def _installed_code(path: str) -> bool:
    """Python source or a shared library in a system folder of code: what the tests' python3
    or pytest loads from there (an edit of ``inspect.py`` runs inside pytest)."""
    return path.startswith(CODE_DIRS) and (
        path.endswith(".py") or SHARED_OBJECT.search(posixpath.basename(path)) is not None
    )


def _test_runner_file(path: str) -> bool:
    """A file of pytest's own code (or pluggy's) in a site folder."""
    where = _in_site(path)
    return where is not None and where[1].split("/")[0] in TEST_RUNNER_PACKAGES


async def _package_status(session: Session, paths: list[str], python: str) -> dict[str, str]:
    """``PACKAGE_PROBE``'s verdict on each of ``paths`` it does not vouch for: "differs" (a package
    installed other contents) or "unknown" (no package installed it). Paths it vouches for are
    absent: pip or dpkg installed them as they are (an upgrade, a reinstall). Where the probe
    cannot run (no python3), every path is "unknown"."""
    status: dict[str, str] = {}
    for args in _batches(paths):
        probe = await session.exec_fresh(
            f"{python} -I -S -c {shlex.quote(PACKAGE_PROBE)} {args}", timeout=120
        )
        if probe.exit_code != 0:
            return dict.fromkeys(paths, "unknown")
        verdicts = (line.partition("\t") for line in probe.output.splitlines())
        status |= {path: verdict for verdict, _, path in verdicts}
    return {path: status[path] for path in paths if path in status}


async def find_tampering(session: Session) -> tuple[str, ...]:
    """Changes that run during scoring, each with why: what scoring itself runs (bash, python3)
    or the standard library changed, a command replaced, a command shadowed further up the PATH
    (``/usr/local/bin/bash``), a Python startup hook or ld.so.preload, a pytest plugin, an edit to
    installed code (pytest's own, a shared library), a module in the working directory shadowing
    an installed one.

    Read from outside the sandbox (``Session.changed_files``: podman's diff, bwrap's overlay upper
    layer); empty where the backend cannot tell. Call it with the agent's processes stopped.
    """
    changes = await session.changed_files()
    if not changes:
        return ()
    paths = sorted(changes)
    # From the host alone: what the probes below would run through, and the standard library.
    # Replaced in place only: one the agent added (an interpreter it installed) has none to replace;
    # a python3 it put first on the PATH is a shadow (below). A module added to a standard library
    # that was there already wins over every site-packages one.
    runs = [path for path in paths if changes[path] == "C" and SCORING_RUNS.fullmatch(path)]
    found = [f"{path}: scoring runs it, changed" for path in runs]
    found += [
        f"{path}: the standard library, changed"
        for path in paths
        if (match := STANDARD_LIBRARY.fullmatch(path))
        and changes.get(match[1]) != "A"
        and (changes[path] == "C" or not path.endswith(".pyc"))
    ]
    python = next((p for p in PROBE_PYTHONS if p not in changes), "python3")
    cap = CANDIDATES_MAX
    hooks = [path for path in paths if _startup_hook(path)]
    pth = [path for path in hooks if path.endswith(".pth")][:cap]
    runner = [path for path in paths if _test_runner_file(path)][:cap]
    code = [
        path
        for path in paths
        if changes[path] == "C"
        and _installed_code(path)
        and path not in runs
        and not STANDARD_LIBRARY.fullmatch(path)
    ][:cap]
    # Commands: files in a folder of the tests' PATH, or of any bin folder (a test script may add
    # one: ~/.local/bin).
    search = await session.exec_fresh('printf "%s" "$PATH"', timeout=30)
    path_dirs = set(search.output.split(":")) if search.exit_code == 0 else set()
    commands = [
        path
        for path in paths
        if path not in runs
        and (
            posixpath.dirname(path) in path_dirs
            or posixpath.basename(posixpath.dirname(path)) in BIN_DIRS
        )
    ][:cap]
    status = await _package_status(session, sorted({*pth, *runner, *code, *commands}), python)

    found += [f"{path}: a startup hook" for path in hooks if path in status or path not in pth]
    entry_points = [
        path for path in paths if path.endswith("/entry_points.txt") and _in_site(path)
    ][:cap]
    for args in _batches(entry_points):
        probe = await session.exec_fresh(f"set -- {args}\n{PLUGIN_PROBE}", timeout=60)
        found += [
            f"{path}: a pytest plugin" for path in probe.output.splitlines() if path in entry_points
        ]
    found += [f"{path}: pytest's code, edited" for path in runner if path in status]
    found += [
        f"{path}: installed code, edited"
        for path in code
        if status.get(path) == "differs" and path not in runner
    ]
    # Added only: a module of that name the image put there is the task's own (a vendored copy).
    added = [path for path in paths if changes[path] == "A"]
    found += await _shadowing_modules(session, added, python)
    # A command pip or dpkg installed as it is (an upgrade, a console script) is no tampering.
    candidates = [f"{changes[path]} {path}" for path in commands if path in status]
    for args in _batches(candidates):
        probe = await session.exec_fresh(f"set -- {args}\n{SHADOW_PROBE}", timeout=60)
        found += [line for line in probe.output.splitlines() if line.startswith("/")]
    return tuple(found)
