"""Find what a task's test scripts download at test time: uv itself and the pinned packages.

Terminal-Bench test scripts fetch their tooling when they run::

    curl -LsSf https://astral.sh/uv/0.7.13/install.sh | sh     # uv, through astral's installer
    source $HOME/.local/bin/env
    uv init && uv add pytest==8.4.1                             # or: uv pip install / pip install
    uvx --with pytest==8.4.1 --with pytest-json-ctrf==0.3.5 pytest ...   (Terminal-Bench 2.x)

Offline, those downloads must be satisfied from a kit prepared beforehand
(``termrl.tbcompat.kit``), so ``scan_scripts`` reads every shell script among
the test files (``run-tests.sh``, ``tests/*.sh``, install scripts) and
collects: the uv version the installer line names, whether uv is used at all,
and the requirements of each install command — one group per command, since
two commands may pin different versions of one package and each must resolve
on its own. ``-r FILE`` is followed when FILE is one of the task's files.
Anything that cannot be read statically (``$PKG``, a local path) is reported
as a problem, not guessed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import PurePosixPath

from packaging.requirements import InvalidRequirement, Requirement

from termrl.artifacts.tasks import TaskFile
from termrl.tbcompat.shell import simple_commands

__all__ = [
    "ScanResult",
    "install_commands",
    "python_requests",
    "scan_scripts",
    "uv_installer_version",
]

_INSTALLER = re.compile(
    r"https://(?:astral\.sh/uv/(?:(?P<v1>\d+\.\d+\.\d+)/)?install\.sh"
    r"|github\.com/astral-sh/uv/releases/download/(?P<v2>\d+\.\d+\.\d+)/uv-installer\.sh)"
)
_USES_UV = re.compile(r"(?:^|[\s;&|(`])(?:uv|uvx)\s", re.MULTILINE)

# Options whose value is the next word (so it is not taken for a requirement).
_VALUE_OPTIONS = frozenset(
    {
        "-c",
        "--constraint",
        "-e",
        "--editable",
        "-i",
        "--index-url",
        "--extra-index-url",
        "-f",
        "--find-links",
        "-t",
        "--target",
        "--prefix",
        "--root",
        "--python",
        "-p",
        "--platform",
        "--python-version",
        "--implementation",
        "--abi",
        "--upgrade-strategy",
        "--src",
        "--cache-dir",
        "--log",
        "--progress-bar",
        "--report",
        "--timeout",
        "--retries",
        "--proxy",
        "--cert",
        "--client-cert",
        "--trusted-host",
        "--global-option",
        "--config-settings",
        "-C",
        "--no-binary",
        "--only-binary",
        "--group",
        "--optional",
        "--extra",
        "--index",
        "--default-index",
        "--tag",
        "--branch",
        "--rev",
        "--package",
        "--script",
        "--bounds",
        "--directory",
        "--project",
        "--exclude-newer",
        "--index-strategy",
        "--keyring-provider",
        "--resolution",
        "--prerelease",
        "--link-mode",
        "--python-platform",
        "--torch-backend",
        "--config-file",
        "--color",
        "--env-file",
    }
)
_REQUIREMENT_FILE_OPTIONS = frozenset(
    {"-r", "--requirement", "--requirements", "--with-requirements"}
)
_WITH_OPTIONS = frozenset({"-w", "--with", "--from", "--with-editable"})
_PREFIXES = frozenset({"sudo", "exec", "time", "command", "nohup", "env"})


@dataclass
class ScanResult:
    """What the test scripts fetch at test time."""

    uv_version: str | None = None
    """The version in the uv installer line (None: no installer line, or an unversioned one)."""
    uses_uv: bool = False
    """Some script runs ``uv``/``uvx`` (or installs it)."""
    groups: list[list[str]] = field(default_factory=list)
    """The requirements of each install command, in script order, duplicates removed."""
    found_in: list[str] = field(default_factory=list)
    """The files that install anything, in path order."""
    problems: list[str] = field(default_factory=list)
    """Requirements that cannot be read without running the script."""
    pythons: list[str] = field(default_factory=list)
    """The interpreters uv is asked for (``uvx --python 3.12``, ``uv venv -p 3.11``), in order."""


def uv_installer_version(text: str) -> tuple[bool, str | None]:
    """(whether ``text`` runs astral's uv installer, the version its URL names)."""
    match = _INSTALLER.search(text)
    return (True, match.group("v1") or match.group("v2")) if match else (False, None)


def install_commands(text: str) -> list[tuple[str, list[str]]]:
    """Each install command in a shell script as (kind, its arguments after the verb).

    kinds: ``pip`` (pip/pip3/python -m pip install, uv pip install), ``uv-add``,
    ``uv-with`` (uvx / uv tool run / uv run: only the ``--with``-style options count),
    ``uvx`` (uvx / uv tool run / uv tool install: the tool itself counts too).
    """
    found = (_classify(words) for words in simple_commands(text))
    return [command for command in found if command]


def python_requests(text: str) -> list[str]:
    """The ``--python``/``-p`` values of the uv and uvx commands in a shell script, in order."""
    found: list[str] = []
    for words in simple_commands(text):
        while words and (words[0] in _PREFIXES or re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", words[0])):
            words = words[1:]
        if not words or PurePosixPath(words[0]).name not in ("uv", "uvx"):
            continue
        rest = iter(words[1:])
        for word in rest:
            option, eq, inline = word.partition("=")
            if option in ("--python", "-p"):
                value = inline if eq else next(rest, "")
                if value and value not in found:
                    found.append(value)
    return found


def _classify(words: list[str]) -> tuple[str, list[str]] | None:
    while words and (words[0] in _PREFIXES or re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", words[0])):
        words = words[1:]
    if not words:
        return None
    head = PurePosixPath(words[0]).name
    rest = words[1:]
    if re.fullmatch(r"python(\d(\.\d+)?)?", head) and rest[:2] == ["-m", "pip"]:
        head, rest = "pip", rest[2:]
    if re.fullmatch(r"pip(\d(\.\d+)?)?", head) and rest[:1] == ["install"]:
        return "pip", rest[1:]
    if head == "uvx":
        return "uvx", rest
    if head != "uv" or not rest:
        return None
    verb = rest[:2]
    if verb == ["pip", "install"]:
        return "pip", rest[2:]
    if verb in (["tool", "run"], ["tool", "install"]):
        return "uvx", rest[2:]
    if rest[0] == "add":
        return "uv-add", rest[1:]
    if rest[0] == "run":
        return "uv-with", rest[1:]
    return None


def _requirements(
    kind: str, args: list[str], files: dict[str, str], where: str, problems: list[str]
) -> list[str]:
    """The requirement strings of one command's arguments."""
    found: list[str] = []
    positional_taken = False
    words = iter(args)
    for word in words:
        option, _, inline = word.partition("=") if word.startswith("--") else (word, "", "")
        if option in _REQUIREMENT_FILE_OPTIONS:
            found += _requirement_file(inline or next(words, ""), files, where, problems)
        elif option in _WITH_OPTIONS:
            value = inline or next(words, "")
            for part in value.split(","):
                found += _requirement(part, where, problems)
        elif word.startswith("-"):
            if option in _VALUE_OPTIONS and not inline:
                next(words, None)
        elif kind == "uv-with":
            break  # `uv run [options] COMMAND ...`: the rest is the command
        elif kind == "uvx":
            if not positional_taken:  # the tool, as `name` or `name@version`
                found += _requirement(
                    word.replace("@", "==", 1) if "@" in word else word, where, problems
                )
                positional_taken = True
            else:
                break
        else:
            found += _requirement(word, where, problems)
    return found


def _requirement(word: str, where: str, problems: list[str]) -> list[str]:
    word = word.strip()
    if not word:
        return []
    if (
        "$" in word
        or "/" in word
        or word.startswith(".")
        or word.endswith((".whl", ".tar.gz", ".zip"))
    ):
        problems.append(f"{where}: cannot prepare {word!r} offline (not a plain requirement)")
        return []
    try:
        Requirement(word)
    except InvalidRequirement:
        problems.append(f"{where}: {word!r} is not a requirement")
        return []
    return [word]


def _requirement_file(
    path: str, files: dict[str, str], where: str, problems: list[str]
) -> list[str]:
    name = (
        PurePosixPath(path.replace("$TEST_DIR/", "").replace("/tests/", "")).as_posix().lstrip("./")
    )
    text = files.get(name) or files.get(f"tests/{name}")
    if text is None:
        problems.append(f"{where}: requirements file {path!r} is not among the task's test files")
        return []
    found: list[str] = []
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if line and not line.startswith("-"):
            found += _requirement(line, f"{where} -r {path}", problems)
    return found


def scan_scripts(files: list[TaskFile]) -> ScanResult:
    """Scan every shell script among ``files`` (test files: run-tests.sh, tests/*.sh, ...)."""
    texts: dict[str, str] = {}
    for f in files:
        try:
            texts[f.path] = f.data.decode()
        except UnicodeDecodeError:
            continue
    result = ScanResult()
    for path in sorted(p for p in texts if p.endswith(".sh")):
        text = texts[path]
        installs, version = uv_installer_version(text)
        result.uses_uv |= installs or bool(_USES_UV.search(text))
        result.pythons += [p for p in python_requests(text) if p not in result.pythons]
        if version and not result.uv_version:
            result.uv_version = version
        installs_packages = False
        for kind, args in install_commands(text):
            group = list(dict.fromkeys(_requirements(kind, args, texts, path, result.problems)))
            installs_packages |= bool(group)
            if group and group not in result.groups:
                result.groups.append(group)
        if installs_packages or installs:
            result.found_in.append(path)
    return result
