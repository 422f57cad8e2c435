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
from termrl.settings import build_config


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
    manifest = pod_manifest(
        spec, spec.image, "termrl-x", runtime_class="gvisor", verifier_image="stage:1"
    )
    pod = _as_model(manifest, "V1Pod")
    assert (
        pod.spec.automount_service_account_token is False and pod.spec.enable_service_links is False
    )
    assert pod.spec.active_deadline_seconds == 901 and pod.spec.restart_policy == "Never"
    assert (pod.spec.host_network, pod.spec.host_pid, pod.spec.host_ipc) == (False, False, False)
    assert pod.spec.runtime_class_name == "gvisor"
    container, verifier = pod.spec.containers
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
    # The verifier: beside the agent in one process namespace, from the trusted image, holding every
    # capability the agent holds and more (so the kernel refuses the agent ptrace and /proc of it).
    assert pod.spec.share_process_namespace is True
    assert (verifier.name, verifier.image, verifier.command) == (
        "verifier",
        "stage:1",
        ["sleep", "infinity"],
    )
    held = set(verifier.security_context.capabilities.add)
    assert set(container.security_context.capabilities.add) < held and "SYS_ADMIN" in held
    assert verifier.security_context.run_as_user == 0 and not verifier.env
    assert verifier.resources.limits == {"cpu": "500m", "memory": "768Mi"}
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
    from termrl.sandbox.manager import SandboxManager
    from termrl.sandbox.settings import SandboxSettings

    flat = {
        "sandbox_namespace": "sb",
        "sandbox_registry": "reg.local/ml",
        "sandbox_pull_secret": "regcred",
    }
    config = build_config(RolloutConfig, {}, flat)
    assert config.sandbox.options is None  # podman: the cluster fields do not reach it
    kubernetes = SandboxSettings.from_flat({"sandbox_backend": "kubernetes"}, config.sandbox)
    options = kubernetes.options.backend_kwargs()
    assert options == {
        "namespace": "sb",
        "registry": "reg.local/ml",
        "image_pull_secrets": ("regcred",),
    }
    backend = SandboxManager(kubernetes, api=object()).backend
    assert (backend.namespace, backend.registry, backend.image_pull_secrets) == (
        "sb",
        "reg.local/ml",
        ("regcred",),
    )
    default = SandboxSettings("kubernetes")
    assert default.options.backend_kwargs() == {}  # the backend's own defaults
    assert SandboxManager(default, api=object()).backend.namespace == "termrl-sandboxes"


def test_network_policies_deny_all_but_egress_when_asked():
    none, egress = (_as_model(m, "V1NetworkPolicy") for m in network_policy_manifest("sandboxes"))
    assert none.spec.pod_selector.match_labels["termrl.network"] == "none"
    assert none.spec.ingress == [] and none.spec.egress == []
    assert egress.spec.ingress == []
    outside, dns = egress.spec.egress  # the internet, and the cluster's DNS
    v4, v6 = (peer.ip_block for peer in outside.to)
    assert (v4.cidr, v6.cidr) == ("0.0.0.0/0", "::/0")
    assert {"10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "169.254.0.0/16"} <= set(v4._except)
    assert [p.port for p in dns.ports] == [53, 53] and dns.to[0].pod_selector.match_labels == {
        "k8s-app": "kube-dns"
    }


def test_egress_excludes_the_cluster_ranges_given():
    """The pod, service and node CIDRs of a cluster (backend options) are what egress never reaches."""
    cidrs = ("10.244.0.0/16", "10.96.0.0/12", "192.168.49.0/24", "fd00:10:244::/56")
    _, egress = (
        _as_model(m, "V1NetworkPolicy") for m in network_policy_manifest("sandboxes", cidrs)
    )
    v4, v6 = (peer.ip_block for peer in egress.spec.egress[0].to)
    assert v4._except == list(cidrs[:3]) and v6._except == [cidrs[3]]


def test_the_agents_container_fits_the_baseline_level_unless_raw_sockets_are_asked_for():
    """Baseline forbids adding NET_RAW; only an egress task on a backend told to allow raw sockets
    gets it. (The verifier container beside it needs the privileged level: SYS_ADMIN.)"""
    baseline = {"AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD"}
    baseline |= {"NET_BIND_SERVICE", "SETFCAP", "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT"}
    for network in ("none", "egress"):
        spec = SandboxSpec(image="img", network=network)
        container, verifier = _as_model(pod_manifest(spec, "img", "p"), "V1Pod").spec.containers
        assert set(container.security_context.capabilities.add) <= baseline
        assert verifier.image == "img"  # no verifier image given: the task's, as built
    raw = pod_manifest(SandboxSpec(image="img", network="egress"), "img", "p", raw_sockets=True)
    assert "NET_RAW" in raw["spec"]["containers"][0]["securityContext"]["capabilities"]["add"]
    offline = pod_manifest(SandboxSpec(image="img"), "img", "p", raw_sockets=True)
    assert (
        "NET_RAW" not in offline["spec"]["containers"][0]["securityContext"]["capabilities"]["add"]
    )


def test_without_cluster_configuration_it_is_unavailable(tmp_path, monkeypatch):
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "missing"))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    with pytest.raises(SandboxUnavailable):
        KubernetesBackend()


def test_a_kubeconfig_in_the_environment_wins_over_the_pods_own_account(tmp_path, monkeypatch):
    from kubernetes.config import incluster_config

    # a pod's service account, as the kubelet mounts it
    token, cert = tmp_path / "token", tmp_path / "ca.crt"
    token.write_text("pod-token")
    cert.write_text("not read until a request is made")
    monkeypatch.setattr(incluster_config, "SERVICE_TOKEN_FILENAME", str(token))
    monkeypatch.setattr(incluster_config, "SERVICE_CERT_FILENAME", str(cert))
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "443")
    monkeypatch.delenv("KUBECONFIG", raising=False)
    assert KubernetesBackend().api.api_client.configuration.host == "https://10.96.0.1:443"

    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: here\n"
        "clusters: [{name: here, cluster: {server: 'http://127.0.0.1:6443'}}]\n"
        "users: [{name: me, user: {token: t}}]\n"
        "contexts: [{name: here, context: {cluster: here, user: me}}]\n"
    )
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig))
    assert KubernetesBackend().api.api_client.configuration.host == "http://127.0.0.1:6443"


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

    def read_stdout(self, timeout: float = 0) -> bytes:  # binary mode, as the backend opens streams
        with self._lock:
            data, self._buffer = b"".join(self._buffer), []
        return data

    def read_stderr(self, timeout: float = 0) -> bytes:
        return b""

    def write_stdin(self, data: bytes) -> None:
        self.process.stdin.write(data)
        self.process.stdin.flush()

    def read_channel(self, channel: int) -> str:
        """The error channel's status, as the API server words it once the process has ended."""
        import json

        from tests.k8s_standin.exec_stream import status_of_exit

        code = self.process.poll()
        return "" if channel != 3 or code is None else json.dumps(status_of_exit(code, []))

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
    sandbox._stream = lambda command, **_: PipeWS(command)  # type: ignore[method-assign]
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


class HeldWS(PipeWS):
    """A PipeWS whose output is held back until ``release`` is set: a loaded host's late frames."""

    def __init__(self, argv: list[str]):
        super().__init__(argv)
        self.release = threading.Event()
        self.stream_closed = False

    def read_stdout(self, timeout: float = 0) -> bytes:
        return super().read_stdout(timeout) if self.release.is_set() else b""

    def is_open(self) -> bool:
        return not self.stream_closed and super().is_open()

    def close(self) -> None:
        """As an API server's stream: closing it leaves the process running."""
        self.stream_closed = True


async def test_a_cancelled_fresh_process_is_killed_even_before_its_pid_line_arrived():
    """Cancelled (or timed out) before the pid line came through the stream, the caller still waits
    for it, to kill the process and its children; without it they ran on."""
    pod, streams = _local_pod(), []

    def held(command: list[str], **_: object) -> PipeWS:
        # Only the fresh process's frames are late; the kill helper's (which prints its report)
        # come through, as they would once the host catches up.
        streams.append(HeldWS(command) if not streams else PipeWS(command))
        return streams[-1]

    pod._stream = held  # type: ignore[method-assign]
    call = asyncio.ensure_future(
        pod.exec_fresh(
            "sleep 98772 & sleep 98771; wait", env=None, workdir="/", timeout=600, output_limit=4096
        )
    )
    probe = ["pgrep", "-f", "^sleep 9877[12]$"]
    for _ in range(600):
        if len(subprocess.run(probe, capture_output=True, text=True).stdout.split()) == 2:
            break
        await asyncio.sleep(0.1)
    call.cancel()
    streams[0].release.set()  # the pid line arrives after the caller gave up
    try:
        with pytest.raises(asyncio.CancelledError):
            await call
        assert subprocess.run(probe, capture_output=True, text=True).stdout == ""
    finally:
        for ws in streams:
            PipeWS.close(ws)
