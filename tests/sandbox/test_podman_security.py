"""Isolation of podman sandboxes (issue 3's security list).

Each test plants something on the host or in another sandbox and checks the
sandbox cannot get at it; removing the isolation it names (a bind mount of
the host, --network=host, --pid=host, the limits) makes it fail.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import time
import uuid

import pytest

from termrl.artifacts.tasks import Task, TaskFile
from termrl.errors import SandboxDied
from termrl.sandbox import SandboxSpec
from tests.sandbox.servers import serving

pytestmark = pytest.mark.podman


async def test_cannot_read_a_file_planted_on_the_host(podman, base_images, tmp_path):
    secret = f"host-secret-{uuid.uuid4().hex}"
    planted = [tmp_path / "secret.txt", f"/tmp/termrl-{secret}.txt"]
    for path in planted:
        with open(path, "w") as f:
            f.write(secret)
    try:
        async with await podman.create(SandboxSpec(image=base_images)) as session:
            for path in planted:
                assert (await session.exec(f"cat {path}")).exit_code != 0
            search = await session.exec(
                f"grep -rls {secret} /tmp /root /home /app /var 2>/dev/null | head -1"
            )
            assert search.output == ""
    finally:
        os.unlink(planted[1])


async def test_cannot_reach_a_server_on_host_loopback(podman, base_images):
    hits: list[str] = []
    async with serving("127.0.0.1", "loopback", hits) as port:
        for network in ("none", "egress"):
            async with await podman.create(
                SandboxSpec(image=base_images, network=network)
            ) as session:
                for address in ("127.0.0.1", "10.0.2.2"):  # 10.0.2.2: slirp4netns's way to the host
                    result = await session.exec(
                        f"curl -sS --max-time 3 http://{address}:{port}/", timeout=20
                    )
                    assert result.exit_code != 0 and "reached" not in result.output
    assert hits == []


async def test_egress_sessions_reach_out_but_not_each_other(podman, base_images, host):
    hits: list[str] = []
    async with serving(host, "outside", hits) as port:
        spec = SandboxSpec(image=base_images, network="egress")
        async with await podman.create(spec) as first, await podman.create(spec) as second:
            await first.exec(
                "echo first-session > /tmp/whoami && cd /tmp && nohup python3 -m http.server 8123 "
                ">/dev/null 2>&1 &"
            )
            await first.exec(
                "for i in $(seq 50); do curl -fs http://127.0.0.1:8123/ >/dev/null && break; sleep 0.1; done"
            )
            addresses = (await first.exec("hostname -I")).output.split()
            assert addresses
            for (
                address
            ) in addresses:  # on a shared bridge the second session would reach the first's server
                result = await second.exec(
                    f"curl -sS --max-time 3 http://{address}:8123/whoami", timeout=20
                )
                assert "first-session" not in result.output
            for session in (first, second):
                assert (
                    await session.exec(f"curl -sS --max-time 5 http://{host}:{port}/", timeout=20)
                ).output == "reached-outside"
    assert hits == ["outside", "outside"]


async def test_an_image_build_reaches_out_but_not_host_loopback(podman, base_images, host):
    hits: list[str] = []
    async with (
        serving(host, "outside", hits) as out_port,
        serving("127.0.0.1", "loopback", hits) as lo_port,
    ):
        # A line no earlier build had: neither an image of the same key nor podman's layer cache
        # may stand in for this build (the same two ports can come round again).
        dockerfile = (
            f"FROM {base_images}\n"
            f"RUN echo {uuid.uuid4().hex} > /build-id\n"
            f"RUN curl -sS --max-time 5 http://{host}:{out_port}/ > /outside\n"
            f"RUN (curl -sS --max-time 3 http://127.0.0.1:{lo_port}/ || echo blocked) > /loopback 2>/dev/null\n"
        )
        task = Task(
            id="sandbox-test-build-network",
            instruction="unused",
            environment_files=[TaskFile("Dockerfile", dockerfile.encode())],
        )
        async with await podman.create(SandboxSpec.from_task(task)) as session:
            assert (
                await session.exec("cat /outside /loopback")
            ).output == "reached-outsideblocked\n"
    assert hits == ["outside"]


async def test_no_network_at_all_by_default(podman, base_images):
    async with await podman.create(SandboxSpec(image=base_images)) as session:
        links = await session.exec("ip -o link show | awk -F': ' '{print $2}'")
        assert links.output.split() == ["lo"]


async def test_cannot_see_or_signal_host_processes(podman, base_images):
    marker = f"{time.time_ns() % 10**9}.5"  # an argv no sandbox process has
    host = subprocess.Popen(["sleep", marker])
    try:
        async with await podman.create(SandboxSpec(image=base_images)) as session:
            seen = await session.exec(f"grep -l -a -- {marker} /proc/[0-9]*/cmdline 2>/dev/null")
            assert seen.output == ""
            count = await session.exec("ls -d /proc/[0-9]* | wc -l")
            assert int(count.output) < 20  # only the sandbox's own few processes
            await session.exec(f"kill -9 {host.pid}; kill -9 -1")
        assert host.poll() is None
    finally:
        host.kill()
        host.wait()


@pytest.mark.slow
@pytest.mark.ci
async def test_rm_rf_root_and_fork_bomb_leave_image_host_and_manager_healthy(
    podman, base_images, tmp_path
):
    canary = tmp_path / "canary"
    canary.write_text("still here")
    async with await podman.create(SandboxSpec(image=base_images, pids=128)) as session:
        await session.exec("rm -rf --no-preserve-root / 2>/dev/null", timeout=120)
        assert (await session.exec("ls /bin/ls")).exit_code != 0  # it did wipe its own root
    async with await podman.create(SandboxSpec(image=base_images, pids=128)) as session:
        bomb = await session.exec("bomb() { bomb | bomb & }; bomb; sleep 3", timeout=5)
        # The pids limit stops it: forks fail inside the sandbox (and only there).
        assert (
            "fork: Resource temporarily unavailable" in bomb.output or "fork: retry" in bomb.output
        )
    assert canary.read_text() == "still here"
    assert subprocess.run(["true"]).returncode == 0  # the host can still fork
    async with await podman.create(SandboxSpec(image=base_images)) as fresh:
        intact = await fresh.exec("ls /bin/ls /usr/bin/python3 && echo intact")
        assert intact.exit_code == 0 and intact.output.endswith("intact\n")


async def test_memory_hog_is_killed_at_the_limit(podman, base_images, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    async with await podman.create(SandboxSpec(image=base_images, memory_mb=128)) as session:
        hog = await session.exec(
            "python3 -c \"b = bytearray(512 * 2**20); b[::4096] = b'x' * len(b[::4096]); print('survived')\"",
            timeout=60,
        )
        assert (
            "survived" not in hog.output.splitlines() and hog.exit_code == 137
        )  # OOM-killed (SIGKILL)
        assert (await session.exec("echo still-usable")).output == "still-usable\n"
    assert (
        list(tmp_path.iterdir()) == []
    )  # conmon's "oom" marker stays out of the caller's directory


async def test_lifetime_limit_is_enforced(podman, base_images):
    session = await podman.create(SandboxSpec(image=base_images, lifetime_sec=3))
    assert (await session.exec("echo alive")).exit_code == 0
    with pytest.raises(SandboxDied):
        await session.exec("sleep 30", timeout=60)
    # podman removes the ended container on its own schedule: seconds on a loaded machine
    deadline = time.monotonic() + 60
    while subprocess.run(["podman", "container", "exists", session.name]).returncode == 0:
        assert time.monotonic() < deadline, f"{session.name} outlived its lifetime by a minute"
        await asyncio.sleep(0.5)
    with pytest.raises(SandboxDied, match="lifetime"):
        await session.exec("echo too-late")
    await session.close()


async def test_files_from_one_session_never_appear_in_another(podman, base_images):
    async with await podman.create(SandboxSpec(image=base_images)) as first:
        await first.exec(
            "echo one > /app/leak.txt; echo one > /tmp/leak.txt; echo one > /root/leak.txt"
        )
        await first.upload(b"uploaded", "/etc/leak.txt")
        async with await podman.create(SandboxSpec(image=base_images)) as second:
            found = await second.exec(
                "ls /app/leak.txt /tmp/leak.txt /root/leak.txt /etc/leak.txt 2>&1"
            )
            assert found.exit_code != 0 and found.output.count("No such file") == 4
    async with await podman.create(SandboxSpec(image=base_images)) as later:
        assert (await later.exec("ls /app/leak.txt")).exit_code != 0


async def test_tests_and_solution_are_not_readable_before_upload(podman):
    secret_test = f"assert grade() == '{uuid.uuid4().hex}'"
    secret_solution = f"echo {uuid.uuid4().hex}"
    task = Task(
        id="sandbox-test-hidden-files",
        instruction="unused",
        environment_files=[TaskFile("Dockerfile", b"FROM termrl/base:bookworm\nWORKDIR /app\n")],
        test_files=[TaskFile("test_outputs.py", secret_test.encode())],
        solution_files=[TaskFile("solve.sh", secret_solution.encode(), 0o755)],
    )
    async with await podman.create(SandboxSpec.from_task(task)) as session:
        assert (await session.exec("ls /tests /solution")).exit_code != 0
        needle = secret_test.split("'")[1]
        search = await session.exec(
            f"grep -rIl --exclude-dir=proc --exclude-dir=sys {needle} / 2>/dev/null | head -1",
            timeout=120,
        )
        assert search.output == ""
        await session.upload_files(task.test_files, "/tests")
        assert (await session.exec("cat /tests/test_outputs.py")).output == secret_test


async def test_host_wide_kernel_settings_are_read_only(podman, base_images):
    async with await podman.create(SandboxSpec(image=base_images)) as session:
        write = await session.exec(
            "v=$(cat /proc/sys/kernel/core_pattern); printf '%s\\n' \"$v\" > /proc/sys/kernel/core_pattern"
        )
        assert write.exit_code != 0
        assert (await session.exec("cat /proc/keys 2>/dev/null | wc -c")).output == "0\n"


def _loop_backing_files() -> set[str]:
    """The files behind this host's loop devices (other runs' sandboxes may come and go)."""
    listed = subprocess.run(
        ["losetup", "--list", "--noheadings", "--output", "BACK-FILE"],
        capture_output=True,
        text=True,
    ).stdout
    return {line.strip().removesuffix(" (deleted)") for line in listed.splitlines()}


async def test_disk_fill_fails_that_sandbox_alone(podman, base_images):
    if os.geteuid() != 0:
        pytest.skip("the podman disk limit mounts the container's root itself: rootful podman only")
    spec = SandboxSpec(image=base_images, storage_mb=64)
    async with await podman.create(spec) as full, await podman.create(spec) as other:
        fill = await full.exec(
            "dd if=/dev/zero of=/big bs=1M count=200 2>&1; du -m /big", timeout=60
        )
        assert "No space left on device" in fill.output, fill.output
        assert int(fill.output.split()[-2]) < 64
        assert (await full.exec("echo still-usable")).output == "still-usable\n"
        assert (
            await other.exec("head -c 10M /dev/zero > /root/ten && echo written")
        ).output == "written\n"
        assert (await full.changed_files() or {}).get(
            "/big"
        ) == "A"  # the layer, read from the host
        layer = full.sandbox.layer
        assert (
            layer is not None and (layer.directory / "disk.img").stat().st_blocks * 512 < 80 * 2**20
        )  # sparse
        images = {str(s.sandbox.layer.directory / "disk.img") for s in (full, other)}
        assert images <= _loop_backing_files()  # each sandbox's disk is a loop device
    assert not layer.directory.exists() and not os.path.ismount(layer.root)
    assert not images & _loop_backing_files()  # the loop devices went with the sandboxes


async def test_an_image_keeps_its_environment_workdir_and_user(podman, base_images):
    dockerfile = (
        b"FROM termrl/base:bookworm\nENV GREETING=hello\nRUN useradd -m player && mkdir /play"
        b" && chown player /play\nWORKDIR /play\nUSER player\n"
    )
    spec = SandboxSpec(environment_files=[TaskFile("Dockerfile", dockerfile)], workdir="/play")
    async with await podman.create(spec) as session:
        result = await session.exec('echo "$GREETING $(pwd) $(id -un)"; touch mine && echo wrote')
        assert result.output == "hello /play player\nwrote\n", result.output
        fresh = await session.exec_fresh("echo $GREETING; id -un", timeout=30)
        assert fresh.output == "hello\nplayer\n", fresh.output
