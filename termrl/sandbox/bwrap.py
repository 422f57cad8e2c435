"""The bubblewrap backend: fast, dense local sandboxes over an overlay of an image's rootfs.

bubblewrap 0.8 has no overlay flags, so each session is started by a small
launcher (root on the host):

    sh: join the session's cgroups (memory+swap, pids, cpu quota: v1 where writable)
     └─ unshare --mount (private): mount -t overlay lower=<rootfs>, upper/work=<session dir>
         └─ bwrap --bind <merged> / --proc --dev, new pid/net/ipc/uts/cgroup namespaces,
            capabilities cut to Docker's default set, --die-with-parent, --new-session
             └─ the shell supervisor (``termrl.sandbox.shell``)

The overlay exists only in the launcher's mount namespace, so it vanishes with
the sandbox's last process; the upper layer is on disk (a tmpfs upper layer
would count against the memory limit) and removed on close, as are the cgroups.

The lower layer is the base rootfs tarball extracted once (for base image
names) or, for any other image, ``podman image mount`` of it: task
environments are built by the podman backend and then run here.

Files move host-side through ``/proc/<pid>/root`` of a sandbox process with a
component-by-component walk that resolves symlinks inside the sandbox root
(a symlink planted by the agent cannot point the host at its own files).
Network: none only; ``egress`` (slirp4netns) is not implemented here.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import json
import os
import shutil
import signal
import tarfile
import uuid
from pathlib import Path, PurePosixPath

from termrl.errors import EnvInitFailed, SandboxDied, SandboxUnavailable
from termrl.sandbox.base_images import BASE_IMAGES, cache_root, rootfs_tarball
from termrl.sandbox.session import Sandbox
from termrl.sandbox.shell import SUPERVISOR, ProcessChannel, Shell
from termrl.sandbox.spec import SandboxSpec

__all__ = ["DOCKER_CAPS", "BwrapBackend", "BwrapSandbox"]

# Docker's default capability set (moby oci/caps/defaults.go).
DOCKER_CAPS = (
    "CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FSETID", "CAP_FOWNER", "CAP_MKNOD", "CAP_NET_RAW",
    "CAP_SETGID", "CAP_SETUID", "CAP_SETFCAP", "CAP_SETPCAP", "CAP_NET_BIND_SERVICE",
    "CAP_SYS_CHROOT", "CAP_KILL", "CAP_AUDIT_WRITE",
)  # fmt: skip

CGROUP_ROOT = Path("/sys/fs/cgroup")

LAUNCHER = r"""
for cg in $TERMRL_CGROUPS; do echo $$ > "$cg/cgroup.procs" || exit 90; done
exec unshare --mount --propagation private sh -c '
  mount -t overlay overlay -o "lowerdir=$1,upperdir=$2,workdir=$3" "$4" || exit 91
  shift 4; exec "$@"' overlay "$@"
"""


def _children_map() -> dict[int, list[int]]:
    kids: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        kids.setdefault(ppid, []).append(int(entry.name))
    return kids


def _descendants(root: int) -> list[int]:
    kids, found, todo = _children_map(), [], list(_children_map().get(root, []))
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo.extend(kids.get(pid, []))
    return found


def _status_field(pid: int, key: str) -> str | None:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        return None
    return None


class BwrapSandbox(Sandbox):
    """One bwrap sandbox: its launcher process, session directory and cgroups."""

    backend = "bwrap"

    def __init__(self, name: str, channel: ProcessChannel, session_dir: Path, cgroups: list[Path]):
        self.name = name
        self.channel = channel
        self.session_dir = session_dir
        self.cgroups = cgroups
        self._host_pids: dict[int, int] = {}

    def host_pid(self, ns_pid: int) -> int:
        """The host pid of the sandbox process whose pid inside the sandbox is ``ns_pid``."""
        if ns_pid not in self._host_pids:
            for pid in _descendants(self.channel.process.pid):
                nspid = (_status_field(pid, "NSpid") or "").split()
                if len(nspid) > 1 and int(nspid[-1]) == ns_pid:
                    self._host_pids[ns_pid] = pid
                    break
            else:
                raise SandboxDied(f"sandbox {self.name} has no process {ns_pid}")
        return self._host_pids[ns_pid]

    async def signal(self, pid: int, sig: str, mode: str) -> None:
        root = self.host_pid(pid)
        targets = _descendants(root) + ([root] if mode == "all" else [])
        for target in targets:
            if mode == "fg" and int(_status_field(target, "SigIgn") or "0", 16) & 2:
                continue  # a background job: non-interactive bash made it ignore SIGINT
            with contextlib.suppress(ProcessLookupError):
                os.kill(target, getattr(signal, "SIG" + sig))

    def _root_fd(self) -> int:
        # The supervisor: bwrap's pid 1 in the sandbox forks it as pid 2.
        try:
            return os.open(f"/proc/{self.host_pid(2)}/root", os.O_RDONLY | os.O_DIRECTORY)
        except OSError as e:
            raise SandboxDied(f"sandbox {self.name} is gone") from e

    async def put_archive(self, archive: bytes) -> None:
        import io

        root = self._root_fd()
        try:
            with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
                for member in tar:
                    data = tar.extractfile(member)
                    if not member.isfile() or data is None:
                        continue
                    path = PurePosixPath("/" + member.name)
                    parent = _walk(root, path.parent.parts[1:], create=True)
                    try:
                        fd = os.open(path.name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, dir_fd=parent)
                        try:
                            os.write(fd, data.read())
                            os.fchmod(fd, member.mode & 0o7777)
                        finally:
                            os.close(fd)
                    finally:
                        os.close(parent)
        finally:
            os.close(root)

    async def get_file(self, path: str) -> bytes:
        target = PurePosixPath(path)
        root = self._root_fd()
        try:
            parent = _walk(root, target.parent.parts[1:], create=False)
            try:
                fd = _open_in(root, parent, target.name)
            finally:
                os.close(parent)
            try:
                if os.path.isdir(f"/proc/self/fd/{fd}"):
                    raise IsADirectoryError(path)
                with os.fdopen(fd, "rb", closefd=False) as f:
                    return f.read()
            finally:
                os.close(fd)
        finally:
            os.close(root)

    async def alive(self) -> bool:
        return self.channel.process.returncode is None

    async def destroy(self) -> None:
        process = self.channel.process
        if process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                for pid in [*_descendants(process.pid), process.pid]:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(process.wait(), 10)
        for cgroup in self.cgroups:
            for _ in range(50):  # the kernel needs a moment to drop the killed tasks
                try:
                    cgroup.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    await asyncio.sleep(0.02)
        await asyncio.to_thread(shutil.rmtree, self.session_dir, True)


def _walk(root: int, parts: tuple[str, ...], *, create: bool, hops: int = 0) -> int:
    """An fd of the directory ``parts`` below ``root``, symlinks resolved inside ``root``."""
    current = os.dup(root)
    stack: list[str] = []
    todo = list(parts)
    while todo:
        part = todo.pop(0)
        if part in ("", "."):
            continue
        if part == "..":
            if stack:
                stack.pop()
            os.close(current)
            current = _walk(root, tuple(stack), create=False, hops=hops)
            continue
        try:
            nxt = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=current)
        except FileNotFoundError:
            if not create:
                os.close(current)
                raise
            os.mkdir(part, 0o755, dir_fd=current)
            nxt = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=current)
        except OSError as e:
            if e.errno not in (errno.ELOOP, errno.ENOTDIR) or hops > 40:
                os.close(current)
                raise
            link = os.readlink(part, dir_fd=current)
            hops += 1
            if link.startswith("/"):
                stack = []
                os.close(current)
                current = os.dup(root)
            todo = [p for p in link.split("/") if p] + todo
            continue
        os.close(current)
        current = nxt
        stack.append(part)
    return current


def _open_in(root: int, parent: int, name: str, hops: int = 0) -> int:
    try:
        return os.open(name, os.O_RDONLY | os.O_NOFOLLOW, dir_fd=parent)
    except OSError as e:
        if e.errno != errno.ELOOP or hops > 40:
            raise
    link = PurePosixPath(os.readlink(name, dir_fd=parent))
    base = _walk(root, link.parent.parts[1:], create=False) if link.is_absolute() else _walk(parent, link.parent.parts, create=False)
    try:
        return _open_in(root, base, link.name, hops + 1)
    finally:
        os.close(base)


class BwrapBackend:
    """Starts bwrap sandboxes; images come from base rootfs tarballs or podman."""

    name = "bwrap"

    def __init__(self, *, podman: str = "podman", state_dir: Path | None = None):
        for tool in ("bwrap", "unshare"):
            if shutil.which(tool) is None:
                raise SandboxUnavailable(f"{tool} is not installed")
        if os.geteuid() != 0:
            raise SandboxUnavailable("the bwrap backend mounts overlays and needs root")
        self.podman = podman
        self.state_dir = state_dir or cache_root() / "sandbox" / "bwrap"
        self._lowers: dict[str, tuple[Path, dict[str, str], str]] = {}
        self._lock = asyncio.Lock()

    async def build_image(self, spec: SandboxSpec) -> str:
        if spec.image is not None:
            return spec.image
        from termrl.sandbox.podman import PodmanBackend

        return await PodmanBackend(self.podman).build_image(spec)

    async def _lower(self, image: str) -> tuple[Path, dict[str, str], str]:
        """(lower dir, image ENV, image WORKDIR) of ``image``, prepared once."""
        async with self._lock:
            if image not in self._lowers:
                self._lowers[image] = await asyncio.to_thread(self._prepare_lower, image)
            return self._lowers[image]

    def _prepare_lower(self, image: str) -> tuple[Path, dict[str, str], str]:
        for base in BASE_IMAGES:
            tarball = rootfs_tarball(base)
            if image in base.tags and tarball.exists():
                lower = tarball.with_suffix("")
                if not lower.exists():
                    partial = lower.with_name(lower.name + f".{os.getpid()}.partial")
                    shutil.rmtree(partial, ignore_errors=True)
                    partial.mkdir(parents=True)
                    with tarfile.open(tarball) as tar:
                        tar.extractall(partial, filter="fully_trusted")  # our own mmdebstrap output
                    os.replace(partial, lower)
                env = dict(c[4:].split("=", 1) for c in base.config if c.startswith("ENV "))
                workdir = next((c[8:] for c in base.config if c.startswith("WORKDIR ")), "/")
                return lower, env, workdir
        import subprocess

        mounted = subprocess.run([self.podman, "image", "mount", image], capture_output=True, text=True)
        if mounted.returncode != 0:
            raise EnvInitFailed(f"cannot mount image {image} for bwrap", log_tail=mounted.stderr[-2000:])
        inspect = subprocess.run([self.podman, "image", "inspect", image], capture_output=True, text=True)
        config = json.loads(inspect.stdout)[0].get("Config", {}) if inspect.returncode == 0 else {}
        env = dict(e.split("=", 1) for e in config.get("Env") or [] if "=" in e)
        return Path(mounted.stdout.strip()), env, config.get("WorkingDir") or "/"

    def _cgroups(self, name: str, spec: SandboxSpec) -> list[Path]:
        """Create the session's v1 cgroups where writable (memory+swap, pids, cpu)."""
        limits = {
            "memory": {"memory.limit_in_bytes": spec.memory_mb << 20, "memory.memsw.limit_in_bytes": spec.memory_mb << 20},
            "pids": {"pids.max": spec.pids},
            "cpu": {"cpu.cfs_period_us": 100000, "cpu.cfs_quota_us": int(spec.cpus * 100000)},
        }
        made = []
        for controller, values in limits.items():
            base = CGROUP_ROOT / controller
            if not os.access(base, os.W_OK):
                continue
            path = base / "termrl" / name
            path.mkdir(parents=True)
            made.append(path)
            for key, value in values.items():
                if (path / key).exists():
                    (path / key).write_text(str(value))
        return made

    def bwrap_argv(
        self, spec: SandboxSpec, merged: Path, lower: Path, env: dict[str, str], workdir: str, token: str
    ) -> list[str]:
        """The bwrap command line of one session (public for tests)."""
        argv = [
            "bwrap", "--bind", str(merged), "/", "--proc", "/proc", "--dev", "/dev",
            "--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts", "--unshare-cgroup-try",
            "--hostname", "sandbox", "--die-with-parent", "--new-session",
            "--cap-drop", "ALL", *(a for cap in DOCKER_CAPS for a in ("--cap-add", cap)),
            "--clearenv", "--setenv", "HOME", "/root",
        ]  # fmt: skip
        for key, value in sorted({**env, **spec.env}.items()):
            argv += ["--setenv", key, value]
        argv += ["--chdir", workdir if (lower / workdir.lstrip("/")).is_dir() else "/"]
        return [*argv, "bash", "-c", SUPERVISOR, "termrl-supervisor", token]

    async def start(self, spec: SandboxSpec, image: str, output_limit: int) -> tuple[BwrapSandbox, Shell]:
        if spec.network != "none":
            raise SandboxUnavailable("the bwrap backend runs without network only (egress: use podman)")
        lower, env, workdir = await self._lower(image)
        name = f"termrl-{uuid.uuid4().hex[:12]}"
        session_dir = self.state_dir / name
        for sub in ("upper", "work", "merged"):
            (session_dir / sub).mkdir(parents=True)
        cgroups = self._cgroups(name, spec)
        token = Shell.new_token()
        argv = self.bwrap_argv(spec, session_dir / "merged", lower, env, workdir, token)
        process = await asyncio.create_subprocess_exec(
            "sh", "-c", LAUNCHER, "launcher", str(lower), str(session_dir / "upper"), str(session_dir / "work"),
            str(session_dir / "merged"), *argv,
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
            env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "TERMRL_CGROUPS": " ".join(map(str, cgroups))},
            start_new_session=True,
        )  # fmt: skip
        channel = ProcessChannel(process)
        sandbox = BwrapSandbox(name, channel, session_dir, cgroups)
        shell = Shell(channel, token, sandbox.signal, output_limit=output_limit)
        try:
            await shell.start(spec.workdir)
        except SandboxDied as e:
            await sandbox.destroy()
            raise EnvInitFailed(f"bwrap sandbox for {image} did not start", log_tail=e.log_tail) from e
        return sandbox, shell
