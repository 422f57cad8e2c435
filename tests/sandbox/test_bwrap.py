"""The bubblewrap backend end to end: overlay sandboxes over the base rootfs."""

from __future__ import annotations

import asyncio
import os
import subprocess
import uuid
from pathlib import Path

import pytest

from termrl.artifacts.tasks import Task, TaskFile
from termrl.errors import EnvInitFailed, SandboxDied, SandboxUnavailable
from termrl.sandbox import SandboxManager, SandboxSpec, hostca
from termrl.sandbox.base_images import cache_root
from termrl.sandbox.procs import descendants
from tests.sandbox.servers import serving

pytestmark = pytest.mark.podman  # the base images (and task images) come from podman


@pytest.fixture
async def bwrap(base_images):
    if os.geteuid() != 0:
        pytest.skip("the bwrap backend needs root")
    async with SandboxManager(backend="bwrap", output_limit=4096) as manager:
        yield manager


async def test_persistent_shell_and_image_config(bwrap, base_images):
    async with await bwrap.create(SandboxSpec(image=base_images, env={"EXTRA": "1"})) as session:
        first = await session.exec("pwd; echo $PIP_BREAK_SYSTEM_PACKAGES $EXTRA; hostname")
        assert first.output == "/app\n1 1\nsandbox\n"
        await session.exec("cd /tmp && export N=41; sleep 300 & echo $! > bg.pid")
        result = await session.exec("echo $((N + 1)); kill -0 $(cat bg.pid) && echo bg")
        assert (result.output, result.exit_code) == ("42\nbg\n", 0)
        timed = await session.exec("sleep 100", timeout=0.5)
        assert timed.timed_out and timed.exit_code is None
        assert (await session.exec("pwd; kill -0 $(cat bg.pid) && echo bg")).output == "/tmp\nbg\n"


async def test_capabilities_are_dockers_default_set(bwrap, base_images):
    async with await bwrap.create(SandboxSpec(image=base_images)) as session:
        caps = int((await session.exec("grep CapEff /proc/self/status | cut -f2")).output, 16)
        # CAP_SYS_ADMIN (21), CAP_SYS_PTRACE (19), CAP_NET_ADMIN (12), CAP_SYS_MODULE (16) are gone.
        assert all(not caps & (1 << bit) for bit in (21, 19, 12, 16))
        assert caps & (1 << 0) and caps & (1 << 5)  # CAP_CHOWN, CAP_KILL kept
        assert (await session.exec("mount -t tmpfs none /mnt")).exit_code != 0


async def test_upload_download_and_symlinks_stay_inside(bwrap, base_images, tmp_path):
    host_dir = tmp_path / "hostdir"
    host_dir.mkdir()
    (host_dir / "secret").write_text("host-only")
    async with await bwrap.create(SandboxSpec(image=base_images)) as session:
        await session.upload_files([TaskFile("test.sh", b"#!/bin/sh\necho ok\n", 0o755)], "/tests")
        assert (
            await session.exec("stat -c %a /tests/test.sh; /tests/test.sh")
        ).output == "755\nok\n"
        # Symlinks the agent plants point inside the sandbox, never at the host.
        await session.exec(f"ln -s {host_dir} /app/link; ln -s {host_dir}/secret /app/file-link")
        await session.upload(b"inside", "/app/link/planted")
        assert not (host_dir / "planted").exists()
        with pytest.raises(FileNotFoundError):
            await session.download("/app/file-link")
        await session.exec(f"mkdir -p {host_dir} && echo sandbox-copy > {host_dir}/secret")
        assert await session.download("/app/file-link") == b"sandbox-copy\n"
        assert (host_dir / "secret").read_text() == "host-only"
        with pytest.raises(FileNotFoundError):
            await session.download("/no/such/file")


async def test_isolation_from_the_host(bwrap, base_images, tmp_path):
    secret = tmp_path / f"secret-{uuid.uuid4().hex}"
    secret.write_text("host")
    server = await asyncio.start_server(lambda r, w: w.close(), "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    host = subprocess.Popen(["sleep", "987.25"])
    try:
        async with await bwrap.create(SandboxSpec(image=base_images)) as session:
            assert (await session.exec(f"cat {secret}")).exit_code != 0
            assert (
                await session.exec(f"curl -sS --max-time 2 http://127.0.0.1:{port}/", timeout=20)
            ).exit_code != 0
            assert (await session.exec("grep -la 987.25 /proc/[0-9]*/cmdline")).output == ""
            await session.exec(f"kill -9 {host.pid}; kill -9 -1")
        assert host.poll() is None
    finally:
        server.close()
        host.kill()
        host.wait()


async def test_limits_memory_pids_lifetime(bwrap, base_images):
    async with await bwrap.create(
        SandboxSpec(image=base_images, memory_mb=128, pids=64)
    ) as session:
        hog = await session.exec(
            "python3 -c \"b = bytearray(400 * 2**20); print('survived')\"", timeout=60
        )
        assert hog.exit_code == 137 and "survived" not in hog.output.splitlines()
        bomb = await session.exec("bomb() { bomb | bomb & }; bomb; sleep 2", timeout=4)
        assert (
            "fork: Resource temporarily unavailable" in bomb.output or "fork: retry" in bomb.output
        )
    short = await bwrap.create(SandboxSpec(image=base_images, lifetime_sec=2))
    with pytest.raises(SandboxDied):
        await short.exec("sleep 30", timeout=60)
    await short.close()


async def test_filling_the_disk_fails_in_that_sandbox_alone(bwrap, base_images):
    def loop_devices(folders: list[Path]) -> list[str]:
        """Loop devices backed by a file in ``folders`` (this test's sandboxes, not the machine's)."""
        listed = subprocess.run(["losetup", "-a"], capture_output=True, text=True).stdout
        return [line for line in listed.splitlines() if any(str(f) in line for f in folders)]

    spec = SandboxSpec(image=base_images, storage_mb=64)
    async with await bwrap.create(spec) as full, await bwrap.create(spec) as other:
        folders = [full.sandbox.session_dir, other.sandbox.session_dir]
        assert len(loop_devices(folders)) == 2
        fill = await full.exec(
            "dd if=/dev/zero of=/root/big bs=1M count=200 2>&1; du -m /root/big", timeout=60
        )
        assert "No space left on device" in fill.output, fill.output
        assert int(fill.output.split()[-2]) < 64
        assert (await full.exec("echo still-usable")).output == "still-usable\n"
        assert (
            await other.exec("head -c 10M /dev/zero > /root/ten && echo written")
        ).output == "written\n"
        assert "/root/big" in (
            await full.changed_files() or {}
        )  # the layer read from outside, as scoring does
        image = full.sandbox.session_dir / "disk.img"
        assert (
            image.stat().st_blocks * 512 < 80 * 2**20
        )  # sparse: it holds what was written, no more
    assert loop_devices(folders) == []  # the loop devices went with the sandboxes


async def test_rm_rf_and_isolation_between_sessions(bwrap, base_images):
    async with await bwrap.create(SandboxSpec(image=base_images)) as first:
        await first.exec(
            "echo one > /app/leak; rm -rf --no-preserve-root / 2>/dev/null", timeout=120
        )
        async with await bwrap.create(SandboxSpec(image=base_images)) as second:
            result = await second.exec("ls /app/leak; ls /bin/ls")
            assert "No such file" in result.output and "/bin/ls" in result.output


async def test_teardown_leaves_no_mount_cgroup_or_process(bwrap, base_images):
    session = await bwrap.create(SandboxSpec(image=base_images))
    jobs = await session.exec("sleep 1000 & echo $!; sleep 1001 & echo $!")
    sandbox = session.sandbox
    launcher = sandbox.channel.process.pid
    # The jobs' host pids: the launcher's descendants whose pid in the sandbox is a job's
    # (only this sandbox's processes count, not other tests' sleeps on the machine).
    inside = set(jobs.output.split())
    host = [p for p in descendants(launcher) if _nspid(p) in inside]
    assert len(inside) == 2 and len(host) == 2
    assert sandbox.cgroups and all(c.exists() for c in sandbox.cgroups)
    await session.close()
    assert not sandbox.session_dir.exists()
    assert not any(c.exists() for c in sandbox.cgroups)
    assert sandbox.name not in Path("/proc/self/mountinfo").read_text()
    leftover = [p for p in host if Path(f"/proc/{p}").exists()]
    assert leftover == [] and not Path(f"/proc/{launcher}").exists()


async def test_task_environment_image_runs_under_bwrap(bwrap):
    task = Task(
        id="bwrap-env",
        instruction="unused",
        environment_files=[
            TaskFile(
                "Dockerfile",
                b"FROM termrl/base:bookworm\nWORKDIR /work\nRUN echo built > /work/built\n",
            )
        ],
    )
    async with await bwrap.create(SandboxSpec.from_task(task)) as session:
        assert (await session.exec("pwd; cat built")).output == "/work\nbuilt\n"


async def test_egress_reaches_out_but_not_host_loopback(bwrap, base_images, host):
    hits: list[str] = []
    async with (
        serving(host, "outside", hits) as out_port,
        serving("127.0.0.1", "loopback", hits) as lo_port,
    ):
        async with await bwrap.create(SandboxSpec(image=base_images, network="egress")) as online:
            result = await online.exec(
                f"curl -sS --max-time 5 http://{host}:{out_port}/", timeout=20
            )
            assert result.output == "reached-outside"
            # slirp4netns maps the gateway 10.0.2.2 to the host's loopback unless told not to.
            for address in ("10.0.2.2", "127.0.0.1"):
                blocked = await online.exec(
                    f"curl -sS --max-time 3 http://{address}:{lo_port}/", timeout=20
                )
                assert blocked.exit_code != 0 and "reached" not in blocked.output
            assert (await online.exec("cat /etc/resolv.conf")).output == "nameserver 10.0.2.3\n"
            if hostca.host_ca_bundle(cache_root() / "sandbox") is not None:
                env = await online.exec(
                    f"echo $SSL_CERT_FILE; cmp {hostca.SANDBOX_PATH} $SSL_CERT_FILE && echo same"
                )
                assert env.output == f"{hostca.SYSTEM_BUNDLE}\nsame\n"
            slirp = online.sandbox.slirp
            assert slirp is not None and slirp.returncode is None
        assert slirp.returncode is not None  # closing the session ends its slirp4netns
        async with await bwrap.create(SandboxSpec(image=base_images)) as offline:
            result = await offline.exec(
                f"curl -sS --max-time 3 http://{host}:{out_port}/", timeout=20
            )
            assert result.exit_code != 0 and "reached" not in result.output
    assert hits == ["outside"]


async def test_egress_without_slirp4netns_is_unavailable(bwrap, base_images, monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(SandboxUnavailable, match="slirp4netns"):
        await bwrap.create(SandboxSpec(image=base_images, network="egress"))


async def test_manager_queues_starts_beyond_max_starting(base_images):
    if os.geteuid() != 0:
        pytest.skip("the bwrap backend needs root")
    async with SandboxManager(backend="bwrap", max_starting=2) as manager:
        real_start, in_flight, peak = manager.backend.start, [0], [0]

        async def counting_start(*args, **kwargs):
            in_flight[0] += 1
            peak[0] = max(peak[0], in_flight[0])
            try:
                return await real_start(*args, **kwargs)
            finally:
                in_flight[0] -= 1

        manager.backend.start = counting_start
        sessions = await asyncio.gather(
            *(manager.create(SandboxSpec(image=base_images)) for _ in range(6))
        )
        assert peak[0] == 2 and len(manager.sessions) == 6
        assert [(await s.exec("echo up")).output for s in sessions] == ["up\n"] * 6


async def test_egress_network_failure_is_env_init_failed_and_leaves_nothing(
    bwrap, base_images, tmp_path, monkeypatch
):
    broken = tmp_path / "slirp4netns"
    broken.write_text("#!/bin/sh\necho cannot open /dev/net/tun >&2\nexit 1\n")
    broken.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    before = set(bwrap.backend.state_dir.iterdir()) if bwrap.backend.state_dir.exists() else set()
    with pytest.raises(EnvInitFailed) as failed:
        await bwrap.create(SandboxSpec(image=base_images, network="egress"))
    assert "cannot open /dev/net/tun" in failed.value.log_tail
    assert set(bwrap.backend.state_dir.iterdir()) == before and bwrap.sessions == []


# --- Docker's defaults: /proc masked and read-only, a seccomp filter (issue 16) -------------------

KEYCTL = "python3 -c 'import ctypes; l = ctypes.CDLL(None, use_errno=True); print(l.syscall({nr}, 0, -3, 0), ctypes.get_errno())'"
"""KEYCTL_GET_KEYRING_ID of the session keyring: which, unfiltered, is the host's."""


async def test_host_wide_kernel_settings_are_read_only(bwrap, base_images):
    async with await bwrap.create(SandboxSpec(image=base_images)) as session:
        # kernel.core_pattern names a program the host's kernel runs as root on a crash: writing even
        # its current value back must fail.
        write = await session.exec(
            "v=$(cat /proc/sys/kernel/core_pattern); printf '%s\\n' \"$v\" > /proc/sys/kernel/core_pattern"
        )
        assert write.exit_code != 0 and "Read-only file system" in write.output
        for path in ("/proc/sys", "/proc/sysrq-trigger", "/proc/irq", "/proc/bus"):
            if Path(path).exists():
                assert (
                    await session.exec(f"[ -w {path} ] && echo writable || echo read-only")
                ).output == "read-only\n", path
        # The sandbox's own namespaced settings still answer for the sandbox.
        assert (await session.exec("cat /proc/sys/kernel/hostname")).output == "sandbox\n"


async def test_the_host_keyring_and_other_masked_proc_files_are_out_of_reach(bwrap, base_images):
    import platform

    keyctl = {"x86_64": 250, "amd64": 250, "aarch64": 219, "arm64": 219}.get(platform.machine())
    async with await bwrap.create(SandboxSpec(image=base_images)) as session:
        for path in ("/proc/keys", "/proc/timer_list", "/proc/kcore", "/proc/sched_debug"):
            if Path(path).exists():
                shown = await session.exec(f"head -c 200 {path} 2>/dev/null | wc -c")
                assert shown.output == "0\n", path
        if keyctl is not None:
            assert (await session.exec(KEYCTL.format(nr=keyctl))).output == "-1 1\n"  # EPERM
            assert (
                await session.exec_fresh(KEYCTL.format(nr=keyctl))
            ).output == "-1 1\n"  # scoring's too
        # No new user namespace, where a process would hold every capability.
        assert (await session.exec("unshare --user --map-root-user true")).exit_code != 0
        # Threads still start: clone3 answers ENOSYS and libc falls back to clone.
        threads = "python3 -c 'import threading; t = threading.Thread(target=print, args=(\"thread ran\",)); t.start(); t.join()'"
        assert (await session.exec(threads)).output == "thread ran\n"


async def test_the_agent_shell_runs_as_the_spec_user_without_privileges(bwrap, base_images):
    async with await bwrap.create(SandboxSpec(image=base_images, user="nobody")) as session:
        who = await session.exec("id -un; echo $HOME; grep CapEff /proc/self/status | cut -f2")
        name, home, caps = who.output.split()
        assert (name, home, int(caps, 16)) == ("nobody", "/nonexistent", 0)
        # Root-owned files stay out of reach, and no setuid binary gives root back.
        assert (await session.exec("touch /etc/planted")).exit_code != 0
        assert (await session.exec("su -c true root </dev/null")).exit_code != 0
        # A shell the agent exits is started again as the user, not as the root supervisor.
        await session.exec("exit 3")
        assert (await session.exec("id -u")).output == "65534\n"
        # Fresh processes (the tests) run as root unless asked otherwise.
        assert (await session.exec_fresh("id -un")).output == "root\n"
        fresh = await session.exec_fresh("id -un; grep CapEff /proc/self/status", user="nobody")
        assert fresh.output.split()[::2] == ["nobody", "0000000000000000"]
    async with await bwrap.create(SandboxSpec(image=base_images, user="4321")) as session:
        assert (await session.exec("id -u; id -g")).output == "4321\n4321\n"  # no passwd entry


async def test_an_agent_user_the_image_lacks_is_a_clear_start_failure(bwrap, base_images):
    with pytest.raises(EnvInitFailed) as failed:
        await bwrap.create(SandboxSpec(image=base_images, user="no-such-user"))
    assert "no such user in the image: no-such-user" in (failed.value.log_tail or "") + str(
        failed.value
    )


def _nspid(pid: int) -> str | None:
    """A process's innermost pid (its pid inside its sandbox), from /proc/PID/status."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("NSpid:"):
                return line.split()[-1]
    except OSError:
        pass
    return None
