"""The Kubernetes backend without a cluster: manifests, and the exec channel over a real shell.

No API server runs here, so creating pods and exec'ing into them is not
exercised; what can run is: the pod and NetworkPolicy manifests (validated by
the kubernetes client's own models), configuration errors, and ``ExecChannel``
carrying the real shell protocol through a stand-in for the websocket client
that pipes to a local bash supervisor.
"""

from __future__ import annotations

import asyncio
import subprocess
import threading

import pytest
from kubernetes import client

from termrl.errors import SandboxUnavailable
from termrl.sandbox.kubernetes import (
    ExecChannel,
    KubernetesBackend,
    network_policy_manifest,
    pod_manifest,
)
from termrl.sandbox.shell import KILL_HELPER, SUPERVISOR, Shell
from termrl.sandbox.spec import SandboxSpec


def _as_model(manifest: dict, kind: str):
    """Deserialize through the client's generated models (rejects unknown shapes)."""
    api = client.ApiClient()
    return api._ApiClient__deserialize(manifest, kind)


def test_pod_manifest_is_locked_down_and_sized():
    spec = SandboxSpec(
        image="registry.local/termrl/env:abc", cpus=0.5, memory_mb=768, lifetime_sec=900.5,
        env={"A": "1"}, workdir="/app", labels={"termrl.task": "task/with spaces", "termrl.group": "g-7"},
    )  # fmt: skip
    manifest = pod_manifest(spec, spec.image, "termrl-x", runtime_class="gvisor")
    pod = _as_model(manifest, "V1Pod")
    assert pod.spec.automount_service_account_token is False and pod.spec.enable_service_links is False
    assert pod.spec.active_deadline_seconds == 901 and pod.spec.restart_policy == "Never"
    assert (pod.spec.host_network, pod.spec.host_pid, pod.spec.host_ipc) == (False, False, False)
    assert pod.spec.runtime_class_name == "gvisor"
    (container,) = pod.spec.containers
    assert container.resources.limits == {"cpu": "500m", "memory": "768Mi"} == container.resources.requests
    assert container.security_context.privileged is False
    assert container.security_context.allow_privilege_escalation is False
    assert container.security_context.capabilities.drop == ["ALL"]
    assert "SYS_ADMIN" not in container.security_context.capabilities.add
    assert container.working_dir == "/app" and container.env[0].name == "A"
    assert pod.metadata.labels == {
        "termrl.sandbox": "1", "termrl.network": "none", "termrl.task": "task-with-spaces", "termrl.group": "g-7",
    }  # fmt: skip


def test_network_policies_deny_all_but_egress_when_asked():
    none, egress = (_as_model(m, "V1NetworkPolicy") for m in network_policy_manifest("sandboxes"))
    assert none.spec.pod_selector.match_labels["termrl.network"] == "none"
    assert none.spec.ingress == [] and none.spec.egress == []
    assert egress.spec.ingress == [] and len(egress.spec.egress) == 1


def test_without_cluster_configuration_it_is_unavailable(tmp_path, monkeypatch):
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "missing"))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    with pytest.raises(SandboxUnavailable):
        KubernetesBackend()


async def test_task_environment_needs_a_registry():
    from termrl.artifacts.tasks import TaskFile

    spec = SandboxSpec(environment_files=[TaskFile("Dockerfile", b"FROM termrl/base:bookworm\n")])
    with pytest.raises(SandboxUnavailable):
        await KubernetesBackend(api=object()).build_image(spec)
    pushed = await KubernetesBackend(api=object(), registry="registry.local:5000/").build_image(spec)
    assert pushed == f"registry.local:5000/{spec.image_key}"


class PipeWS:
    """Stands in for kubernetes' WSClient (same methods) over a local process's pipes."""

    def __init__(self, argv: list[str]):
        self.process = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, start_new_session=True)
        self._buffer: list[bytes] = []
        self._lock = threading.Lock()
        threading.Thread(target=self._reader, daemon=True).start()

    def _reader(self) -> None:
        while chunk := self.process.stdout.read1(65536):
            with self._lock:
                self._buffer.append(chunk)

    def is_open(self) -> bool:
        return self.process.poll() is None or bool(self._buffer)

    def update(self, timeout: float = 0) -> None:
        threading.Event().wait(min(timeout, 0.01))

    def read_stdout(self, timeout: float = 0) -> str:
        with self._lock:
            data, self._buffer = b"".join(self._buffer), []
        return data.decode()

    def read_stderr(self, timeout: float = 0) -> str:
        return ""

    def write_stdin(self, data: str) -> None:
        self.process.stdin.write(data.encode())
        self.process.stdin.flush()

    def close(self) -> None:
        import os
        import signal

        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait()


async def test_exec_channel_carries_the_shell_protocol():
    token = Shell.new_token()
    ws = PipeWS(["bash", "-c", SUPERVISOR, "supervisor", token])

    async def signal(pid: int, sig: str, mode: str) -> None:
        await asyncio.to_thread(subprocess.run, ["bash", "-c", KILL_HELPER, "k", sig, str(pid), mode])

    channel = ExecChannel(ws, asyncio.get_running_loop())
    shell = Shell(channel, token, signal, output_limit=1000)
    try:
        await shell.start("/tmp")
        assert await shell.exec("export V=7; cd /", 5) == ("", 0, False, False)
        assert await shell.exec("echo $V; pwd", 5) == ("7\n/\n", 0, False, False)
        output, code, timed_out, _ = await shell.exec("sleep 60", 0.5)
        assert (code, timed_out) == (None, True)
        assert (await shell.exec("echo back", 5))[:2] == ("back\n", 0)
    finally:
        await channel.close()
