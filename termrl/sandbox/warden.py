"""Sandboxes die with the process that owns them, however it dies.

A podman container does not notice its owner's death: ``--rm`` and ``--timeout``
are conmon's, and a shell busy in a foreground command never reads the input
that would tell it. A SIGKILLed stage (the OOM killer, a lost node, ``kill -9``
of its process group) used to leave such a container running until its
lifetime ran out, and the roots termrl mounts for it mounted for good.

Two mechanisms, neither needing the owner to run anything at exit:

- **The warden.** Each owner process gets one small helper process in a session
  of its own (a kill of the owner's process group misses it). It reads a pipe
  whose only writer is the owner: ``+NAME`` when a sandbox is about to start,
  ``-NAME`` when it is gone. The kernel closes the owner's end when the owner
  exits, whatever ended it; the warden then force-removes every sandbox still
  announced, unmounts its root, and exits::

      owner ──"+termrl-1a2b…\\n"──► warden (setsid, stdin = the pipe)
      owner dies ─► EOF ─► podman rm -f NAME…; unmount roots/NAME…

- **The lease.** Every sandbox carries its owner's lease in a label
  (``LEASE_LABEL``: boot id, pid namespace, pid and start time). ``lease_alive``
  tells a live owner from a dead one, or from a recycled pid, on this machine;
  ``termrl sandbox cleanup`` and every sandbox stage's start remove what a dead
  owner left when its warden could not run (killed with it by hand, a crash of
  the machine's container engine). A lease from another boot or pid namespace
  (a stage in a container, over podman's socket) cannot be judged from here and
  is left to the old age rule.

A process that forks after announcing passes its end of the pipe to the child,
and the warden then waits for both: termrl's stages start subprocesses with
``exec`` (the end is close-on-exec), never a bare ``fork``.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

__all__ = ["LEASE_LABEL", "Warden", "lease_alive", "lease_of", "own_lease", "warden_for"]

LEASE_LABEL = "termrl.owner"


def _start_ticks(pid: int | str) -> str | None:
    """Field 22 of /proc/PID/stat (start time in clock ticks), None for a gone or zombie process."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2 :].split()  # after "pid (comm) "
    if fields[0] in ("Z", "X"):  # a zombie has exited; only its parent's wait is left
        return None
    return fields[19]


def _namespace() -> str:
    boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    pid_ns = os.readlink("/proc/self/ns/pid").removeprefix("pid:[").removesuffix("]")
    return f"{boot}/{pid_ns}"


def lease_of(pid: int) -> str:
    """The lease of process ``pid`` of this pid namespace: ``BOOT_ID/PID_NS/PID/START_TICKS``."""
    return f"{_namespace()}/{pid}/{_start_ticks(pid)}"


def own_lease() -> str:
    """This process's lease (``lease_of`` itself)."""
    return lease_of(os.getpid())


def lease_alive(lease: str) -> bool | None:
    """True while the lease's process runs, False once it is gone, None when it cannot be judged
    here (another boot or pid namespace, or not a lease)."""
    parts = lease.split("/")
    if len(parts) != 4 or f"{parts[0]}/{parts[1]}" != _namespace():
        return None
    return _start_ticks(parts[2]) == parts[3]


class Warden:
    """The owner's side: starts the warden once, then announces sandboxes to it.

    ``binary`` is the container CLI that removes them; ``roots`` the folder whose
    ``NAME`` subfolders are sandbox roots to unmount (None: the engine's own).
    """

    def __init__(self, binary: str, roots: Path | None):
        self.binary = binary
        self.roots = roots
        self._lock = threading.Lock()
        self._pipe: int | None = None
        self._pid: int | None = None
        self._owner: int | None = None  # the process that started the warden (a fork is not it)

    def announce(self, name: str) -> None:
        """``name`` is about to exist: remove it if this process dies before ``release``."""
        self._send(f"+{name}\n")

    def release(self, name: str) -> None:
        """``name`` is gone (removed, its root unmounted)."""
        self._send(f"-{name}\n")

    @property
    def pid(self) -> int | None:
        """The warden's pid once started (tests kill it to stand for a machine-wide crash)."""
        return self._pid

    def _send(self, line: str) -> None:
        with self._lock:
            if self._pipe is None or self._owner != os.getpid():
                self._start()
            os.write(self._pipe, line.encode())  # type: ignore[arg-type]

    def _start(self) -> None:
        read_end, write_end = os.pipe()  # both close-on-exec: no child of ours holds them
        # A bare interpreter running this file (-P: its folder not on sys.path): a few MB for
        # the owner's life, where importing termrl would cost tens.
        argv = [sys.executable, "-P", __file__, self.binary, str(self.roots or "")]
        try:
            process = subprocess.Popen(
                argv,
                stdin=read_end,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,
            )
        finally:
            os.close(read_end)
        if self._pipe is not None:  # a fork's inherited end: the parent's warden is not ours
            os.close(self._pipe)
        self._pipe, self._pid, self._owner = write_end, process.pid, os.getpid()


_WARDENS: dict[tuple[str, Path | None], Warden] = {}
_WARDENS_LOCK = threading.Lock()


def warden_for(binary: str, roots: Path | None) -> Warden:
    """This process's one warden for ``binary`` and ``roots`` (started on its first announcement)."""
    with _WARDENS_LOCK:
        return _WARDENS.setdefault((binary, roots), Warden(binary, roots))


def _remove(binary: str, roots: str, names: set[str]) -> None:
    if not names:
        return
    for name in sorted(names):  # one by one: a name that never came to exist fails alone
        subprocess.run(
            [binary, "rm", "--force", "--time", "0", name],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=120,
        )
    if roots:
        sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
        from termrl.sandbox.disk_layer import unmount_layer

        for name in names:
            unmount_layer(Path(roots) / name)


def main(argv: list[str]) -> int:
    """The warden: read ``+NAME``/``-NAME`` lines until EOF, then remove what is left."""
    binary, roots = argv
    # Only the owner's end closing ends the warden: a signal meant for the owner's whole
    # tree (Ctrl-C, a run stopping its stages) must not take it first.
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)
    live: set[str] = set()
    with os.fdopen(0, "rb", buffering=0) as pipe:
        pending = b""
        while chunk := pipe.read(4096):
            pending += chunk
            *lines, pending = pending.split(b"\n")
            for line in lines:
                name = line[1:].decode()
                if line.startswith(b"+"):
                    live.add(name)
                elif line.startswith(b"-"):
                    live.discard(name)
    _remove(binary, roots, live)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
