"""The podman backend in remote mode: the CLI drives a podman service through its socket (``CONTAINER_HOST``).

This is how the sandbox stages run inside a stage container under ``termrl run
--runner docker``. Here the client and the service share this host, but the
backend acts as though they did not: the shell over the attach stream, no root of
its own, no private binds, and the agent's processes stopped and a timed-out
fresh process killed from inside the container.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from termrl.sandbox import SandboxManager, SandboxSpec
from termrl.sandbox.podman import PodmanBackend, remote_engine
from termrl.taskfolders import read_task_folder
from tests.sandbox.cancelling import left_after_cancelling

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "tasks"


def test_remote_mode_is_podman_with_container_host():
    assert remote_engine("podman", {"CONTAINER_HOST": "unix:///run/podman/podman.sock"})
    assert remote_engine("/usr/bin/podman", {"CONTAINER_HOST": "ssh://h/run/podman.sock"})
    assert not remote_engine("podman", {})
    assert not remote_engine("docker", {"CONTAINER_HOST": "unix:///x.sock"})


@pytest.mark.skipif(shutil.which("podman") is None, reason="needs podman")
def test_a_remote_session_gets_its_shell_over_the_attach_stream(monkeypatch):
    spec = SandboxSpec(image="termrl/base:bookworm")
    assert "--log-driver=passthrough" in PodmanBackend().run_argv(spec, "img", "n", "t")
    monkeypatch.setenv("CONTAINER_HOST", "unix:///run/podman/podman.sock")
    backend = PodmanBackend()
    argv = backend.run_argv(spec, "img", "n", "t")
    assert backend.remote and not backend.own_roots
    assert "--log-driver=none" in argv and "--log-driver=passthrough" not in argv


@pytest.fixture(scope="module")
def service() -> Iterator[str]:
    """A podman API service on a socket of its own: ``unix://...``."""
    if shutil.which("podman") is None:
        pytest.skip("needs podman")
    folder = Path(tempfile.mkdtemp(prefix="termrl-remote-"))
    socket = folder / "podman.sock"
    process = subprocess.Popen(
        ["podman", "system", "service", "--time=0", f"unix://{socket}"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        for _ in range(300):
            if socket.is_socket():
                break
            time.sleep(0.1)
        yield f"unix://{socket}"
    finally:
        process.terminate()
        process.wait(timeout=30)
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
async def remote(service: str, base_images: str, monkeypatch):
    monkeypatch.setenv("CONTAINER_HOST", service)
    async with SandboxManager(backend="podman", output_limit=8192) as manager:
        yield manager


@pytest.mark.podman
async def test_remote_session_runs_commands_moves_files_and_kills_a_timed_out_process(
    remote, base_images
):
    async with await remote.create(SandboxSpec(image=base_images)) as session:
        assert not session.private_binds
        await session.exec("cd /tmp && export N=41")
        assert (await session.exec("echo $((N + 1)); pwd")).output == "42\n/tmp\n"
        await session.upload(b"#!/bin/sh\necho hi\n", "/opt/x/run.sh", mode=0o755)
        assert (await session.exec("/opt/x/run.sh")).output == "hi\n"
        assert await session.download("/opt/x/run.sh") == b"#!/bin/sh\necho hi\n"
        slow = await session.exec_fresh("echo started; exec sleep 300", timeout=2)
        assert slow.timed_out and slow.output.startswith("started")
        # KILL_HELPER, run in the container, ended the fresh process (not only the podman client)
        left = await session.exec("ps -eo args | grep -c '^sleep 300' || true")
        assert left.output.strip() == "0"
        assert "A" in (await session.changed_files() or {}).values()


@pytest.mark.podman
async def test_a_fresh_process_whose_caller_is_cancelled_is_killed_from_inside(remote, base_images):
    async with await remote.create(SandboxSpec(image=base_images)) as session:
        assert await left_after_cancelling(session, 98752) == 0


@pytest.mark.podman
async def test_agent_processes_are_stopped_from_inside_and_resumed(remote, base_images):
    async with await remote.create(SandboxSpec(image=base_images)) as session:
        await session.exec("sleep 600 >/dev/null 2>&1 & echo $! > /tmp/bg.pid")
        state = "ps -o stat= -p $(cat /tmp/bg.pid)"
        async with session.agent_stopped():
            assert (await session.exec_fresh(state)).output.startswith("T")
        assert not (await session.exec(state)).output.startswith("T")


@pytest.mark.podman
@pytest.mark.parametrize("solve", [True, False])
async def test_a_task_is_scored_with_its_tests_uploaded(remote, solve):
    from termrl.taskrun import run_solution, run_tests

    task = read_task_folder(FIXTURES / "harbor" / "hello-file")
    async with await remote.create(SandboxSpec.from_task(task)) as session:
        if solve:
            solution = await run_solution(session, task)
            assert solution.exit_code == 0, solution.output
        outcome = await run_tests(session, task)
    assert outcome.passed is solve and outcome.reward == float(solve), outcome.output
