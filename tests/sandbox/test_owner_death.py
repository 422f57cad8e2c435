"""A killed owner leaves no sandbox running, no mount and no loop device (issue 40).

The owner is a real child process that starts an idle sandbox and a busy one (inside a
long foreground command, which never reads its input again) and is then SIGKILLed with
its whole process group, as the OOM killer or ``kill -9`` of a stage would.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from termrl.sandbox import SandboxManager, SandboxSpec
from termrl.sandbox import podman as podman_module
from termrl.sandbox.podman import PodmanBackend
from termrl.sandbox.warden import LEASE_LABEL, lease_alive, own_lease

pytestmark = pytest.mark.podman


@pytest.fixture(params=["podman", "bwrap"])
def backend(request, base_images: str) -> str:
    if request.param == "bwrap" and os.geteuid() != 0:
        pytest.skip("the bwrap backend needs root")
    return request.param


OWNER = r"""
import asyncio, json, os, sys
from termrl.sandbox import SandboxManager, SandboxSpec
from termrl.sandbox.warden import own_lease

async def main(backend, image):
    async with SandboxManager(backend=backend) as manager:
        idle = await manager.create(SandboxSpec(image=image))
        busy = await manager.create(SandboxSpec(image=image))
        dirs = [str(getattr(s.sandbox, "session_dir", "") or getattr(s.sandbox, "layer", None) and s.sandbox.layer.directory or "") for s in (idle, busy)]
        warden = getattr(manager.backend, "warden", None)
        busy_command = f"sleep 999.{os.getpid()}"  # one no other owner runs
        print(json.dumps({"lease": own_lease(), "names": [idle.sandbox.name, busy.sandbox.name],
                          "dirs": dirs, "warden": warden.pid if warden else None,
                          "busy_command": busy_command}), flush=True)
        await busy.exec(busy_command, timeout=900)

asyncio.run(main(sys.argv[1], sys.argv[2]))
"""


def _start_owner(backend: str, image: str) -> tuple[subprocess.Popen, dict]:
    owner = subprocess.Popen(
        [sys.executable, "-c", OWNER, backend, image],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own process group, killed whole below
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])},
    )
    line = owner.stdout.readline()
    if not line:
        owner.kill()
        pytest.fail(f"the owner did not start its sandboxes (exit {owner.wait()})")
    info = json.loads(line)
    # The line comes before the busy command is sent: killed sooner, the busy shell would
    # read EOF and exit like the idle one, and there would be nothing busy left to test.
    deadline = time.monotonic() + 60
    while not _running(info["busy_command"]):
        if time.monotonic() > deadline or owner.poll() is not None:
            _kill_group(owner)
            pytest.fail(f"the busy sandbox never ran {info['busy_command']!r}")
        time.sleep(0.1)
    return owner, info


def _running(command: str) -> bool:
    return subprocess.run(["pgrep", "-f", "-x", command], capture_output=True).returncode == 0


def _kill_group(owner: subprocess.Popen) -> None:
    os.killpg(owner.pid, signal.SIGKILL)
    owner.wait()


def _leftovers(info: dict) -> list[str]:
    """What of the owner's sandboxes still exists: containers, processes, mounts, loop devices."""
    found = []
    containers = subprocess.run(
        ["podman", "ps", "-a", "-q", "--filter", f"label={LEASE_LABEL}={info['lease']}"],
        capture_output=True,
        text=True,
    ).stdout.split()
    found += [f"container {c}" for c in containers]
    mounts = Path("/proc/self/mountinfo").read_text()
    loops = subprocess.run(["losetup", "-a"], capture_output=True, text=True).stdout
    for directory in filter(None, info["dirs"]):
        if directory in mounts:
            found.append(f"a mount under {directory}")
        if directory in loops:
            found.append(f"a loop device on {directory}")
    for name in info["names"]:
        procs = subprocess.run(["pgrep", "-f", name], capture_output=True, text=True).stdout
        found += [f"process {p} of {name}" for p in procs.split()]
    return found


def _gone_within(info: dict, seconds: float) -> list[str]:
    deadline = time.monotonic() + seconds
    while (left := _leftovers(info)) and time.monotonic() < deadline:
        time.sleep(0.5)
    return left


def test_a_sigkilled_owner_leaves_no_sandbox_mount_or_loop_device(backend, base_images):
    owner, info = _start_owner(backend, base_images)
    try:
        assert lease_alive(info["lease"]) is True
        _kill_group(owner)
        assert lease_alive(info["lease"]) is False
        assert _gone_within(info, 10.0) == []
    finally:
        if owner.poll() is None:
            _kill_group(owner)


def _orphaned(image: str) -> dict:
    """A dead owner's sandboxes with no warden left to remove them (killed with it)."""
    owner, info = _start_owner("podman", image)
    os.kill(info["warden"], signal.SIGKILL)
    _kill_group(owner)
    assert _leftovers(info), "the dead owner's containers should still be there"
    return info


async def test_cleanup_removes_a_dead_owners_running_sandbox_and_keeps_a_live_ones(base_images):
    live, live_info = _start_owner("podman", base_images)  # first: it reaps when it starts
    dead = _orphaned(base_images)
    try:
        assert await PodmanBackend("podman").cleanup() >= 1  # the busy one (the idle one saw EOF)
        assert _leftovers(dead) == []
        assert len([x for x in _leftovers(live_info) if x.startswith("container")]) == 2
    finally:
        _kill_group(live)
    assert _gone_within(live_info, 10.0) == []


async def test_a_stage_starting_sandboxes_first_removes_what_dead_owners_left(
    base_images, monkeypatch
):
    dead = _orphaned(base_images)
    monkeypatch.setattr(podman_module, "_REAPED", set())  # as in a new stage process
    async with (
        SandboxManager(backend="podman") as manager,
        await manager.create(SandboxSpec(image=base_images)) as mine,
    ):
        assert _leftovers(dead) == []
        assert (await mine.exec("echo still here")).output.strip() == "still here"
        labels = subprocess.run(
            ["podman", "inspect", "--format", "{{json .Config.Labels}}", mine.sandbox.name],
            capture_output=True,
            text=True,
        ).stdout
        assert json.loads(labels)[LEASE_LABEL] == own_lease()


def test_a_lease_tells_a_live_owner_from_a_dead_one_and_a_recycled_pid():
    assert lease_alive(own_lease()) is True
    boot_ns, _, _ = own_lease().rpartition("/")[0].rpartition("/")
    child = subprocess.Popen(["sleep", "30"])
    ticks = Path(f"/proc/{child.pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    lease = f"{boot_ns}/{child.pid}/{ticks}"
    assert lease_alive(lease) is True
    assert lease_alive(f"{boot_ns}/{child.pid}/{int(ticks) + 1}") is False  # the pid, reused later
    child.kill()
    child.wait()
    assert lease_alive(lease) is False
    assert lease_alive("another-boot/4026531836/1/1") is None
    assert lease_alive("") is None
