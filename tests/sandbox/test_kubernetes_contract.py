"""The session contract that test_podman.py checks on podman, on the kubernetes backend (the stand-in).

The shared suites (test_fresh, test_timeouts, test_transfers) run on kubernetes through the ``local``
fixture; these are the podman-only ones, with the pod where podman has its container.
"""

from __future__ import annotations

import asyncio

import pytest
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from termrl.artifacts.tasks import TaskFile
from termrl.errors import EnvInitFailed, SandboxDied
from termrl.sandbox import SandboxManager, SandboxSpec
from termrl.sandbox.session import State

pytestmark = [pytest.mark.podman, pytest.mark.timeout(600)]
NAMESPACE = "termrl-sandboxes"


@pytest.fixture
async def kube(k8s_standin):
    """A kubernetes-backed manager on the stand-in; closes whatever a test leaves open."""
    options = {"kubeconfig": str(k8s_standin.kubeconfig), "start_timeout_sec": 30}
    async with SandboxManager("kubernetes", output_limit=4096, **options) as manager:
        yield manager


def _exists(kube: SandboxManager, name: str) -> bool:
    try:
        kube.backend.api.read_namespaced_pod(name, NAMESPACE)
    except ApiException as e:
        if e.status == 404:
            return False
        raise
    return True


async def test_persistent_shell_in_a_pod(kube, base_images):
    spec = SandboxSpec(image=base_images, env={"FROM_SPEC": "yes"})
    async with await kube.create(spec) as session:
        assert (await session.exec("pwd")).output == "/app\n"  # the image's WORKDIR
        await session.exec("mkdir -p /work && cd /work && export N=41")
        await session.exec("sleep 600 >/dev/null 2>&1 & echo $! > /tmp/bg.pid")
        result = await session.exec(
            "echo $((N + 1)) $FROM_SPEC; pwd; kill -0 $(cat /tmp/bg.pid) && echo bg-alive"
        )
        assert (result.output, result.exit_code) == ("42 yes\n/work\nbg-alive\n", 0)


async def test_spec_workdir_exit_status_and_timeout_recovery(kube, base_images):
    async with await kube.create(SandboxSpec(image=base_images, workdir="/srv/task")) as session:
        assert (await session.exec("pwd")).output == "/srv/task\n"
        assert (await session.exec("ls /nonexistent")).exit_code == 2
        await session.exec("cd /tmp && export KEEP=1")
        result = await session.exec("echo before; sleep 120", timeout=1)
        assert result.timed_out and result.exit_code is None and result.output.startswith("before")
        after = await session.exec("pwd; echo $KEEP")
        assert (after.output, after.exit_code) == ("/tmp\n1\n", 0)


async def test_output_is_capped_with_head_and_tail(kube, base_images):
    async with await kube.create(SandboxSpec(image=base_images)) as session:
        result = await session.exec("echo FIRST; seq 1 100000; echo LAST")
        assert result.truncated and result.exit_code == 0
        assert result.output.startswith("FIRST\n1\n2\n") and result.output.endswith("LAST\n")


async def test_upload_download_keep_bytes_and_modes(kube, base_images):
    blob = bytes(range(256)) * 1000  # 256 KB: several upload chunks, every byte value
    async with await kube.create(SandboxSpec(image=base_images)) as session:
        await session.upload(blob, "/data/deep/blob.bin")
        await session.upload(
            b"#!/bin/sh\necho 1 > /logs/verifier/reward.txt\n", "/tests/test.sh", mode=0o755
        )
        await session.upload_files([TaskFile("helpers/run.sh", b"#!/bin/sh\n", 0o700)], "/tests")
        modes = await session.exec("stat -c '%a %n' /tests/test.sh /tests/helpers/run.sh /tmp")
        assert modes.output.split("\n")[:3] == [
            "755 /tests/test.sh",
            "700 /tests/helpers/run.sh",
            "1777 /tmp",
        ]
        await session.exec("mkdir -p /logs/verifier && bash /tests/test.sh")
        assert await session.download("/logs/verifier/reward.txt") == b"1\n"
        assert await session.download("/data/deep/blob.bin") == blob
        with pytest.raises(FileNotFoundError):
            await session.download("/logs/verifier/missing.txt")


async def test_a_missing_image_is_env_init_failed(k8s_standin):
    """The pod stays Pending (ErrImagePull) until the start timeout."""
    options = {"kubeconfig": str(k8s_standin.kubeconfig), "start_timeout_sec": 3}
    async with SandboxManager("kubernetes", **options) as manager:
        with pytest.raises(EnvInitFailed, match="did not start"):
            await manager.create(SandboxSpec(image="localhost/termrl/no-such-image:1"))


async def test_a_deleted_pod_raises_sandbox_died(kube, base_images):
    session = await kube.create(SandboxSpec(image=base_images))
    kube.backend.api.delete_namespaced_pod(session.sandbox.name, NAMESPACE, grace_period_seconds=0)
    with pytest.raises(SandboxDied):
        await session.exec("echo never")
    assert session.state is State.DEAD
    await session.close()
    assert session.state is State.CLOSED


async def test_close_deletes_the_pod_and_the_manager_closes_leftovers(k8s_standin, base_images):
    api = client.CoreV1Api(config.new_client_from_config(config_file=str(k8s_standin.kubeconfig)))
    async with SandboxManager("kubernetes", api=api) as manager:
        closed, left_open = await asyncio.gather(
            manager.create(SandboxSpec(image=base_images)),
            manager.create(SandboxSpec(image=base_images)),
        )
        assert _exists(manager, closed.sandbox.name) and _exists(manager, left_open.sandbox.name)
        await closed.close()
        assert not _exists(manager, closed.sandbox.name)
        assert manager.sessions == [left_open]
    assert not _exists(manager, left_open.sandbox.name) and left_open.state is State.CLOSED


async def test_a_character_split_across_stream_frames_arrives_whole(kube, base_images):
    """The API server frames output as it reads it, so a UTF-8 character can straddle two frames; a
    client decoding each frame on its own (the official one's text mode) turns it into U+FFFD."""
    split = (
        "python3 -c \"import sys, time; o = sys.stdout.buffer; e = 'é'.encode(); "
        "o.write(e[:1]); o.flush(); time.sleep(0.3); o.write(e[1:] + b'\\n')\""
    )
    async with await kube.create(SandboxSpec(image=base_images)) as session:
        assert (await session.exec(split)).output == "é\n"
        assert (await session.exec_fresh(split)).output == "é\n"
        assert (await session.exec("printf 'ü%.0s' 1 2 3")).output == "üüü"
