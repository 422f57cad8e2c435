"""The podman backend end to end: real containers from the local base image."""

from __future__ import annotations

import asyncio
import subprocess

import pytest

from termrl.artifacts.tasks import Task, TaskFile
from termrl.errors import EnvInitFailed, SandboxDied, SandboxUnavailable
from termrl.sandbox import SandboxManager, SandboxSpec, State

pytestmark = pytest.mark.podman


def _exists(name: str) -> bool:
    return subprocess.run(["podman", "container", "exists", name]).returncode == 0


async def test_persistent_shell_in_a_container(podman, base_images):
    async with await podman.create(
        SandboxSpec(image=base_images, env={"FROM_SPEC": "yes"})
    ) as session:
        assert (await session.exec("pwd")).output == "/app\n"  # the image's WORKDIR
        await session.exec("mkdir -p /work && cd /work && export N=41")
        await session.exec("sleep 600 >/dev/null 2>&1 & echo $! > /tmp/bg.pid")
        result = await session.exec(
            "echo $((N + 1)) $FROM_SPEC; pwd; kill -0 $(cat /tmp/bg.pid) && echo bg-alive"
        )
        assert (result.output, result.exit_code) == ("42 yes\n/work\nbg-alive\n", 0)
        assert not result.timed_out and not result.truncated and result.duration > 0


async def test_spec_workdir_and_exit_status(podman, base_images):
    async with await podman.create(SandboxSpec(image=base_images, workdir="/srv/task")) as session:
        assert (await session.exec("pwd")).output == "/srv/task\n"
        assert (await session.exec("ls /nonexistent")).exit_code == 2


async def test_timeout_returns_and_the_session_stays_usable(podman, base_images):
    async with await podman.create(SandboxSpec(image=base_images)) as session:
        await session.exec("cd /tmp && export KEEP=1")
        result = await session.exec("echo before; sleep 120", timeout=1)
        assert result.timed_out and result.exit_code is None and result.output.startswith("before")
        assert result.duration < 30
        after = await session.exec("pwd; echo $KEEP")
        assert (after.output, after.exit_code) == ("/tmp\n1\n", 0)
        assert podman.stats()["sandbox_exec_timeouts_total{backend=podman}"] >= 1


async def test_output_is_capped_with_head_and_tail(podman, base_images):
    async with await podman.create(SandboxSpec(image=base_images)) as session:
        result = await session.exec("echo FIRST; seq 1 100000; echo LAST")
        assert result.truncated and result.exit_code == 0
        assert result.output.startswith("FIRST\n1\n2\n") and result.output.endswith(
            "100000\nLAST\n"
        )
        assert "bytes of output truncated" in result.output and len(result.output) < 4200


async def test_upload_download_keep_bytes_and_modes(podman, base_images, tmp_path):
    local = tmp_path / "tool.sh"
    local.write_bytes(b"#!/bin/sh\necho from-path\n")
    local.chmod(0o750)
    blob = bytes(range(256)) * 100
    async with await podman.create(SandboxSpec(image=base_images)) as session:
        await session.upload(blob, "/data/deep/blob.bin")
        await session.upload(local, "/usr/local/bin/tool")
        await session.upload(
            b"#!/bin/sh\necho 1 > /logs/verifier/reward.txt\n", "/tests/test.sh", mode=0o755
        )
        await session.upload_files(
            [
                TaskFile("test_outputs.py", b"assert True\n"),
                TaskFile("helpers/run.sh", b"#!/bin/sh\n", 0o700),
            ],
            "/tests",
        )
        modes = await session.exec(
            "stat -c '%a %n' /usr/local/bin/tool /tests/test.sh /tests/helpers/run.sh /data/deep/blob.bin /tmp"
        )
        assert modes.output.split("\n")[:5] == [
            "750 /usr/local/bin/tool",
            "755 /tests/test.sh",
            "700 /tests/helpers/run.sh",
            "644 /data/deep/blob.bin",
            "1777 /tmp",  # extracting at / left existing directories alone
        ]
        assert (await session.exec("tool")).output == "from-path\n"
        await session.exec("mkdir -p /logs/verifier && bash /tests/test.sh")
        assert await session.download("/logs/verifier/reward.txt") == b"1\n"
        assert await session.download("/data/deep/blob.bin") == blob
        with pytest.raises(FileNotFoundError):
            await session.download("/logs/verifier/missing.txt")
        with pytest.raises(IsADirectoryError):
            await session.download("/tests")


async def test_task_environment_builds_once_and_is_cached(podman):
    marker = "cached-build-check-3"
    task = Task(
        id="sandbox-test-build",
        instruction="unused",
        environment_files=[
            TaskFile(
                "Dockerfile",
                f"FROM termrl/base:bookworm\nCOPY app/ /app/\nRUN echo {marker} > /built\n".encode(),
            ),
            TaskFile("app/run.sh", b"#!/bin/sh\necho run\n", 0o755),
        ],
        memory_mb=512,
        cpus=0.5,
    )
    spec = SandboxSpec.from_task(task)
    assert (spec.memory_mb, spec.cpus, spec.network) == (512, 0.5, "none")
    before = podman.stats().get("sandbox_image_builds_total{backend=podman,outcome=cached}", 0)
    ref = await podman.build_image(spec)
    assert ref.startswith("termrl/env:")
    assert await podman.build_image(SandboxSpec.from_task(task)) == ref
    assert podman.stats()["sandbox_image_builds_total{backend=podman,outcome=cached}"] >= before + 1
    async with await podman.create(spec) as session:
        result = await session.exec("cat /built; ./run.sh; stat -c %a run.sh")
        assert result.output == f"{marker}\nrun\n755\n"


async def test_failed_build_is_env_init_failed_with_log_tail(podman):
    task = Task(
        id="broken",
        instruction="unused",
        environment_files=[
            TaskFile(
                "Dockerfile", b"FROM termrl/base:bookworm\nRUN echo broken-step-output && exit 7\n"
            )
        ],
    )
    with pytest.raises(EnvInitFailed) as caught:
        await podman.create(SandboxSpec.from_task(task))
    assert "broken-step-output" in caught.value.log_tail
    assert podman.stats()["sandbox_failures_total{backend=podman,type=EnvInitFailed}"] >= 1


async def test_missing_image_is_env_init_failed(podman):
    with pytest.raises(EnvInitFailed) as caught:
        await podman.create(SandboxSpec(image="localhost/termrl/no-such-image:1"))
    assert "no-such-image" in caught.value.log_tail


async def test_killed_container_raises_sandbox_died(podman, base_images):
    session = await podman.create(SandboxSpec(image=base_images))
    subprocess.run(
        ["podman", "rm", "--force", "--time", "0", session.name], check=True, capture_output=True
    )
    with pytest.raises(SandboxDied):
        await session.exec("echo never")
    assert session.state is State.DEAD
    await session.close()
    await session.close()  # idempotent
    assert session.state is State.CLOSED


async def test_close_removes_the_container_and_manager_closes_leftovers(base_images):
    async with SandboxManager() as manager:
        closed = await manager.create(SandboxSpec(image=base_images))
        left_open = await manager.create(SandboxSpec(image=base_images))
        assert _exists(closed.name) and _exists(left_open.name)
        await closed.close()
        assert not _exists(closed.name)
        assert manager.sessions == [left_open]
    assert not _exists(left_open.name) and left_open.state is State.CLOSED


async def test_concurrent_sessions(podman, base_images):
    sessions = await asyncio.gather(
        *(podman.create(SandboxSpec(image=base_images)) for _ in range(4))
    )
    try:
        results = await asyncio.gather(
            *(s.exec(f"echo {i} > /tmp/id; cat /tmp/id") for i, s in enumerate(sessions))
        )
        assert [r.output for r in results] == ["0\n", "1\n", "2\n", "3\n"]
        assert podman.stats()["sandbox_active_sessions{backend=podman}"] >= 4
    finally:
        await asyncio.gather(*(s.close() for s in sessions))


async def test_docker_backend_is_unavailable_without_a_docker_engine(base_images):
    """No Docker engine runs here: the docker CLI (if any) fails with a typed error."""
    from shutil import which

    if (
        which("docker")
        and subprocess.run(["docker", "version"], capture_output=True).returncode == 0
    ):
        pytest.skip("a Docker engine is running here")
    with pytest.raises(SandboxUnavailable):
        async with SandboxManager(backend="docker") as manager:
            await manager.create(SandboxSpec(image=base_images))
    with pytest.raises(SandboxUnavailable):
        SandboxManager(backend="lxc")


def _host_extra_ca_line() -> str | None:
    """A line from the middle of one of the host's locally added CA certificates."""
    from pathlib import Path

    for pem in sorted(Path("/usr/local/share/ca-certificates").glob("**/*.crt")):
        lines = [
            line for line in pem.read_text().splitlines() if line and not line.startswith("-----")
        ]
        if len(lines) > 3:
            return lines[2]
    return None


async def test_host_ca_is_injected_at_build_and_egress_start_but_never_baked(podman, base_images):
    line = _host_extra_ca_line()
    if line is None:
        pytest.skip("this host has no locally added CA certificates")
    bundle = "/etc/ssl/certs/ca-certificates.crt"
    task = Task(
        id="sandbox-test-ca",
        instruction="unused",
        environment_files=[
            TaskFile(
                "Dockerfile",
                f"FROM termrl/base:bookworm\nRUN grep -qF '{line}' {bundle} && echo yes > /ca-seen-at-build\n".encode(),
            )
        ],
    )
    async with await podman.create(SandboxSpec.from_task(task)) as offline:
        assert (
            await offline.exec("cat /ca-seen-at-build")
        ).output == "yes\n"  # the build step saw it
        assert (
            await offline.exec(f"grep -cF '{line}' {bundle}")
        ).output == "0\n"  # not in the image
    async with await podman.create(SandboxSpec(image=base_images, network="egress")) as online:
        assert (await online.exec(f"grep -cF '{line}' $SSL_CERT_FILE")).output == "1\n"
    async with await podman.create(SandboxSpec(image=base_images)) as after:
        assert (await after.exec(f"grep -cF '{line}' {bundle}")).output == "0\n"


def test_base_image_refs_skip_build_stages_and_scratch():
    from termrl.artifacts.tasks import TaskFile
    from termrl.sandbox.image_build import base_image_refs

    dockerfile = (
        b"FROM --platform=linux/amd64 termrl/base:bookworm AS build\nRUN true\n"
        b"FROM build\nFROM scratch\nfrom debian:bookworm-slim as final\n"
    )
    spec = SandboxSpec(environment_files=[TaskFile("Dockerfile", dockerfile)])
    assert base_image_refs(spec) == ["termrl/base:bookworm", "debian:bookworm-slim"]


async def test_rebuilding_a_base_image_rebuilds_the_task_images_on_it(podman):
    base = "localhost/termrl-test/rebased:latest"

    def build_base(version: str) -> None:
        subprocess.run(
            ["podman", "build", "-q", "-t", base, "-f", "-", "."],
            input=f"FROM termrl/base:bookworm\nLABEL termrl.test.version={version}\n".encode(),
            check=True,
            capture_output=True,
            timeout=300,
        )

    task = Task(
        id="rebased",
        instruction="unused",
        environment_files=[TaskFile("Dockerfile", f"FROM {base}\nRUN true\n".encode())],
    )
    build_base("1")
    first = await podman.build_image(SandboxSpec.from_task(task))
    build_base("2")
    second = await podman.build_image(SandboxSpec.from_task(task))
    assert first != second
    label = subprocess.run(
        [
            "podman",
            "image",
            "inspect",
            "--format",
            '{{index .Labels "termrl.test.version"}}',
            second,
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert label == "2"


async def test_the_agent_shell_runs_as_the_spec_user_and_fresh_processes_as_asked(
    podman, base_images
):
    async with await podman.create(SandboxSpec(image=base_images, user="nobody")) as session:
        assert (await session.exec("id -un")).output == "nobody\n"
        assert (await session.exec_fresh("id -un")).output == "root\n"  # the image's USER
        assert (await session.exec_fresh("id -un", user="nobody")).output == "nobody\n"
        assert (await session.exec_fresh("id -un", user="no-such-user")).exit_code != 0
