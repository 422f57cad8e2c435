"""A fresh process in a sandbox, outside the agent's shell: what scoring runs through.

The persistent shell (``termrl.sandbox.shell``) is the agent's: its functions,
aliases, exported variables (``BASH_ENV``, ``PATH``) and traps apply to every
command in it, and its end-of-command marker is a string any process in the
sandbox can read from ``/proc`` and print. A fresh process shares none of
that. Each backend starts it through its own channel (``podman exec``, a new
process entering a bwrap sandbox's namespaces, a new Kubernetes exec stream)
with the sandbox's limits, and runs

    env -i <the sandbox's configured environment> <caller's variables>
        /bin/bash --noprofile --norc -c 'cd -- WORKDIR && exec /bin/bash --noprofile --norc -c COMMAND'

so only the environment the sandbox was started with (image ENV, spec env)
and what the caller passes reach the command; ``PATH`` is the image's, or
``DEFAULT_PATH`` when the image sets none. Its exit status is the process's
own, not a marker printed into the output.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import platform
import signal
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from termrl.errors import SandboxDied
from termrl.sandbox import procs
from termrl.sandbox.reaping import ended_on_error
from termrl.sandbox.shell import OutputCap

__all__ = [
    "DEFAULT_PATH",
    "DRAIN_SEC",
    "ENTER_SCRIPT",
    "IDS_OF_COMMAND",
    "PID_LINE_WAIT_SEC",
    "SYSTEM_PATHS",
    "EnterableSandbox",
    "EntryPoint",
    "Frozen",
    "UnknownUser",
    "collect",
    "enter",
    "exec_entering",
    "fresh_argv",
    "fresh_env",
    "late_pid",
    "parse_ids",
    "pid_line_argv",
    "split_pid_line",
    "user_ids",
]

ENTER_SCRIPT = str(Path(__file__).with_name("enter.py"))
"""Run by the host's Python to start a fresh process inside a sandbox it enters (bwrap, rootful podman)."""
UNPIN_SEC = 5.0
"""How long ``enter.py`` gets to remove its pins after its command was killed at the timeout."""

DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
"""Docker's default PATH, for images whose configuration sets none."""

PID_LINE_WAIT_SEC = 30.0
"""How long a fresh process's pid line is still awaited when its caller stops waiting first (to kill it)."""

DRAIN_SEC = 2.0
"""After the command exits, how long output still in flight is read (a background child may hold the pipe)."""

# $1: the directory to run in; $2: the command. The second bash gets no positional parameters.
RUN_IN = 'cd -- "$1" && exec /bin/bash --noprofile --norc -c "$2"'


def fresh_env(base: dict[str, str], extra: dict[str, str] | None) -> dict[str, str]:
    """The fresh process's whole environment: ``base`` (the sandbox's configuration), then ``extra``."""
    env = {"PATH": DEFAULT_PATH, **base, **(extra or {})}
    for key in env:
        if not key or "=" in key or "\0" in key + env[key]:
            raise ValueError(f"not an environment variable: {key!r}")
    return env


# $TERMRL_USER: a user name or uid. Prints "uid gid group..." (a uid with no passwd entry: itself, its gid the same).
IDS_OF_COMMAND = """u=$TERMRL_USER
if id -u -- "$u" >/dev/null 2>&1; then echo "$(id -u -- "$u") $(id -g -- "$u") $(id -G -- "$u")"
elif [ -n "$u" ] && [ -z "${u//[0-9]/}" ]; then echo "$u $u"
else echo "no such user: $u" >&2; exit 3; fi"""
"""How ``enter`` learns a user's ids: asked inside the sandbox (its /etc/passwd and /etc/group, read by
the sandbox's own ``id`` with the sandbox's privileges), never parsed by the host."""


def parse_ids(output: str) -> dict[str, object] | None:
    """``IDS_OF``'s line as ``enter``'s user override (uid, gid, groups); None if it is not one."""
    fields = output.split()
    if len(fields) < 2 or not all(f.isdigit() for f in fields):
        return None
    return {
        "uid": int(fields[0]),
        "gid": int(fields[1]),
        "groups": sorted({int(f) for f in fields[2:]}),
    }


class UnknownUser(Exception):
    """``user_ids`` found no such user in the sandbox; ``str(exc)`` is the line a caller reports."""


async def user_ids(exec_fresh: Callable[..., Awaitable[tuple]], user: str) -> dict[str, object]:
    """The ids of ``user`` as the sandbox's own ``id`` reports them (``IDS_OF_COMMAND`` run through
    the backend's plain ``exec_fresh``): what a backend that enters the sandbox itself gives
    ``enter`` as the user override. Raises ``UnknownUser`` when the sandbox has no such user."""
    out, code, _, _ = await exec_fresh(
        IDS_OF_COMMAND, env={"TERMRL_USER": user}, workdir="/", timeout=30, output_limit=4096
    )
    ids = parse_ids(out) if code == 0 else None
    if ids is None:
        raise UnknownUser(f"termrl: cannot run as user {user!r}: {out.strip()[-300:]}\n")
    return ids


def fresh_argv(command: str, workdir: str) -> list[str]:
    """The bash that runs ``command`` in ``workdir``, reading no profile or rc file."""
    return ["/bin/bash", "--noprofile", "--norc", "-c", RUN_IN, "termrl-fresh", workdir, command]


def pid_line_argv(mark: str, argv: list[str]) -> list[str]:
    """``argv`` behind a bash that first prints ``<mark> <its pid>`` on a line, then becomes ``argv``.

    For backends that start the process through a CLI or API (podman exec,
    Kubernetes exec) and learn its pid only from what it prints: how a
    timeout finds what to kill. ``exec`` keeps the pid.
    """
    return [
        "/bin/bash",
        "--noprofile",
        "--norc",
        "-c",
        'printf "%s %d\\n" "$1" "$$"; shift; exec "$@"',
        "termrl-fresh",
        mark,
        *argv,
    ]


def split_pid_line(mark: str, head: bytes) -> tuple[int | None, bytes]:
    """(pid, the rest) when ``head`` starts with the pid line of ``pid_line_argv``; else (None, head)."""
    prefix = f"{mark} ".encode()
    line, newline, rest = head.partition(b"\n")
    if newline and line.startswith(prefix) and line[len(prefix) :].isdigit():
        return int(line[len(prefix) :]), rest
    return None, head


async def late_pid(
    read: Callable[[], Awaitable[bytes]], mark: str, pending: bytes, within: float
) -> int | None:
    """The pid in the pid line of ``pid_line_argv``, for a caller that stopped waiting before the
    line came; None when it does not come within ``within`` seconds.

    ``pending`` is what came of the output so far; ``read`` gives the next chunk (b"" at its
    end). The wrapper has printed the line and may have become the command already
    (``exec``), whose arguments no longer carry the mark: the line is the only way to find it.
    """
    give_up = time.monotonic() + within
    while b"\n" not in pending and len(pending) < 256:
        try:
            chunk = await asyncio.wait_for(read(), max(give_up - time.monotonic(), 0))
        except TimeoutError:
            return None
        if not chunk:
            return None
        pending += chunk
    return split_pid_line(mark, pending)[0]


async def collect(
    process: asyncio.subprocess.Process,
    stdout: asyncio.StreamReader,
    timeout: float,
    output_limit: int,
    kill: Callable[[], None],
    *,
    head: bytes = b"",
) -> tuple[str, int | None, bool, bool]:
    """Read ``stdout`` (the process's output) until the process exits; at ``timeout`` call ``kill``
    (which must end it).

    ``head`` is output the caller read already. Returns (output, exit status
    or None when timed out, timed_out, truncated).
    """
    cap = OutputCap(output_limit)
    cap.add(head)

    async def pump() -> None:
        while chunk := await stdout.read(65536):
            cap.add(chunk)

    reader = asyncio.ensure_future(pump())
    timed_out = False
    try:
        async with ended_on_error(process, kill):
            try:
                await asyncio.wait_for(process.wait(), timeout)
            except TimeoutError:
                timed_out = True
                kill()
                await process.wait()
    finally:
        # What the command printed last may still be in the pipe; a background child that
        # inherited the pipe must not hold the caller past DRAIN_SEC.
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(reader), DRAIN_SEC)
        reader.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await reader
    return cap.text(), None if timed_out else process.returncode, timed_out, cap.truncated


@contextlib.asynccontextmanager
async def output_pipe() -> AsyncIterator[tuple[int, asyncio.StreamReader]]:
    """A pipe for a child's output: (the write end, for the child; a stream of the read end).

    Not asyncio's own PIPE: on Python 3.11 a process's ``wait()`` returns only
    once every holder of its pipes has closed them, so a background child the
    command left running (``server &``) would hold the caller until its
    timeout. The caller closes the write end once the child has started (in a
    ``finally``: it is the caller's); the read end is closed on leaving, whoever
    still holds the pipe.
    """
    read_fd, write_fd = os.pipe()
    pipe = open(read_fd, "rb", buffering=0)  # noqa: SIM115 - the transport owns and closes it
    reader = asyncio.StreamReader()
    try:
        transport, _ = await asyncio.get_running_loop().connect_read_pipe(
            lambda: asyncio.StreamReaderProtocol(reader), pipe
        )
    except BaseException:
        pipe.close()
        os.close(write_fd)
        raise
    try:
        yield write_fd, reader
    finally:
        transport.close()


async def _start_helper(
    config: dict[str, object], stdin: int, stdout: int = asyncio.subprocess.PIPE
) -> asyncio.subprocess.Process:
    """``enter.py`` with ``config``, isolated from the caller's Python (``-I -S``, empty environment)."""
    return await asyncio.create_subprocess_exec(
        sys.executable,
        "-I",
        "-S",
        ENTER_SCRIPT,
        json.dumps(config),
        stdin=stdin,
        stdout=stdout,
        stderr=asyncio.subprocess.STDOUT,
        env={},
        start_new_session=True,
    )


async def enter(
    target: int,
    *,
    cgroups: list[str],
    seccomp: bytes,
    env: dict[str, str],
    argv: list[str],
    binds: dict[str, tuple[str, bool]] | None,
    timeout: float,
    output_limit: int,
    user: dict[str, object] | None = None,
    unfreeze: tuple[str, ...] = (),
) -> tuple[str, int | None, bool, bool]:
    """Run ``argv`` in the sandbox of host process ``target`` through ``enter.py`` (its namespaces,
        root, credentials, these cgroups and seccomp filter; ``binds``: sandbox path → (host directory,
        read-only), mounted for this process alone, in a user namespace of its own; ``user``: ``parse_ids``'s ids
    instead of the target's, with no capabilities unless uid 0). Exit status 125/126: the helper failed before
    the command ran."""
    config = {
        "target": target,
        "cgroups": cgroups,
        "seccomp": seccomp.hex(),
        "machine": platform.machine(),
        "env": env,
        "argv": argv,
        "binds": [[host, path, readonly] for path, (host, readonly) in (binds or {}).items()],
        "user": user,
        "unfreeze": list(unfreeze) if binds else [],
    }
    async with output_pipe() as (write_fd, stdout):
        try:
            process = await _start_helper(config, stdin=asyncio.subprocess.DEVNULL, stdout=write_fd)
        finally:  # the helper holds its own copy: EOF once it and what it started are done
            os.close(write_fd)
        return await collect(process, stdout, timeout, output_limit, _enter_kill(process))


@dataclass(frozen=True)
class EntryPoint:
    """Where ``enter.py`` enters a sandbox, and what a process started there gets."""

    target: int
    """A host process inside the sandbox: its namespaces, root and credentials are taken."""
    cgroups: list[str]
    seccomp: bytes
    env: dict[str, str]
    """The sandbox's configured environment (image ENV, spec env)."""


class EnterableSandbox(Protocol):
    """A sandbox whose fresh processes the host starts itself with ``enter.py`` (bwrap, and
    rootful podman when a process needs binds of its own)."""

    frozen: Frozen | None

    async def exec_fresh(
        self, command: str, **options: Any
    ) -> tuple[str, int | None, bool, bool]: ...
    async def alive(self) -> bool: ...
    async def entry_point(self) -> EntryPoint: ...


async def exec_entering(
    sandbox: EnterableSandbox,
    command: str,
    *,
    env: dict[str, str] | None,
    workdir: str,
    timeout: float,
    output_limit: int,
    binds: dict[str, tuple[str, bool]] | None,
    user: str | None,
    gone: str,
) -> tuple[str, int | None, bool, bool]:
    """``exec_fresh`` through ``enter``: ``user``'s ids asked inside the sandbox first (an
    unknown user is exit status 126 with the reason as output), then its entry point; frozen
    system folders writable again for this process. A 125/126 exit status (the helper failed
    before the command ran) from a sandbox that is no longer alive raises ``SandboxDied(gone)``."""
    try:
        ids = None if user is None else await user_ids(sandbox.exec_fresh, user)
    except UnknownUser as exc:
        return str(exc), 126, False, False
    entry = await sandbox.entry_point()
    result = await enter(
        entry.target,
        cgroups=entry.cgroups,
        seccomp=entry.seccomp,
        env=fresh_env(entry.env, env),
        argv=fresh_argv(command, workdir),
        binds=binds,
        timeout=timeout,
        output_limit=output_limit,
        user=ids,
        unfreeze=sandbox.frozen.names if sandbox.frozen else (),
    )
    if result[1] in (125, 126) and not await sandbox.alive():
        raise SandboxDied(gone)
    return result


def _enter_kill(process: asyncio.subprocess.Process) -> Callable[[], None]:
    """How ``collect`` ends an ``enter.py`` helper and what it started."""

    def kill() -> None:
        # The helper's children first: the helper then removes its pins from the sandbox's mount
        # namespace (enter.py) and exits; it is killed too if it has not within UNPIN_SEC.
        for pid in procs.descendants(process.pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)

        def kill_helper() -> None:
            if process.returncode is None:
                procs.kill_tree(process.pid)

        asyncio.get_running_loop().call_later(UNPIN_SEC, kill_helper)

    return kill


SYSTEM_PATHS = ("usr", "etc", "bin", "sbin", "lib", "lib32", "lib64", "libx32")
"""The top-level folders scoring freezes: what the tests run (bash, python, pytest, their libraries)."""


class Frozen:
    """System folders held read-only in a sandbox by an ``enter.py`` helper, until ``thaw``.

    While the agent's processes are stopped for scoring, its services keep
    running; frozen, they cannot replace what the tests run between the
    tampering check and the tests' end. ``exec_fresh`` with binds (the tests)
    gets ``names`` writable again in its own mount namespace: the tests may
    install what they need.
    """

    def __init__(self, process: asyncio.subprocess.Process, names: tuple[str, ...]) -> None:
        self.process, self.names = process, names

    @classmethod
    async def start(cls, target: int, names: tuple[str, ...] = SYSTEM_PATHS) -> Frozen:
        """Freeze ``names`` in the sandbox of host process ``target``; OSError when it cannot."""
        config = {"target": target, "freeze": list(names)}
        process = await _start_helper(config, stdin=asyncio.subprocess.PIPE)
        if process.stdout is None:
            raise ValueError("no stdout pipe")
        line = b""
        async with ended_on_error(process, lambda: procs.kill_tree(process.pid)):
            try:
                line = await asyncio.wait_for(process.stdout.readline(), FREEZE_SEC)
                frozen = tuple(json.loads(line))
            except (TimeoutError, ValueError) as exc:
                rest = b""
                with contextlib.suppress(TimeoutError):
                    rest = await asyncio.wait_for(process.stdout.read(), 1)
                raise OSError(
                    f"cannot freeze {', '.join(names)}: {(line + rest).decode(errors='replace')}"
                ) from exc
        return cls(process, frozen)

    async def thaw(self) -> None:
        """Undo the freeze (the helper detaches its mounts when its stdin closes)."""
        if self.process.stdin is not None:
            self.process.stdin.close()
        async with ended_on_error(self.process, lambda: procs.kill_tree(self.process.pid)):
            try:
                await asyncio.wait_for(self.process.wait(), FREEZE_SEC)
            except TimeoutError:
                procs.kill_tree(self.process.pid)
                await self.process.wait()


FREEZE_SEC = 30.0
"""How long freezing or thawing may take before the helper is given up on."""
