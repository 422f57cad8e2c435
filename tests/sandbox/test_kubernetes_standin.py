"""The kubernetes backend end to end: the official client against ``tests.k8s_standin`` (pods are podman pods).

What each test guards is a fix of issue 34's review: a client per exec stream, a full quota waited
out, a helper past its deadline, owner references and ``termrl sandbox gc``, SIGTERM in a stage.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import uuid

import pytest
from click.testing import CliRunner
from kubernetes import client, config

from termrl.errors import SandboxDied
from termrl.sandbox import SandboxManager, SandboxSpec
from termrl.sandbox import kubernetes as backend_module
from termrl.sandbox.cli import sandbox as sandbox_cli
from termrl.sandbox.kubernetes_gc import delete_orphaned_sandboxes
from termrl.sandbox.kubernetes_manifests import StageOwner

pytestmark = [pytest.mark.podman, pytest.mark.timeout(600)]
NAMESPACE = "termrl-sandboxes"


def _api(standin) -> client.CoreV1Api:
    return client.CoreV1Api(config.new_client_from_config(config_file=str(standin.kubeconfig)))


def _sandbox_pods(api: client.CoreV1Api, namespace: str = NAMESPACE, **labels: str) -> set[str]:
    selector = ",".join(["termrl.sandbox=1", *(f"{k}={v}" for k, v in labels.items())])
    return {
        p.metadata.name for p in api.list_namespaced_pod(namespace, label_selector=selector).items
    }


async def test_sixteen_sandboxes_mix_exec_streams_with_rest_calls(k8s_standin, base_images):
    """The official client's ``stream()`` swaps ``api_client.request`` while it opens a websocket; on a
    client shared with REST calls from other threads, those go out as websocket handshakes
    (kubernetes-client/python#928). Each exec stream must have a client of its own."""
    api = _api(k8s_standin)  # one client for the manager's REST calls, as a stage has
    group = uuid.uuid4().hex[:8]
    spec = SandboxSpec(image=base_images, labels={"termrl.group": group})
    async with SandboxManager("kubernetes", api=api, output_limit=4096) as manager:
        sessions = await asyncio.gather(*(manager.create(spec) for _ in range(16)))

        async def work(index: int, session) -> None:
            for round_ in range(4):
                fresh, shell, pod, listed, alive = await asyncio.gather(
                    session.exec_fresh(f"echo fresh-{index}-{round_}"),
                    session.exec(f"echo shell-{index}-{round_}"),
                    asyncio.to_thread(api.read_namespaced_pod, session.sandbox.name, NAMESPACE),
                    asyncio.to_thread(_sandbox_pods, api, **{"termrl.group": group}),
                    session.sandbox.alive(),
                )
                assert fresh.output == f"fresh-{index}-{round_}\n" and fresh.exit_code == 0
                assert shell.output == f"shell-{index}-{round_}\n"
                assert pod.status.phase == "Running" and alive
                assert session.sandbox.name in listed

        await asyncio.gather(*(work(i, s) for i, s in enumerate(sessions)))
    assert _sandbox_pods(api, **{"termrl.group": group}) == set()  # closed: deleted


async def test_a_full_quota_is_waited_out_with_backoff(k8s_standin, base_images):
    """A ResourceQuota at its limit refuses pods with 403 "exceeded quota"; the backend tries again
    (backoff) until a slot frees, instead of failing the episode at once."""
    api = _api(k8s_standin)
    namespace = f"quota-{uuid.uuid4().hex[:6]}"
    api.create_namespace({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    api.create_namespaced_resource_quota(
        namespace,
        {
            "apiVersion": "v1",
            "kind": "ResourceQuota",
            "metadata": {"name": "one"},
            "spec": {"hard": {"pods": "1"}},
        },
    )
    spec = SandboxSpec(image=base_images, network="egress")
    options = {"namespace": namespace, "api": api}
    async with SandboxManager("kubernetes", **options) as manager:
        first = await manager.create(spec)
        refused_before = len(k8s_standin.store.refused)
        second = asyncio.ensure_future(manager.create(spec))
        for _ in range(600):  # two refusals: it came back after the first
            if len(k8s_standin.store.refused) >= refused_before + 2 or second.done():
                break
            await asyncio.sleep(0.1)
        assert not second.done(), second.exception()
        assert "exceeded quota" in k8s_standin.store.refused[-1]
        await first.close()
        async with await second as session:
            assert (await session.exec("echo second")).output == "second\n"
    api.delete_namespace(namespace)


async def test_a_helper_past_its_deadline_is_sandbox_died_not_a_crash(
    k8s_standin, base_images, monkeypatch
):
    """The client's ``returncode`` parses the error channel; a helper stream closed at its deadline has
    none, and it raised TypeError. Now: SandboxDied, naming the pod."""
    async with SandboxManager("kubernetes", api=_api(k8s_standin)) as manager:
        session = await manager.create(SandboxSpec(image=base_images))
        monkeypatch.setattr(backend_module, "HELPER_TIMEOUT_SEC", 1.0)  # started: the verifier too
        with pytest.raises(SandboxDied, match="did not finish"):
            await asyncio.to_thread(session.sandbox._exec, "sleep 30")
        assert (await session.exec("echo alive")).output == "alive\n"


async def _stage_pod(api: client.CoreV1Api, namespace: str, image: str) -> StageOwner:
    name = f"stage-{uuid.uuid4().hex[:6]}"
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {"containers": [{"name": "main", "image": image, "command": ["sleep", "600"]}]},
    }
    created = await asyncio.to_thread(api.create_namespaced_pod, namespace, pod)
    return StageOwner(namespace, name, created.metadata.uid)


async def test_sandboxes_name_their_stage_pod_and_go_with_it(k8s_standin, base_images):
    """In the stage's namespace: an owner reference, so deleting the stage pod deletes its sandboxes.
    In another: labels only (the garbage collector would delete a sandbox whose owner is elsewhere)."""
    api = _api(k8s_standin)
    owner = await _stage_pod(api, NAMESPACE, base_images)
    options = {"kubeconfig": str(k8s_standin.kubeconfig), "owner": owner}
    async with SandboxManager("kubernetes", **options) as manager:
        session = await manager.create(SandboxSpec(image=base_images))
        pod = api.read_namespaced_pod(session.sandbox.name, NAMESPACE)
        (reference,) = pod.metadata.owner_references
        assert (reference.kind, reference.name, reference.uid) == ("Pod", owner.name, owner.uid)
        assert pod.metadata.labels["termrl.owner-uid"] == owner.uid
        api.delete_namespaced_pod(owner.name, NAMESPACE, grace_period_seconds=0)
        assert session.sandbox.name not in _sandbox_pods(api)
        elsewhere = StageOwner("termrl", "stage-x", str(uuid.uuid4()))
        manager.backend.owner = elsewhere
        other = await manager.create(SandboxSpec(image=base_images))
        pod = api.read_namespaced_pod(other.sandbox.name, NAMESPACE)
        assert pod.metadata.owner_references is None
        assert pod.metadata.labels["termrl.owner-pod"] == "stage-x"


async def test_gc_deletes_the_sandboxes_no_live_stage_owns(k8s_standin, base_images):
    api = _api(k8s_standin)
    api.create_namespace({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "stages"}})
    try:
        live = await _stage_pod(api, "stages", base_images)
        gone = StageOwner("stages", "stage-gone", str(uuid.uuid4()))
        kubeconfig = str(k8s_standin.kubeconfig)
        async with (
            SandboxManager("kubernetes", kubeconfig=kubeconfig, owner=live) as owned,
            SandboxManager("kubernetes", kubeconfig=kubeconfig, owner=gone) as orphaned,
            SandboxManager("kubernetes", kubeconfig=kubeconfig) as unowned,
        ):
            spec = SandboxSpec(image=base_images)
            kept = await owned.create(spec)
            orphan = await orphaned.create(spec)
            developer = await unowned.create(spec)
            ended = await unowned.create(spec)
            # Every process it may signal ends (the verifier's too): the pod is Failed.
            with contextlib.suppress(SandboxDied):
                await ended.exec_fresh("kill -KILL -1")
            for _ in range(300):
                if api.read_namespaced_pod(ended.sandbox.name, NAMESPACE).status.phase != "Running":
                    break
                await asyncio.sleep(0.1)
            gc = ["gc", "--backend", "kubernetes", "--kubeconfig", kubeconfig, "--dry-run"]
            listed = await asyncio.to_thread(CliRunner().invoke, sandbox_cli, gc)
            assert listed.exit_code == 0, listed.output
            assert set(listed.output.split("\n")[:2]) == {orphan.sandbox.name, ended.sandbox.name}
            assert "would delete 2 pod(s)" in listed.output
            deleted = await asyncio.to_thread(delete_orphaned_sandboxes, api, NAMESPACE)
            assert set(deleted) == {orphan.sandbox.name, ended.sandbox.name}
            left = _sandbox_pods(api)
            assert {kept.sandbox.name, developer.sandbox.name} <= left
            assert not {orphan.sandbox.name, ended.sandbox.name} & left
    finally:
        api.delete_namespace("stages")


STAGE = """
import asyncio, sys
from termrl.sandbox import SandboxManager, SandboxSpec

async def main():
    async with SandboxManager("kubernetes", kubeconfig=sys.argv[1]) as manager:
        session = await manager.create(SandboxSpec(image=sys.argv[2], labels={"termrl.group": sys.argv[3]}))
        print(session.sandbox.name, flush=True)
        await asyncio.Event().wait()

asyncio.run(main())
"""


async def test_sigterm_in_a_stage_deletes_its_sandboxes(k8s_standin, base_images):
    """The kubelet stops a deleted or retried stage pod with SIGTERM: its sandboxes go first."""
    api = _api(k8s_standin)
    group = uuid.uuid4().hex[:8]
    stage = subprocess.Popen(
        [sys.executable, "-c", STAGE, str(k8s_standin.kubeconfig), base_images, group],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": os.getcwd()},
    )
    try:
        name = await asyncio.to_thread(stage.stdout.readline)
        assert name.strip() in _sandbox_pods(api, **{"termrl.group": group})
        stage.send_signal(signal.SIGTERM)
        assert await asyncio.to_thread(stage.wait, 120) == -signal.SIGTERM
        assert _sandbox_pods(api, **{"termrl.group": group}) == set()
    finally:
        if stage.poll() is None:
            stage.kill()
            stage.wait()


async def test_network_follows_the_namespace_policies(k8s_standin, base_images, host):
    """The manifests' policies, realized by podman's networking: ``none`` pods get no network at all,
    ``egress`` pods reach out but never the host's loopback. (That egress skips the cluster's ranges
    is a CNI's part: the stand-in cannot filter by destination, see test_kubernetes.py's manifests.)"""
    from tests.sandbox.servers import serving

    hits: list[str] = []
    async with (
        serving(host, "outside", hits) as out_port,
        serving("127.0.0.1", "loopback", hits) as lo_port,
        SandboxManager("kubernetes", api=_api(k8s_standin)) as manager,
    ):
        online = await manager.create(SandboxSpec(image=base_images, network="egress"))
        reached = await online.exec(f"curl -sS --max-time 5 http://{host}:{out_port}/", timeout=20)
        assert reached.output == "reached-outside"
        for address in ("10.0.2.2", "127.0.0.1"):
            blocked = await online.exec(f"curl -sS --max-time 3 http://{address}:{lo_port}/")
            assert blocked.exit_code != 0 and "reached" not in blocked.output
        offline = await manager.create(SandboxSpec(image=base_images))
        refused = await offline.exec(f"curl -sS --max-time 3 http://{host}:{out_port}/")
        assert refused.exit_code != 0 and "reached" not in refused.output
        assert (await offline.exec("ls /sys/class/net")).output.split() == ["lo"]
    assert hits == ["outside"]


async def test_cpu_and_memory_limits_hold_in_the_pod(k8s_standin, base_images):
    """The pod's limits as the kubelet applies them: memory (the OOM killer) and CPU (the cgroup
    quota). The lifetime (``activeDeadlineSeconds``): test_k8s_standin.py."""
    spec = SandboxSpec(image=base_images, cpus=0.5, memory_mb=64)
    async with SandboxManager("kubernetes", api=_api(k8s_standin)) as manager:
        session = await manager.create(spec)
        hog = await session.exec_fresh("python3 -c 'b = bytearray(256 << 20); print(len(b))'")
        assert hog.exit_code == 137 and "268435456" not in hog.output  # killed, never allocated
        quota = await session.exec(
            "cat /sys/fs/cgroup/cpu/cpu.cfs_quota_us /sys/fs/cgroup/cpu.max 2>/dev/null | head -1"
        )
        assert quota.output.split()[0] == "50000"
