"""The persistent shell inside a sandbox and its sentinel protocol.

Every backend starts one long-lived process in the sandbox, ``SUPERVISOR``,
with its stdin and stdout connected to a ``Channel``. The supervisor runs an
inner ``bash`` that reads commands from the same stdin (bash reads a pipe one
byte at a time, so nothing meant for a later shell is swallowed) and starts a
fresh one whenever it exits, so ``exit`` or ``set -e`` in an agent's command
cost the shell's variables, never the sandbox:

    host ──stdin──►  supervisor (bash -c) ─► inner bash ─► eval '<command>' </dev/null
         ◄─stdout──  output…  \\n__TERMRL_<token> <status> <job pids, comma-separated> <cwd>\\n

One exec writes a single line: ``eval`` of the quoted command (parse errors
stay inside eval; cd/export/background jobs persist because eval runs in the
shell itself; stdin is /dev/null so a command cannot eat the protocol), then a
``printf`` of a per-shell random token with ``$?``, the shell's children at that
moment (its background jobs, from ``/proc/$$/task/$$/children``, or ``jobs -p``
where the kernel has no such file) and ``$PWD``. The marker's steps run with
stderr, where ``set -x`` traces, sent to /dev/null, and the token's two halves
are separate printf arguments, so tracing never prints it. Output is everything
before the marker, capped by ``OutputCap``.

A command past its timeout is stopped by what it is, its processes, not by the
signals they ignore (``termrl.sandbox.interrupt``): SIGINT to them, then SIGKILL
to them and everything they started; the background jobs of earlier commands
and the shell are left alone, so variables and jobs survive. Only a shell that
is itself stuck (a builtin loop, a ``wait`` on jobs) is killed, and a new one
started in the last known working directory; the output of the command that
timed out then ends with ``RESTART_NOTICE``, on every backend.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable

from termrl.errors import ExecTimeout, SandboxDied
from termrl.sandbox.interrupt import KILL_HELPER, HelperReport, StuckShell

__all__ = [
    "Channel",
    "DEFAULT_SIGINT",
    "KILL_HELPER",
    "OutputCap",
    "ProcessChannel",
    "RESTART_NOTICE",
    "Shell",
    "SignalHook",
    "SUPERVISOR",
    "shell_quote",
]

# $1 is the token. pid 1 of a container may be this script: it reaps orphans.
# Its own stderr is dropped ("Killed" notices); each inner shell sends its
# stderr to stdout.
SUPERVISOR = r"""
exec 2>/dev/null
trap 'exit 0' TERM
while :; do
  bash --noprofile --norc
  printf '\n%s%s %d\n' __TERMRL_EXIT_ "$1" "$?"
  read -r _ || exit 0
done
"""

DEFAULT_SIGINT = ("env", "--default-signal=INT")
"""Prefix of a command that starts a supervisor on this host. A caller that ignores SIGINT (a
background job of a script, work started under nohup) passes that on to every child, and a
non-interactive bash cannot undo a signal ignored on entry: a timeout's SIGINT would then reach
no command, and none could clean up (a Python script's ``finally``) before the SIGKILL."""

RESTART_NOTICE = (
    "[the shell exited; a new one started in {cwd}: "
    "shell variables, functions and background jobs are gone]\n"
)

SignalHook = Callable[[int, str, str], Awaitable[str]]
"""signal(shell_pid, "INT:MS" | "KILL", "cmd PID..." | "all"): run ``KILL_HELPER`` where the shell's
/proc is, with the shell's pid as seen there; returns what the helper printed."""


def shell_quote(text: str) -> str:
    """Single-quote ``text`` for bash (works across newlines)."""
    return "'" + text.replace("'", "'\\''") + "'"


class Channel(ABC):
    """A byte stream to the supervisor's stdin/stdout."""

    @abstractmethod
    async def write(self, data: bytes) -> None: ...

    @abstractmethod
    async def read(self) -> bytes:
        """Some bytes; b"" once the stream has ended."""

    @abstractmethod
    async def close(self) -> None: ...


class ProcessChannel(Channel):
    """A channel over a local process (``podman run -i``, ``bwrap``) with piped stdio."""

    def __init__(self, process: asyncio.subprocess.Process):
        if process.stdin is None or process.stdout is None:
            raise ValueError("the process needs piped stdin and stdout")
        self.process = process
        self._stdin = process.stdin
        self._stdout = process.stdout

    async def write(self, data: bytes) -> None:
        try:
            self._stdin.write(data)
            await self._stdin.drain()
        except (BrokenPipeError, ConnectionResetError) as e:
            raise SandboxDied("the sandbox shell's stdin is closed") from e

    async def read(self) -> bytes:
        return await self._stdout.read(65536)

    async def close(self) -> None:
        if self.process.returncode is None:
            try:
                self._stdin.close()
                await asyncio.wait_for(self.process.wait(), 5)
            except (TimeoutError, BrokenPipeError, ConnectionResetError):
                self.process.kill()
                await self.process.wait()


class OutputCap:
    """Keeps the first and last ``limit // 2`` bytes of a stream and counts the rest."""

    def __init__(self, limit: int):
        self.half = max(limit // 2, 1)
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0

    def add(self, data: bytes) -> None:
        self.total += len(data)
        room = self.half - len(self.head)
        if room > 0:
            self.head += data[:room]
            data = data[room:]
        if data:
            self.tail += data
            if len(self.tail) > 2 * self.half:  # trim rarely: amortised O(n)
                del self.tail[: len(self.tail) - self.half]

    @property
    def truncated(self) -> bool:
        return self.total > len(self.head) + self.half

    def text(self) -> str:
        if not self.truncated:
            return (self.head + self.tail).decode(errors="replace")
        tail = self.tail[-self.half :]
        dropped = self.total - len(self.head) - len(tail)
        marker = f"\n[... {dropped} bytes of output truncated ...]\n".encode()
        return (self.head + marker + tail).decode(errors="replace")


class Shell:
    """The exec protocol over one supervisor channel. One command at a time."""

    GRACE_SEC = 1.0
    """After SIGINT, how long a process that handles it gets to clean up before SIGKILL."""
    POLL_SEC = 0.1
    """How long to listen for the marker between two SIGKILL rounds."""
    STUCK_CPU_SEC = 0.2
    """CPU the shell itself may use after the SIGINT before it counts as stuck (see
    ``StuckShell``): a shell that reports its command's end needs microseconds, a builtin loop
    burns it all."""
    STUCK_RESPAWNS = 3
    """SIGKILL rounds that may find processes the shell started after being interrupted (a loop
    of commands) before the shell counts as stuck."""
    BACKSTOP_SEC = 30.0
    """The shell is killed anyway when it has neither reported nor shown it is stuck this long
    after the timeout: it makes no progress at all (stopped, blocked in the kernel)."""
    READY_TIMEOUT_SEC = 30.0

    def __init__(self, channel: Channel, token: str, signal: SignalHook, *, output_limit: int):
        self.channel = channel
        self.token = token
        self.signal = signal
        self.output_limit = output_limit
        self.pid: int | None = None
        self.start_dir: str = "/"
        self.cwd: str | None = None
        self.restarts = 0
        self.jobs = ""
        """The shell's children when it last reported, its background jobs: a timeout spares them."""
        self._buf = bytearray()
        self._lock = asyncio.Lock()
        tok = token.encode()
        self._done = b"\n__TERMRL_" + tok + b" "
        self._exit = b"\n__TERMRL_EXIT_" + tok + b" "
        self._ready = b"__TERMRL_READY_" + tok + b" "

    @staticmethod
    def new_token() -> str:
        return secrets.token_hex(12)

    async def start(self, workdir: str | None, setup: str = "") -> None:
        """Initialise a fresh inner shell and wait for its pid.

        ``setup`` is a shell line run first (e.g. installing the host CAs).
        Raises ``SandboxDied`` (with what the sandbox printed as ``log_tail``)
        when the shell never reports ready.
        """
        # Docker creates a missing WORKDIR; a vanished cwd after a restart is not fatal.
        q = shell_quote(workdir) if workdir else ""
        cd = f"{{ mkdir -p -- {q}; cd -- {q}; }} 2>/dev/null; " if workdir else ""
        await self.channel.write(
            f'exec 2>&1; {setup}{cd}printf \'%s%s %d %s\\n\' __TERMRL_READY_ {self.token} "$$" "$PWD"\n'.encode()
        )
        seen = OutputCap(4096)
        try:
            found = await self._read_until(
                [self._ready], time.monotonic() + self.READY_TIMEOUT_SEC, seen
            )
        except SandboxDied as e:
            raise SandboxDied(str(e), log_tail=seen.text()) from e
        if found is None:
            raise SandboxDied("the sandbox shell did not start in time", log_tail=seen.text())
        pid, _, start_dir = found[1].partition(" ")
        self.pid = int(pid)
        self.jobs = ""
        if self.restarts == 0:
            # The image's WORKDIR (or the spec's): where tests run, whatever the agent cd'ed to.
            self.start_dir = start_dir.strip() or "/"

    async def exec(self, command: str, timeout: float) -> tuple[str, int | None, bool, bool]:
        """Run ``command``; returns (output, exit status or None, timed_out, truncated)."""
        async with self._lock:
            cap = OutputCap(self.output_limit)
            await self.channel.write(self._command_line(command))
            found = await self._read_until(
                [self._done, self._exit], time.monotonic() + timeout, cap
            )
            timed_out = found is None
            if found is None:
                found = await self._interrupt(cap)
            needle, rest = found
            status = int(rest.split(" ", 1)[0])
            output = cap.text()
            if needle == self._done:
                _, jobs, cwd = (rest.split(" ", 2) + ["", ""])[:3]
                self.jobs = " ".join(pid for pid in jobs.split(",") if pid.isdigit())
                self.cwd = cwd or self.cwd
            else:  # the inner shell exited (exit, set -e, killed): start another one
                await self._restart()
                # Tell the agent: its next command runs without the variables it set.
                sep = "" if not output or output.endswith("\n") else "\n"
                output += sep + RESTART_NOTICE.format(cwd=self.cwd or self.start_dir)
            return output, None if timed_out else status, timed_out, cap.truncated

    def _command_line(self, command: str) -> bytes:
        """``command``, then the marker with its status, the shell's children (its background jobs,
        what the next command's timeout leaves alone) and its directory. Inside ``{ } 2>/dev/null``
        `set -x` traces none of the marker's steps into the output."""
        children = "/proc/$$/task/$$/children"  # or `jobs -p`, where the kernel has no such file
        return (
            f"eval {shell_quote(command)} </dev/null; {{ __termrl_status=$? __termrl_jobs=; "
            f"if [ -r {children} ]; then read -r -d '' __termrl_jobs < {children} || :; "
            f"else __termrl_jobs=$(jobs -p); fi; __termrl_jobs=${{__termrl_jobs//[!0-9]/,}}; "
            f"printf '\\n%s%s %d %s %s\\n' __TERMRL_ {self.token} "
            f'"$__termrl_status" "${{__termrl_jobs:--}}" "$PWD"; }} 2>/dev/null\n'
        ).encode()

    async def _interrupt(self, cap: OutputCap) -> tuple[bytes, str]:
        """Stop the command that timed out (see ``termrl.sandbox.interrupt``); the marker it ends on."""
        needles = [self._done, self._exit]
        command = f"cmd {self.jobs}".strip()
        watch = StuckShell(self.STUCK_CPU_SEC, self.STUCK_RESPAWNS)
        give_up = time.monotonic() + self.BACKSTOP_SEC
        # As after a Ctrl-C, what handles SIGINT may clean up for GRACE_SEC before its SIGKILL.
        report = await self._signal(f"INT:{round(self.GRACE_SEC * 1000)}", command)
        watch.stuck(report)  # the first report: what later ones are compared with
        while True:
            found = await self._read_until(needles, time.monotonic() + self.POLL_SEC, cap)
            if found is not None:
                return found
            if watch.stuck(await self._signal("KILL", command)) or time.monotonic() > give_up:
                return await self._kill_shell(cap)

    async def _signal(self, sig: str, mode: str) -> HelperReport | None:
        if self.pid is None:
            raise SandboxDied("the sandbox shell has no pid")
        try:
            return HelperReport.parse(await self.signal(self.pid, sig, mode))
        except SandboxDied:
            return None  # the shell is gone: the channel says whether the sandbox is too

    async def _kill_shell(self, cap: OutputCap) -> tuple[bytes, str]:
        """Kill the stuck shell with everything it started; the supervisor's line that it exited."""
        await self._signal("KILL", "all")
        deadline = time.monotonic() + self.READY_TIMEOUT_SEC
        while True:
            found = await self._read_until([self._done, self._exit], deadline, cap)
            if found is None:
                raise ExecTimeout(
                    "the command ran past its timeout and the shell could not be recovered"
                )
            if found[0] == self._exit:  # a marker printed as it was killed: its exit line follows
                return found

    async def _restart(self) -> None:
        self.restarts += 1
        await self.channel.write(b"\n")  # the supervisor's `read` starts the next shell
        await self.start(self.cwd)

    async def _read_until(
        self, needles: list[bytes], deadline: float, sink: OutputCap
    ) -> tuple[bytes, str] | None:
        """Feed output to ``sink`` until a needle and its line arrive: (needle, rest of line).

        None at the deadline; raises ``SandboxDied`` when the stream ends.
        """
        keep = max(len(n) for n in needles)
        while True:
            best = None
            for needle in needles:
                at = self._buf.find(needle)
                if at >= 0 and (best is None or at < best[0]):
                    best = (at, needle)
            if best is not None:
                at, needle = best
                end = self._buf.find(b"\n", at + len(needle))
                if end >= 0:
                    sink.add(bytes(self._buf[:at]))
                    rest = self._buf[at + len(needle) : end].decode(errors="replace")
                    del self._buf[: end + 1]
                    return needle, rest
            elif len(self._buf) > keep:
                sink.add(bytes(self._buf[:-keep]))
                del self._buf[:-keep]
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return None
            try:
                data = await asyncio.wait_for(self.channel.read(), remaining)
            except TimeoutError:
                return None
            if not data:
                sink.add(bytes(self._buf))
                self._buf.clear()
                raise SandboxDied("the sandbox shell's output ended (the sandbox is gone)")
            self._buf += data
