"""A sandbox's processes seen from the host: list them, stop the agent's during scoring, kill a tree.

Local backends (podman, bwrap) run their sandboxes' processes as host
processes, so the host can act on them without running anything inside the
sandbox (where the agent may have replaced ``bash`` or ``kill``). A sandbox is
its pid namespace: every host process whose ``/proc/<pid>/ns/pid`` is the
sandbox init's.

Scoring stops the agent's processes so that nothing the agent left running can
write the reward, swap the test files or write into the tests' output while
they run (``stop_agent_processes``), and resumes them after
(``resume``). Services stay up, because Terminal-Bench's tests may talk to
them: a *service* is a process holding a listening socket (TCP listen, bound
UDP, listening unix socket) and everything below it (its workers). The init
process (pid 1 inside) is left alone too: it only reaps.

A service is only recognisable once it listens. An agent that starts a server
and says ``done`` at once leaves a process that binds its port a moment later
(seconds on a loaded machine); stopped before that, it never binds and a
correct solution fails. So scoring first waits, at most ``SERVICE_GRACE_SEC``,
until every other process is that old, listens, or has exited: nothing is
waited for when the agent left nothing young behind. The sandbox's own
processes (its supervisor and the agent's shell, ``settled``) are never waited
for: they are as young as the sandbox, which in verify or a short episode is
seconds, and they never become services. They are still stopped.

    stopped = stop_agent_processes(init_pid)    wait for services still starting (below), then
                                                SIGSTOP all but init and services, repeated
                                                until no new process appears (a loop that
                                                forks is caught in the next round)
    ... tests run ...
    resume(stopped)                             SIGCONT the very same processes (pid and start time)
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Collection
from dataclasses import dataclass

__all__ = [
    "StoppedProcess",
    "descendants",
    "host_pid_of",
    "kill_tree",
    "namespace_members",
    "resume",
    "service_pids",
    "stop_agent_processes",
    "with_argument",
    "young_processes",
]

STOP_ROUNDS = 50
"""Enough for any chain of forks racing the stopper (each round stops every process it sees)."""

SERVICE_GRACE_SEC = 10.0
"""How long a new process may take to start listening before scoring stops it (see above)."""


@dataclass(frozen=True)
class StoppedProcess:
    pid: int
    start_time: int
    """Field 22 of /proc/<pid>/stat: tells a reused pid from the process that was stopped."""


def _stat(pid: int) -> tuple[str, int, int] | None:
    """(state, ppid, start time) of a host process; None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return fields[0], int(fields[1]), int(fields[19])


def _pid_namespace(pid: int) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/ns/pid")
    except OSError:
        return None


def _all_pids() -> list[int]:
    return [int(e.name) for e in os.scandir("/proc") if e.name.isdigit()]


def namespace_members(init: int) -> list[int]:
    """Host pids of every process in the pid namespace of ``init`` (``init`` included)."""
    namespace = _pid_namespace(init)
    if namespace is None:
        return []
    return [pid for pid in _all_pids() if _pid_namespace(pid) == namespace]


def host_pid_of(init: int, ns_pid: int) -> int | None:
    """The host pid of the process that is ``ns_pid`` inside ``init``'s pid namespace."""
    for pid in namespace_members(init):
        try:
            with open(f"/proc/{pid}/status") as f:
                nspid = next((line.split()[1:] for line in f if line.startswith("NSpid:")), [])
        except OSError:
            continue
        if nspid and int(nspid[-1]) == ns_pid:
            return pid
    return None


def with_argument(init: int, argument: str) -> list[int]:
    """Host pids of ``init``'s namespace with ``argument`` among their command-line arguments."""
    wanted = argument.encode()
    found = []
    for pid in namespace_members(init):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if wanted in f.read().split(b"\0"):
                    found.append(pid)
        except OSError:
            continue
    return found


def descendants(root: int) -> list[int]:
    """Host pids below ``root`` (children, their children, ...), not ``root`` itself."""
    kids: dict[int, list[int]] = {}
    for pid in _all_pids():
        stat = _stat(pid)
        if stat is not None:
            kids.setdefault(stat[1], []).append(pid)
    found, todo = [], list(kids.get(root, []))
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo.extend(kids.get(pid, []))
    return found


def kill_tree(root: int) -> None:
    """SIGKILL ``root`` and everything below it: the root first, so no shell lives to report a child's death."""
    for pid in [root, *descendants(root)]:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def _listening_inodes(pid: int) -> set[str]:
    """Socket inodes listening in ``pid``'s network namespace (TCP LISTEN, bound UDP, unix listeners)."""
    inodes: set[str] = set()
    for table in ("tcp", "tcp6", "udp", "udp6"):
        try:
            with open(f"/proc/{pid}/net/{table}") as f:
                rows = f.read().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            cols = row.split()
            # tcp: st 0A is LISTEN; udp: 07 is a bound, unconnected socket (a UDP server).
            if len(cols) > 9 and cols[3] == ("0A" if table.startswith("tcp") else "07"):
                inodes.add(cols[9])
    try:
        with open(f"/proc/{pid}/net/unix") as f:
            rows = f.read().splitlines()[1:]
    except OSError:
        rows = []
    for row in rows:
        cols = row.split()
        if len(cols) > 6 and int(cols[3], 16) & 0x10000:  # __SO_ACCEPTCON: a listening socket
            inodes.add(cols[6])
    return inodes


def _socket_inodes(pid: int) -> set[str]:
    found = set()
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return found
    for fd in fds:
        with contextlib.suppress(OSError):
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
            if target.startswith("socket:["):
                found.add(target[8:-1])
    return found


def service_pids(init: int, members: list[int] | None = None) -> set[int]:
    """Members of ``init``'s namespace that hold a listening socket, and their descendants."""
    members = namespace_members(init) if members is None else members
    listening = _listening_inodes(init)
    holders = {pid for pid in members if _socket_inodes(pid) & listening}
    services = set(holders)
    for pid in holders:
        services.update(descendants(pid))
    return services & set(members)


def _age_sec(start_time: int) -> float:
    """Seconds since a process started (``start_time``: clock ticks after boot, /proc/<pid>/stat)."""
    with open("/proc/uptime") as f:
        uptime = float(f.read().split()[0])
    return uptime - start_time / os.sysconf("SC_CLK_TCK")


def young_processes(init: int, grace_sec: float, settled: Collection[int] = ()) -> list[int]:
    """Running processes of ``init``'s sandbox, not init, not services and not ``settled``,
    started less than ``grace_sec`` ago: servers that may still be on their way to listening."""
    members = namespace_members(init)
    services = service_pids(init, members)
    young = []
    for pid in members:
        stat = None if pid == init or pid in services or pid in settled else _stat(pid)
        if stat is not None and stat[0] not in "TtZX" and _age_sec(stat[2]) < grace_sec:
            young.append(pid)
    return young


def stop_agent_processes(
    init: int, grace_sec: float = SERVICE_GRACE_SEC, settled: Collection[int] = ()
) -> list[StoppedProcess]:
    """SIGSTOP every process of ``init``'s sandbox except init itself and the services.

    First waits (at most ``grace_sec``) until no process younger than ``grace_sec`` is
    left that could still become a service; ``settled`` (host pids: the sandbox's
    supervisor and shell) are not waited for, but stopped like the rest. Processes that are stopped already (state T)
    or zombies are left as they are and not recorded, so ``resume`` never wakes what the
    agent had stopped.
    """
    deadline = time.monotonic() + grace_sec
    while time.monotonic() < deadline and young_processes(init, grace_sec, settled):
        time.sleep(0.2)
    stopped: dict[int, StoppedProcess] = {}
    for _ in range(STOP_ROUNDS):
        members = namespace_members(init)
        services = service_pids(init, members)
        fresh = 0
        for pid in members:
            if pid == init or pid in services or pid in stopped:
                continue
            stat = _stat(pid)
            if stat is None or stat[0] in "TtZX":
                continue
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGSTOP)
                stopped[pid] = StoppedProcess(pid, stat[2])
                fresh += 1
        if fresh == 0:
            break
    return list(stopped.values())


def resume(stopped: list[StoppedProcess]) -> None:
    """SIGCONT each stopped process that still is the one that was stopped."""
    for process in stopped:
        stat = _stat(process.pid)
        if stat is not None and stat[2] == process.start_time:
            with contextlib.suppress(ProcessLookupError):
                os.kill(process.pid, signal.SIGCONT)


def cgroup_dirs(pid: int) -> list[str]:
    """The host cgroup directories ``pid`` is in, one per mounted hierarchy (v1 and v2).

    ``/proc/<pid>/cgroup`` names each hierarchy by its controllers (``memory``,
    ``cpu,cpuacct``, ``name=systemd``; none for v2) and the path inside it; the host's
    mount table says where that hierarchy is mounted: the cgroup mount whose options
    name those controllers (the v2 mount for none).
    """
    v1: list[tuple[set[str], str]] = []  # (mount options, mount point)
    v2 = None
    with open("/proc/self/mountinfo") as f:
        for line in f:
            left, _, right = line.partition(" - ")
            mount_point, (fstype, _, options) = left.split()[4], (right.split() + ["", "", ""])[:3]
            if fstype == "cgroup":
                v1.append((set(options.split(",")), mount_point))
            elif fstype == "cgroup2" and v2 is None:
                v2 = mount_point
    dirs = []
    with open(f"/proc/{pid}/cgroup") as f:
        for line in f:
            _, controllers, path = line.rstrip("\n").split(":", 2)
            names = {c for c in controllers.split(",") if c}
            mount = next((m for options, m in v1 if names <= options), None) if names else v2
            if mount is not None and path != "/" and os.path.isdir(mount + path):
                dirs.append(mount + path)
    return dirs
