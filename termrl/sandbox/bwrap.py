"""The bubblewrap backend: fast, dense local sandboxes over an overlay of an image's rootfs.

bubblewrap 0.8 has no overlay flags, so each session is started by a small
launcher (root on the host):

    unshare --mount --propagation private sh
        joins the session's cgroups (memory+swap, pids, cpu quota: v1 where writable),
        loop-mounts a sparse ext4 image of ``storage_mb`` as the layer (upper/work dirs),
        mounts the overlay (lower = image rootfs), then
        exec bwrap --bind <merged> / --proc --dev, new pid/net/ipc/uts/cgroup namespaces,
                   capabilities cut to Docker's default set, --die-with-parent, --new-session,
                   /proc masked and read-only where Docker's defaults have it (/proc/sys,
                   /proc/keys, ...), the seccomp filter of ``termrl.sandbox.seccomp``
         └─ the shell supervisor (``termrl.sandbox.shell``)

The overlay exists only in the launcher's mount namespace, so it vanishes with
the sandbox's last process; the upper layer is on disk (a tmpfs upper layer
would count against the memory limit), in an image of the spec's ``storage_mb``
(sparse: it takes what is written), so a sandbox that fills it gets ENOSPC and
nothing else does; it is removed on close, as are the cgroups.

The lower layer is the base rootfs tarball extracted once (for base image
names) or, for any other image, ``podman image mount`` of it: task
environments are built with podman (``termrl.sandbox.image_build``) and then
run here.

The session itself (files, fresh processes, stopping the agent's processes
during scoring) is ``termrl.sandbox.bwrap_sandbox``.

Network: every sandbox gets its own network namespace (``--unshare-net``):
loopback only for ``none``. For ``egress``, bwrap reports the sandbox's pid on
``--info-fd`` and holds the command on ``--block-fd`` until slirp4netns has
attached a user-mode NAT to that namespace (tap0 10.0.2.100, DNS forwarder
10.0.2.3, host loopback refused); the host CAs are bind-mounted and installed
as for podman. slirp4netns runs beside the sandbox and exits when its exit-fd,
held by this process, is closed: on close, or when this process dies.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import select
import shutil
import tarfile
import time
import uuid
from pathlib import Path

from termrl.errors import EnvInitFailed, SandboxDied, SandboxUnavailable
from termrl.sandbox import hostca, seccomp
from termrl.sandbox.backend import Backend
from termrl.sandbox.base_images import BASE_IMAGES, cache_root, rootfs_tarball
from termrl.sandbox.bwrap_sandbox import BwrapSandbox
from termrl.sandbox.docker_defaults import DOCKER_CAPS, MASKED_DIRS, MASKED_FILES, READ_ONLY
from termrl.sandbox.fresh import IDS_OF_COMMAND
from termrl.sandbox.image_build import ImageBuilder
from termrl.sandbox.shell import DEFAULT_SIGINT, SUPERVISOR, ProcessChannel, Shell
from termrl.sandbox.spec import SandboxSpec

__all__ = ["BwrapBackend"]

# SUPERVISOR for an agent user (``SandboxSpec.user``): bwrap over the root-owned overlay runs
# as root, so the supervisor stays root and each inner shell drops to the user with the image's
# own setpriv. $1 token, $2 user (a name or uid), $3 fresh.IDS_OF_COMMAND (the user's ids as
# the sandbox's own ``id`` reports them, the rule ``enter`` follows too), $4 root's set-up, run
# once before any agent process exists. HOME is the user's passwd home. Leaving uid 0 clears
# every capability, and bwrap's no_new_privs keeps setuid binaries (sudo, su) from giving any back.
SUPERVISOR_AS_USER = r"""
exec 2>/dev/null
trap 'exit 0' TERM
token=$1 u=$2
eval "$4"
if ! command -v setpriv >/dev/null; then
  echo "termrl: the image has no setpriv (util-linux): the bwrap backend cannot run the agent as $u"
  exit 1
elif ! ids=$(TERMRL_USER=$u bash --noprofile --norc -c "$3"); then
  echo "termrl: no such user in the image: $u"; exit 1
fi
read -r uid gid groups <<< "$ids"
if [ -n "$groups" ]; then groups=--groups=${groups// /,}; else groups=--clear-groups; fi
home=$(getent passwd "$uid" | cut -d: -f6)
export HOME=${home:-/} USER=$u LOGNAME=$u
while :; do
  setpriv --reuid="$uid" --regid="$gid" "$groups" --inh-caps=-all -- bash --noprofile --norc
  printf '\n%s%s %d\n' __TERMRL_EXIT_ "$token" "$?"
  read -r _ || exit 0
done
"""

CGROUP_ROOT = Path("/sys/fs/cgroup")


SLIRP_DNS = "10.0.2.3"  # slirp4netns's DNS forwarder inside the default 10.0.2.0/24
NETWORK_SETUP_TIMEOUT_SEC = 10.0

# argv: unshare --mount --propagation private sh -c LAUNCHER launcher LOWER LAYER DISK STORAGE_MB MERGED BWRAP...
# With a storage limit the layer (upper and work dirs) is a sparse ext4 image of that size, loop-mounted
# in this private mount namespace only: it is gone, loop device and all, with the sandbox's last process.
LAUNCHER = r"""
for cg in $TERMRL_CGROUPS; do echo $$ > "$cg/cgroup.procs" || exit 90; done
if [ "$4" != 0 ]; then
  truncate -s "$4M" "$3" && mkfs.ext4 -q -F -m 0 -O ^has_journal -E nodiscard "$3" >/dev/null \
    && mount -o loop "$3" "$2" || exit 92
fi
mkdir -p "$2/upper" "$2/work" && mount -t overlay overlay -o "lowerdir=$1,upperdir=$2/upper,workdir=$2/work" "$5" || exit 91
shift 5; exec "$@"
"""


def _close(*fds: int) -> None:
    """Close the pipe ends that exist (-1 marks one never opened)."""
    for fd in fds:
        if fd >= 0:
            os.close(fd)


def _egress_ca_and_resolver(env: dict[str, str]) -> tuple[list[str], dict[str, str], str]:
    """(bwrap options, the environment, set-up commands) for egress: the host's CA bundle where
    there is one, and slirp4netns's resolver in /etc/resolv.conf."""
    options: list[str] = []
    setup = ""
    bundle = hostca.host_ca_bundle(cache_root() / "sandbox")
    if bundle is not None:
        options += ["--ro-bind", str(bundle), hostca.SANDBOX_PATH]
        env = {**env, **hostca.CA_ENV}
        setup = hostca.install_command()
    setup += f"rm -f /etc/resolv.conf; echo 'nameserver {SLIRP_DNS}' > /etc/resolv.conf; "
    return options, env, setup


def _seccomp_memfd() -> tuple[bytes, int]:
    """(the seccomp program, a memfd holding it, at offset 0): bwrap reads it from the fd and loads
    it right before the supervisor."""
    program = seccomp.program()
    fd = os.memfd_create("termrl-seccomp")
    os.write(fd, program)
    os.lseek(fd, 0, os.SEEK_SET)
    return program, fd


def _read_fd(fd: int, until: bytes, timeout: float) -> bytes:
    """Bytes from ``fd`` up to and including ``until`` (or EOF, or the timeout)."""
    data = b""
    deadline = time.monotonic() + timeout
    while until not in data:
        remaining = deadline - time.monotonic()
        if remaining <= 0 or not select.select([fd], [], [], remaining)[0]:
            break
        chunk = os.read(fd, 4096)
        if not chunk:
            break
        data += chunk
    return data


def _docker_proc_defaults() -> list[str]:
    """bwrap options masking and write-protecting /proc as Docker does (only what this kernel has;
    the sandbox's /proc shows the same entries as the host's)."""
    options: list[str] = []
    for path in READ_ONLY:
        if os.path.exists(path):
            # The host's /proc/sys, read-only: namespaced settings (net.*, the hostname) still
            # answer for the reading process's namespaces.
            options += ["--ro-bind", path, path]
    for path in MASKED_FILES:
        if os.path.exists(path):
            options += ["--ro-bind", "/dev/null", path]
    for path in MASKED_DIRS:
        if path.startswith("/proc/") and os.path.isdir(path):  # the sandbox has no /sys mounted
            options += ["--tmpfs", path, "--remount-ro", path]
    return options


class BwrapBackend(Backend):
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
        return await ImageBuilder(self.podman).build_image(spec)

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

        mounted = subprocess.run(
            [self.podman, "image", "mount", image], capture_output=True, text=True
        )
        if mounted.returncode != 0:
            raise EnvInitFailed(
                f"cannot mount image {image} for bwrap", log_tail=mounted.stderr[-2000:]
            )
        inspect = subprocess.run(
            [self.podman, "image", "inspect", image], capture_output=True, text=True
        )
        config = json.loads(inspect.stdout)[0].get("Config", {}) if inspect.returncode == 0 else {}
        env = dict(e.split("=", 1) for e in config.get("Env") or [] if "=" in e)
        return Path(mounted.stdout.strip()), env, config.get("WorkingDir") or "/"

    def _cgroups(self, name: str, spec: SandboxSpec) -> list[Path]:
        """Create the session's v1 cgroups where writable (memory+swap, pids, cpu)."""
        limits = {
            "memory": {
                "memory.limit_in_bytes": spec.memory_mb << 20,
                "memory.memsw.limit_in_bytes": spec.memory_mb << 20,
            },
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
        self,
        spec: SandboxSpec,
        merged: Path,
        lower: Path,
        env: dict[str, str],
        workdir: str,
        token: str,
        extra: tuple[str, ...] = (),
        setup: str = "",
    ) -> list[str]:
        """The bwrap command line of one session (public for tests); ``extra`` follows the mounts.
        With ``spec.user`` the supervisor runs ``setup`` as root, then the agent's shells as the
        user (``SUPERVISOR_AS_USER``); without, ``setup`` is the shell's own first line."""
        argv = [
            "bwrap",
            "--bind",
            str(merged),
            "/",
            "--proc",
            "/proc",
            "--dev",
            "/dev",
            *_docker_proc_defaults(),
            *extra,
            "--unshare-ipc",
            "--unshare-pid",
            "--unshare-net",
            "--unshare-uts",
            "--unshare-cgroup-try",
            "--hostname",
            "sandbox",
            "--die-with-parent",
            "--new-session",
            "--cap-drop",
            "ALL",
            *(a for cap in DOCKER_CAPS for a in ("--cap-add", cap)),
            "--clearenv",
            "--setenv",
            "HOME",
            "/root",
        ]
        for key, value in sorted({**env, **spec.env}.items()):
            argv += ["--setenv", key, value]
        argv += ["--chdir", workdir if (lower / workdir.lstrip("/")).is_dir() else "/"]
        supervisor = (
            [SUPERVISOR_AS_USER, "termrl-supervisor", token, spec.user, IDS_OF_COMMAND, setup]
            if spec.user
            else [SUPERVISOR, "termrl-supervisor", token]
        )
        return [*argv, "bash", "-c", *supervisor]

    async def start(
        self, spec: SandboxSpec, image: str, output_limit: int
    ) -> tuple[BwrapSandbox, Shell]:
        egress = spec.network == "egress"
        if egress and shutil.which("slirp4netns") is None:
            raise SandboxUnavailable(
                "slirp4netns is not installed (the bwrap backend needs it for egress)"
            )
        lower, env, workdir = await self._lower(image)
        name = f"termrl-{uuid.uuid4().hex[:12]}"
        session_dir = self.state_dir / name
        for sub in ("layer", "merged"):
            (session_dir / sub).mkdir(parents=True)
        cgroups = self._cgroups(name, spec)
        token = Shell.new_token()
        extra: list[str] = []
        setup = ""
        info_r = info_w = block_r = block_w = -1
        if egress:
            # bwrap reports its network namespace on info and waits on block until slirp4netns is in.
            info_r, info_w = os.pipe()
            block_r, block_w = os.pipe()
            extra += ["--info-fd", str(info_w), "--block-fd", str(block_r)]
            ca_options, env, setup = _egress_ca_and_resolver(env)
            extra += ca_options
        program, seccomp_fd = _seccomp_memfd()
        extra += ["--seccomp", str(seccomp_fd)]
        argv = self.bwrap_argv(
            spec, session_dir / "merged", lower, env, workdir, token, tuple(extra), setup
        )
        if spec.user:
            setup = ""  # root's set-up runs in the supervisor, before the user's shell
        try:
            process = await self._launch(
                spec,
                lower,
                session_dir,
                argv,
                cgroups,
                pass_fds=((seccomp_fd, info_w, block_r) if egress else (seccomp_fd,)),
            )
        except OSError as e:
            _close(info_r, block_w)
            for cgroup in cgroups:
                cgroup.rmdir()
            shutil.rmtree(session_dir, ignore_errors=True)
            raise SandboxUnavailable(f"cannot start the bwrap launcher: {e}") from e
        finally:
            _close(seccomp_fd, info_w, block_r)  # bwrap holds its own copies now
        channel = ProcessChannel(process)
        sandbox = BwrapSandbox(
            name,
            channel,
            session_dir,
            cgroups,
            env={"HOME": "/root", **env, **spec.env},
            seccomp=program,
            lower=lower,
        )
        shell = Shell(channel, token, sandbox.signal, output_limit=output_limit)
        try:
            if egress:
                await self._attach_slirp(sandbox, info_r, block_w)
            await shell.start(spec.workdir, setup=setup)
        except (SandboxDied, EnvInitFailed) as e:
            await sandbox.destroy()
            tail = e.log_tail or await _leftover_output(process)
            raise EnvInitFailed(
                f"bwrap sandbox for {image} did not start: {e}", log_tail=tail
            ) from e
        except BaseException:  # cancelled, or slirp4netns could not be run: leave nothing behind
            await sandbox.destroy()
            raise
        finally:
            _close(info_r, block_w)
        return sandbox, shell

    async def _launch(
        self,
        spec: SandboxSpec,
        lower: Path,
        session_dir: Path,
        argv: list[str],
        cgroups: list[Path],
        *,
        pass_fds: tuple[int, ...],
    ) -> asyncio.subprocess.Process:
        """The launcher: in a private mount namespace, the session's disk and overlay, then ``argv``
        (bwrap) in ``cgroups``; its stdin and stdout are the supervisor's channel."""
        return await asyncio.create_subprocess_exec(
            *DEFAULT_SIGINT,
            "unshare",
            "--mount",
            "--propagation",
            "private",
            "sh",
            "-c",
            LAUNCHER,
            "launcher",
            str(lower),
            str(session_dir / "layer"),
            str(session_dir / "disk.img"),
            str(spec.storage_mb),
            str(session_dir / "merged"),
            *argv,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            env={
                "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
                "TERMRL_CGROUPS": " ".join(map(str, cgroups)),
            },
            start_new_session=True,
            pass_fds=pass_fds,
        )

    async def _attach_slirp(self, sandbox: BwrapSandbox, info_fd: int, block_fd: int) -> None:
        """Give the sandbox's network namespace a slirp4netns NAT, then let bwrap go on."""
        info = await asyncio.to_thread(_read_fd, info_fd, b"}", NETWORK_SETUP_TIMEOUT_SEC)
        try:
            pid = int(json.loads(info)["child-pid"])
        except (ValueError, KeyError) as e:
            raise EnvInitFailed(f"bwrap did not report its sandbox pid (got {info[:200]!r})") from e
        ready_r, ready_w = os.pipe()
        exit_r, sandbox.slirp_exit_fd = os.pipe()  # the sandbox's destroy closes the write end
        log = sandbox.session_dir / "slirp4netns.log"
        try:
            with open(log, "wb") as out:
                sandbox.slirp = await asyncio.create_subprocess_exec(
                    "slirp4netns",
                    "--configure",
                    "--mtu=65520",
                    "--disable-host-loopback",
                    f"--ready-fd={ready_w}",
                    f"--exit-fd={exit_r}",
                    str(pid),
                    "tap0",
                    stdin=asyncio.subprocess.DEVNULL,
                    stdout=out,
                    stderr=asyncio.subprocess.STDOUT,
                    pass_fds=(ready_w, exit_r),
                    start_new_session=True,
                )
        finally:
            _close(ready_w, exit_r)  # slirp4netns holds its own copies now
        try:
            ready = await asyncio.to_thread(_read_fd, ready_r, b"1", NETWORK_SETUP_TIMEOUT_SEC)
        finally:
            os.close(ready_r)
        if not ready:
            raise EnvInitFailed(
                "slirp4netns did not bring the sandbox network up", log_tail=log.read_text()[-2000:]
            )
        os.write(block_fd, b"1")


async def _leftover_output(process: asyncio.subprocess.Process) -> str:
    """What a failed launcher printed (its stdout is also the shell channel)."""
    if process.stdout is None:
        return ""
    with contextlib.suppress(TimeoutError):
        return (await asyncio.wait_for(process.stdout.read(), 2)).decode(errors="replace")[-2000:]
    return ""
