"""The Kubernetes backend: one pod per session, the shell over the exec stream API.

    create: POST a pod (``pod_manifest``) ─► wait for Running ─► exec ``bash -c SUPERVISOR``
            with stdin over a websocket (``ExecChannel``) ─► the same ``Shell`` as podman

The pod is non-privileged (no privilege escalation, capabilities cut to
Docker's default set, RuntimeDefault seccomp), mounts no service-account
token and no service links, carries the spec's CPU and memory as requests
and limits, ends at ``activeDeadlineSeconds`` (the lifetime) and is labelled
per task/group so a whole group can be listed or deleted. ``network: none``
is a label that ``network_policy_manifest`` turns into a deny-all policy;
egress pods get a policy allowing only egress. A pod's pids limit is a
kubelet setting (``podPidsLimit``), not a pod field.

Images are not built here: a cluster pulls task images from a registry, so
``registry`` maps a task environment to ``<registry>/termrl/env:<hash>``,
pushed by whoever built it (``SandboxManager(backend="podman").build_image``).
Files move through exec'd ``base64``/``tar`` (text-safe over the stream).

No cluster runs on the development machine: the manifests and the channel
logic are tested without one; the create/exec path against a real API server
has not been run.
"""

from __future__ import annotations

import asyncio
import base64
import math
import re
import threading
import time
import uuid
from typing import Any

from termrl.errors import EnvInitFailed, SandboxDied, SandboxUnavailable
from termrl.sandbox.backend import Backend
from termrl.sandbox.bwrap import DOCKER_CAPS
from termrl.sandbox.session import Sandbox
from termrl.sandbox.shell import KILL_HELPER, SUPERVISOR, Channel, Shell
from termrl.sandbox.spec import SandboxSpec

__all__ = ["ExecChannel", "KubernetesBackend", "KubernetesSandbox", "network_policy_manifest", "pod_manifest"]

CONTAINER = "sandbox"
# pid 1 reaps orphans and exits on SIGTERM.
IDLE_COMMAND = ["bash", "-c", "trap 'exit 0' TERM; while :; do sleep 3600 & wait $!; done"]


def _label_value(value: str) -> str:
    """A valid label value: <= 63 of [A-Za-z0-9._-], alphanumeric at both ends."""
    cleaned = re.sub(r"[^A-Za-z0-9._-]", "-", value)[:63]
    return cleaned.strip("._-") or "x"


def pod_manifest(spec: SandboxSpec, image: str, name: str, *, runtime_class: str | None = None) -> dict[str, Any]:
    """The pod of one session, as a plain manifest dict."""
    labels = {"termrl.sandbox": "1", "termrl.network": spec.network}
    labels.update({key: _label_value(value) for key, value in spec.labels.items()})
    resources = {"cpu": f"{int(spec.cpus * 1000)}m", "memory": f"{spec.memory_mb}Mi"}
    container: dict[str, Any] = {
        "name": CONTAINER,
        "image": image,
        "command": IDLE_COMMAND,
        "env": [{"name": k, "value": v} for k, v in sorted(spec.env.items())],
        "resources": {"requests": dict(resources), "limits": dict(resources)},
        "securityContext": {
            "privileged": False,
            "allowPrivilegeEscalation": False,
            "capabilities": {"drop": ["ALL"], "add": [c.removeprefix("CAP_") for c in DOCKER_CAPS]},
        },
        "stdin": False,
        "tty": False,
    }
    if spec.workdir:
        container["workingDir"] = spec.workdir
    pod_spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "hostNetwork": False,
        "hostPID": False,
        "hostIPC": False,
        "activeDeadlineSeconds": max(1, math.ceil(spec.lifetime_sec)),
        "terminationGracePeriodSeconds": 0,
        "securityContext": {"seccompProfile": {"type": "RuntimeDefault"}},
        "containers": [container],
    }
    if runtime_class:
        pod_spec["runtimeClassName"] = runtime_class
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": labels}, "spec": pod_spec}


def network_policy_manifest(namespace: str) -> list[dict[str, Any]]:
    """Policies for the sandbox namespace: no traffic at all, or egress only."""

    def policy(name: str, network: str, egress: list[dict[str, Any]] | None) -> dict[str, Any]:
        spec: dict[str, Any] = {
            "podSelector": {"matchLabels": {"termrl.sandbox": "1", "termrl.network": network}},
            "policyTypes": ["Ingress", "Egress"],
            "ingress": [],
        }
        spec["egress"] = egress or []
        return {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
                "metadata": {"name": name, "namespace": namespace}, "spec": spec}  # fmt: skip

    return [policy("termrl-sandbox-none", "none", None), policy("termrl-sandbox-egress", "egress", [{}])]


class ExecChannel(Channel):
    """A ``Channel`` over a kubernetes ``WSClient`` exec stream (stdout and stderr merged).

    The client is synchronous: a reader thread pumps it into an asyncio queue.
    """

    def __init__(self, ws: Any, loop: asyncio.AbstractEventLoop):
        self.ws = ws
        self._loop = loop
        self._queue: asyncio.Queue[bytes] = asyncio.Queue()
        self._closed = threading.Event()
        self._thread = threading.Thread(target=self._pump, daemon=True)
        self._thread.start()

    def _pump(self) -> None:
        try:
            while not self._closed.is_set() and self.ws.is_open():
                self.ws.update(timeout=0.2)
                for read in (self.ws.read_stdout, self.ws.read_stderr):
                    data = read(timeout=0) if callable(read) else None
                    if data:
                        chunk = data.encode() if isinstance(data, str) else data
                        self._loop.call_soon_threadsafe(self._queue.put_nowait, chunk)
        finally:
            self._loop.call_soon_threadsafe(self._queue.put_nowait, b"")

    async def write(self, data: bytes) -> None:
        if not self.ws.is_open():
            raise SandboxDied("the exec stream is closed")
        await asyncio.to_thread(self.ws.write_stdin, data.decode())

    async def read(self) -> bytes:
        chunk = await self._queue.get()
        if not chunk:
            self._queue.put_nowait(b"")  # stay at EOF for later readers
        return chunk

    async def close(self) -> None:
        self._closed.set()
        await asyncio.to_thread(self.ws.close)
        await asyncio.to_thread(self._thread.join, 5)


class KubernetesSandbox(Sandbox):
    """A pod and the API handle to reach it."""

    backend = "kubernetes"

    def __init__(self, api: Any, namespace: str, name: str):
        self.api = api
        self.namespace = namespace
        self.name = name

    def _exec(self, script: str, *args: str) -> tuple[int, str]:
        """Run a short helper script in the pod (not the session shell); (status, stdout)."""
        from kubernetes.stream import stream

        ws = stream(
            self.api.connect_get_namespaced_pod_exec, self.name, self.namespace, container=CONTAINER,
            command=["bash", "-c", script, "termrl", *args], stdin=False, stdout=True,
            stderr=True, tty=False, _preload_content=False,
        )  # fmt: skip
        out = []
        deadline = time.monotonic() + 120
        while ws.is_open() and time.monotonic() < deadline:
            ws.update(timeout=1)
            out.append(ws.read_stdout(timeout=0) or "")
        ws.close()
        return ws.returncode or 0, "".join(out)

    async def signal(self, pid: int, sig: str, mode: str) -> None:
        await asyncio.to_thread(self._exec, KILL_HELPER, sig, str(pid), mode)

    async def put_archive(self, archive: bytes) -> None:
        # The archive travels inside commands (exec streams cannot half-close
        # stdin), in chunks below Linux's 128 KiB limit on one argument.
        encoded = base64.b64encode(archive).decode()
        spool = f"/tmp/.termrl-upload-{uuid.uuid4().hex[:8]}"
        for at in range(0, len(encoded), 65536):
            await asyncio.to_thread(self._exec, 'printf %s "$1" >> "$2"', encoded[at : at + 65536], spool)
        script = 'base64 -d < "$1" | tar -x --no-same-owner -C /; status=$?; rm -f "$1"; exit $status'
        code, out = await asyncio.to_thread(self._exec, script, spool)
        if code != 0:
            raise OSError(f"upload into pod {self.name} failed: {out[-500:]}")

    async def get_file(self, path: str) -> bytes:
        script = 'test -d "$1" && exit 21; test -f "$1" || exit 44; base64 -w0 < "$1"'
        code, out = await asyncio.to_thread(self._exec, script, path)
        if code == 44:
            raise FileNotFoundError(path)
        if code == 21:
            raise IsADirectoryError(path)
        return base64.b64decode(out)

    async def alive(self) -> bool:
        try:
            pod = await asyncio.to_thread(self.api.read_namespaced_pod, self.name, self.namespace)
        except Exception:
            return False
        return pod.status.phase == "Running"

    async def destroy(self) -> None:
        from kubernetes.client.exceptions import ApiException

        try:
            await asyncio.to_thread(
                self.api.delete_namespaced_pod, self.name, self.namespace, grace_period_seconds=0
            )
        except ApiException as e:
            if e.status != 404:
                raise


class KubernetesBackend(Backend):
    """Starts one pod per session in ``namespace`` through the kubernetes client."""

    name = "kubernetes"

    def __init__(
        self,
        namespace: str = "termrl-sandboxes",
        *,
        registry: str | None = None,
        runtime_class: str | None = None,
        start_timeout_sec: float = 300.0,
        api: Any = None,
    ):
        self.namespace = namespace
        self.registry = registry
        self.runtime_class = runtime_class
        self.start_timeout_sec = start_timeout_sec
        self.api = api if api is not None else self._load_api()

    @staticmethod
    def _load_api() -> Any:
        from kubernetes import client, config

        try:
            config.load_incluster_config()
        except config.ConfigException:
            try:
                config.load_kube_config()
            except (config.ConfigException, OSError) as e:
                raise SandboxUnavailable(f"no Kubernetes configuration found: {e}") from e
        return client.CoreV1Api()

    async def build_image(self, spec: SandboxSpec) -> str:
        if spec.image is not None:
            return spec.image
        if self.registry is None:
            raise SandboxUnavailable("the kubernetes backend runs pushed images: set registry= for task environments")
        return f"{self.registry.rstrip('/')}/{spec.image_key}"

    async def start(self, spec: SandboxSpec, image: str, output_limit: int) -> tuple[KubernetesSandbox, Shell]:
        from kubernetes.client.exceptions import ApiException
        from kubernetes.stream import stream

        name = f"termrl-{uuid.uuid4().hex[:12]}"
        manifest = pod_manifest(spec, image, name, runtime_class=self.runtime_class)
        try:
            await asyncio.to_thread(self.api.create_namespaced_pod, self.namespace, manifest)
        except ApiException as e:
            raise SandboxUnavailable(f"cannot create pod: {e.reason}", log_tail=str(e.body)[-2000:]) from e
        sandbox = KubernetesSandbox(self.api, self.namespace, name)
        deadline = time.monotonic() + self.start_timeout_sec
        while True:
            pod = await asyncio.to_thread(self.api.read_namespaced_pod, name, self.namespace)
            if pod.status.phase == "Running":
                break
            if pod.status.phase in ("Failed", "Succeeded") or time.monotonic() > deadline:
                await sandbox.destroy()
                raise EnvInitFailed(f"pod {name} did not start (phase {pod.status.phase})", log_tail=str(pod.status)[-2000:])
            await asyncio.sleep(0.5)
        token = Shell.new_token()
        ws = await asyncio.to_thread(
            stream, self.api.connect_get_namespaced_pod_exec, name, self.namespace, container=CONTAINER,
            command=["bash", "-c", SUPERVISOR, "termrl-supervisor", token], stdin=True, stdout=True,
            stderr=True, tty=False, _preload_content=False,
        )  # fmt: skip
        shell = Shell(ExecChannel(ws, asyncio.get_running_loop()), token, sandbox.signal, output_limit=output_limit)
        try:
            await shell.start(spec.workdir)
        except SandboxDied as e:
            await sandbox.destroy()
            raise EnvInitFailed(f"pod {name}: shell did not start", log_tail=e.log_tail) from e
        return sandbox, shell

