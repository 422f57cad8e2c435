"""The Kubernetes backend without a cluster: manifests, and the exec channel over a real shell.

No API server runs here, so creating pods and exec'ing into them is not
exercised; what can run is: the pod and NetworkPolicy manifests (validated by
the kubernetes client's own models), configuration errors, and ``ExecChannel``
carrying the real shell protocol through a stand-in for the websocket client
that pipes to a local bash supervisor.
"""

from __future__ import annotations

import asyncio
import math
import subprocess
import threading

import pytest
from kubernetes import client

from termrl.errors import SandboxUnavailable
from termrl.sandbox.kubernetes import (
    STOP_HELPER,
    ExecChannel,
    KubernetesBackend,
    KubernetesSandbox,
    network_policy_manifest,
    pod_manifest,
)
from termrl.sandbox.procs import SERVICE_GRACE_SEC
from termrl.sandbox.shell import KILL_HELPER, SUPERVISOR, Shell
from termrl.sandbox.spec import SandboxSpec


def _as_model(manifest: dict, kind: str):
    """Deserialize through the client's generated models (rejects unknown shapes)."""
    api = client.ApiClient()
    return api._ApiClient__deserialize(manifest, kind)


def test_pod_manifest_is_locked_down_and_sized():
    spec = SandboxSpec(
        image="registry.local/termrl/env:abc",
        cpus=0.5,
        memory_mb=768,
        lifetime_sec=900.5,
        env={"A": "1"},
        workdir="/app",
        labels={"termrl.task": "task/with spaces", "termrl.group": "g-7"},
    )
    manifest = pod_manifest(spec, spec.image, "termrl-x", runtime_class="gvisor")
    pod = _as_model(manifest, "V1Pod")
    assert (
        pod.spec.automount_service_account_token is False and pod.spec.enable_service_links is False
    )
    assert pod.spec.active_deadline_seconds == 901 and pod.spec.restart_policy == "Never"
    assert (pod.spec.host_network, pod.spec.host_pid, pod.spec.host_ipc) == (False, False, False)
    assert pod.spec.runtime_class_name == "gvisor"
    (container,) = pod.spec.containers
    assert container.resources.requests == {
        "cpu": "500m",
        "memory": "768Mi",
        "ephemeral-storage": "0",
    }
    assert container.resources.limits == {
        "cpu": "500m",
        "memory": "768Mi",
        "ephemeral-storage": "10240Mi",
    }
    assert container.security_context.privileged is False
    assert container.security_context.allow_privilege_escalation is False
    assert container.security_context.capabilities.drop == ["ALL"]
    assert "SYS_ADMIN" not in container.security_context.capabilities.add
    assert container.working_dir == "/app" and container.env[0].name == "A"
    assert pod.metadata.labels == {
        "termrl.sandbox": "1",
        "termrl.network": "none",
        "termrl.task": "task-with-spaces",
        "termrl.group": "g-7",
    }


def test_pod_pulls_with_the_image_pull_secret():
    spec = SandboxSpec(image="registry.local/termrl/env:abc")
    pod = _as_model(
        pod_manifest(spec, spec.image, "termrl-x", image_pull_secrets=("regcred",)), "V1Pod"
    )
    assert [s.name for s in pod.spec.image_pull_secrets] == ["regcred"]
    assert (
        _as_model(pod_manifest(spec, spec.image, "termrl-x"), "V1Pod").spec.image_pull_secrets
        is None
    )


def test_stage_sandbox_fields_reach_only_the_kubernetes_backend():
    from components.rollout.config import RolloutConfig
    from termrl.sandbox.manager import SandboxManager, sandbox_options

    config = RolloutConfig(
        sandbox_namespace="sb", sandbox_registry="reg.local/ml", sandbox_pull_secret="regcred"
    )
    assert sandbox_options("podman", config) == {}
    options = sandbox_options("kubernetes", config)
    assert options == {
        "namespace": "sb",
        "registry": "reg.local/ml",
        "image_pull_secrets": ("regcred",),
    }
    backend = SandboxManager("kubernetes", api=object(), **options).backend
    assert (backend.namespace, backend.registry, backend.image_pull_secrets) == (
        "sb",
        "reg.local/ml",
        ("regcred",),
    )
    assert sandbox_options("kubernetes", RolloutConfig()) == {}  # the backend's own defaults


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
    pushed = await KubernetesBackend(api=object(), registry="registry.local:5000/").build_image(
        spec
    )
    assert pushed == f"registry.local:5000/{spec.image_key}"


class PipeWS:
    """Stands in for kubernetes' WSClient (same methods) over a local process's pipes."""

    def __init__(self, argv: list[str]):
        self.process = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, start_new_session=True
        )
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

    @property
    def returncode(self) -> int | None:
        return self.process.returncode

    def close(self) -> None:
        import os
        import signal

        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait()


async def test_exec_channel_carries_the_shell_protocol():
    token = Shell.new_token()
    ws = PipeWS(["bash", "-c", SUPERVISOR, "supervisor", token])

    async def signal(pid: int, sig: str, mode: str) -> str:
        argv = ["bash", "-c", KILL_HELPER, "k", sig, str(pid), mode]
        return (
            await asyncio.to_thread(subprocess.run, argv, capture_output=True, text=True)
        ).stdout

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


def _local_pod() -> KubernetesSandbox:
    """A KubernetesSandbox whose exec streams run here, through PipeWS, instead of in a pod."""
    sandbox = KubernetesSandbox(api=None, namespace="unused", name="local")
    sandbox._stream = lambda command: PipeWS(command)  # type: ignore[method-assign]
    return sandbox


async def test_exec_fresh_runs_a_new_process_reports_its_status_and_kills_it_past_its_timeout(
    tmp_path,
):
    pod = _local_pod()
    output, code, timed_out, _ = await pod.exec_fresh(
        "pwd; echo $CALLER; exit 3",
        env={"CALLER": "caller"},
        workdir=str(tmp_path),
        timeout=30,
        output_limit=4096,
    )
    assert (output, code, timed_out) == (f"{tmp_path}\ncaller\n", 3, False)
    marker = f"{tmp_path}/child-alive"
    output, code, timed_out, _ = await pod.exec_fresh(
        f"echo started; (sleep 98763; touch {marker}) & sleep 98762",
        env=None,
        workdir="/",
        timeout=1,
        output_limit=4096,
    )
    assert output.startswith("started\n") and (code, timed_out) == (None, True)
    left = subprocess.run(["pgrep", "-f", "sleep 9876[23]"], capture_output=True, text=True).stdout
    assert left == ""  # the whole tree went (KILL_HELPER through a second exec)


@pytest.mark.podman
async def test_stop_helper_stops_leftovers_but_not_services_inside_a_real_sandbox(
    podman, base_images
):
    """STOP_HELPER is what a pod runs; run it in a podman container, where /proc is as real."""
    helper = f"bash -c {_quote(STOP_HELPER)} stop-helper"
    async with await podman.create(SandboxSpec(image=base_images)) as session:
        await session.exec(
            "setsid nohup python3 -m http.server 8125 >/dev/null 2>&1 & echo $! > /tmp/service"
        )
        await session.exec(
            "nohup bash -c 'while :; do sleep 0.01; done' >/dev/null 2>&1 & echo $! > /tmp/loop"
        )
        await session.exec(
            "for i in $(seq 50); do curl -fs http://127.0.0.1:8125/ >/dev/null && break; sleep 0.1; done"
        )
        state = "for p in $(cat /tmp/service /tmp/loop); do grep State: /proc/$p/status | cut -f2 | cut -c1; done"
        stopped = (await session.exec_fresh(f"{helper} stop", timeout=60)).output.split()
        service, loop = (await session.exec_fresh(state)).output.split()
        assert service != "T" and loop == "T"
        loop_pid = (await session.exec_fresh("cat /tmp/loop")).output.strip()
        assert loop_pid in [entry.split(":")[0] for entry in stopped] and "1" not in [
            e.split(":")[0] for e in stopped
        ]
        await session.exec_fresh(f"{helper} cont {' '.join(stopped)}", timeout=60)
        assert "T" not in (await session.exec(state)).output.split()


@pytest.mark.podman
async def test_stop_helper_waits_for_a_service_still_starting(podman, base_images):
    """A server the agent started last binds its port seconds later: with the grace (what the
    backend passes) the helper waits for it instead of freezing it on its way; without, it freezes it."""
    helper = f"bash -c {_quote(STOP_HELPER)} stop-helper"
    late = "nohup bash -c 'sleep 3; exec python3 -m http.server {port}' >/dev/null 2>&1 & echo $! > /tmp/late-{port}"
    state = "grep State: /proc/$(cat /tmp/late-{port})/status | cut -f2 | cut -c1"
    async with await podman.create(SandboxSpec(image=base_images)) as session:
        await session.exec(late.format(port=8126))
        stopped = (
            await session.exec_fresh(f"{helper} stop {math.ceil(SERVICE_GRACE_SEC)}", timeout=60)
        ).output.split()
        assert (await session.exec_fresh(state.format(port=8126))).output.strip() != "T"
        assert (
            await session.exec_fresh("curl -fs -o /dev/null http://127.0.0.1:8126/")
        ).exit_code == 0
        await session.exec_fresh(f"{helper} cont {' '.join(stopped)}", timeout=60)

        await session.exec(late.format(port=8127))
        stopped = (await session.exec_fresh(f"{helper} stop 0", timeout=60)).output.split()
        assert (await session.exec_fresh(state.format(port=8127))).output.strip() == "T"
        await session.exec_fresh(f"{helper} cont {' '.join(stopped)}", timeout=60)


def _quote(text: str) -> str:
    return "'" + text.replace("'", "'\\''") + "'"
