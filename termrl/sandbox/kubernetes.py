"""The Kubernetes backend: one pod per session, the shell over the exec stream API.

    create: POST a pod (``pod_manifest``; a full quota is waited out) ─► wait for Running ─►
            exec ``bash -c SUPERVISOR`` with stdin over a websocket (``ExecChannel``) ─► the same
            ``Shell`` as podman

What the pod looks like, its NetworkPolicies and its owner: ``termrl.sandbox.kubernetes_manifests``.
A pod's pids limit is a kubelet setting (``podPidsLimit``), not a pod field.

Every exec stream gets an API client of its own: the official client's ``stream()`` swaps
``api_client.request`` for the websocket call while it runs, so a REST call from another thread on
a shared client could go out as a websocket handshake (kubernetes-client/python#928). REST calls
share one client (its connection pool is thread-safe).

Scoring's fresh processes (``exec_fresh``) are new exec streams with the container's configured
environment (plus the caller's variables) and the pod's security context. Everything else scoring
does (stopping the agent's processes, freezing the system folders, the tests with private
directories, the tamper check) is done from the pod's verifier container, with its own binaries:
``termrl.sandbox.kubernetes_verifier``.

Images are not built here: a cluster pulls task images from a registry, so ``registry`` maps a
task environment to ``<registry>/termrl/env:<hash>``, pushed by whoever built it
(``SandboxManager(backend="podman").build_image``). Files move through exec'd ``base64``/``tar``
(text-safe over the stream).

Tests run this backend unchanged, through the official client, against ``tests.k8s_standin`` (a
local API server whose pods are podman pods).
"""

from __future__ import annotations

import asyncio
import base64
import os
import random
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from termrl.errors import EnvInitFailed, SandboxDied, SandboxUnavailable
from termrl.sandbox.backend import Backend
from termrl.sandbox.fresh import (
    PID_LINE_WAIT_SEC,
    fresh_argv,
    late_pid,
    pid_line_argv,
    split_pid_line,
)
from termrl.sandbox.kubernetes_exec import ExecChannel, exit_status
from termrl.sandbox.kubernetes_manifests import (
    CLUSTER_CIDRS,
    CONTAINER,
    StageOwner,
    network_policy_manifest,
    pod_manifest,
)
from termrl.sandbox.kubernetes_verifier import VERIFIER, VerifierScoring
from termrl.sandbox.session import FileTooLarge, NotRegularFile, Sandbox
from termrl.sandbox.shell import SUPERVISOR, OutputCap, Shell
from termrl.sandbox.spec import SandboxSpec
from termrl.sandbox.stop_helper import STOP_HELPER

__all__ = [
    "CLUSTER_CIDRS",
    "NAMESPACE",
    "STOP_HELPER",
    "ExecChannel",
    "KubernetesBackend",
    "KubernetesSandbox",
    "StageOwner",
    "network_policy_manifest",
    "pod_manifest",
]

NAMESPACE = "termrl-sandboxes"
"""Where sessions start unless told otherwise; ``termrl cluster manifests`` sets this namespace up."""
HELPER_TIMEOUT_SEC = 120.0
"""Longest a helper script (signals, file transfers, stopping processes) may run in a pod."""
QUOTA_BACKOFF_SEC = (1.0, 30.0)
"""First and longest wait between tries while the namespace's ResourceQuota is full."""


def _is_quota_exceeded(error: Any) -> bool:
    return error.status == 403 and "exceeded quota" in str(error.body)


class KubernetesSandbox(VerifierScoring, Sandbox):
    """A pod, the API handle to read and delete it, and a way to make a client per exec stream."""

    backend = "kubernetes"

    def __init__(self, api: Any, namespace: str, name: str, exec_api: Any = None):
        self.api = api
        self.namespace = namespace
        self.name = name
        self._exec_api = exec_api if exec_api is not None else (lambda: api)

    def _stream(
        self, command: list[str], *, stdin: bool = False, container: str = CONTAINER
    ) -> Any:
        """An exec stream of ``command`` in ``container``, opened through a client of its own."""
        from kubernetes.client.exceptions import ApiException
        from kubernetes.stream import stream

        api = self._exec_api()
        try:
            return stream(
                api.connect_get_namespaced_pod_exec,
                self.name,
                self.namespace,
                container=container,
                command=command,
                stdin=stdin,
                stdout=True,
                stderr=True,
                tty=False,
                _preload_content=False,
                binary=True,  # bytes as they come: see ExecChannel
            )
        except (
            ApiException
        ) as e:  # the pod or the container is gone (the agent killed the verifier)
            raise SandboxDied(f"cannot exec into {container} of pod {self.name}: {e.reason}") from e
        finally:
            if api is not self.api:  # the websocket lives on; the client's own pool is not needed
                api.api_client.close()

    def _exec(self, script: str, *args: str) -> tuple[int, str]:
        """Run a short helper script in the agent's container (not the session shell)."""
        return self._exec_argv(["bash", "-c", script, "termrl", *args], CONTAINER)

    def _exec_argv(self, argv: list[str], container: str) -> tuple[int, str]:
        """Run a short helper in ``container``; (status, stdout).

        Raises SandboxDied when it outlives ``HELPER_TIMEOUT_SEC`` or its stream is cut."""
        ws = self._stream(argv, container=container)
        out = []
        deadline = time.monotonic() + HELPER_TIMEOUT_SEC
        while ws.is_open() and time.monotonic() < deadline:
            ws.update(timeout=1)
            out.append(ws.read_stdout(timeout=0) or b"")
        finished = not ws.is_open()
        ws.close()
        if not finished:
            raise SandboxDied(
                f"a helper in pod {self.name} did not finish within {HELPER_TIMEOUT_SEC:g}s"
            )
        code = exit_status(ws)
        if code is None:
            raise SandboxDied(f"the exec stream into pod {self.name} ended without an exit status")
        return code, b"".join(out).decode(errors="replace")

    async def _open_channel(
        self, argv: list[str], container: str, stdin: bool = False
    ) -> tuple[Any, ExecChannel]:
        ws = await asyncio.to_thread(self._stream, argv, stdin=stdin, container=container)
        return ws, ExecChannel(ws, asyncio.get_running_loop())

    async def _open_holder(self, argv: list[str]) -> ExecChannel:
        return (await self._open_channel(argv, VERIFIER, stdin=True))[1]

    async def _run_with_stdin(
        self, argv: list[str], container: str, data: bytes
    ) -> tuple[int, str]:
        """Run ``argv`` in ``container`` with ``data`` on its stdin (it must read exactly that much:
        an exec stream's stdin cannot be half-closed); (status, output)."""
        ws, channel = await self._open_channel(argv, container, stdin=True)
        output = []
        try:
            for at in range(0, len(data), 1 << 16):
                await channel.write(data[at : at + (1 << 16)])
            while chunk := await asyncio.wait_for(channel.read(), HELPER_TIMEOUT_SEC):
                output.append(chunk)
        finally:
            await channel.close()
        code = exit_status(ws)
        return (-1 if code is None else code), b"".join(output).decode(errors="replace")

    async def put_archive(self, archive: bytes) -> None:
        # The archive travels inside commands (exec streams cannot half-close
        # stdin), in chunks below Linux's 128 KiB limit on one argument.
        encoded = base64.b64encode(archive).decode()
        spool = f"/tmp/.termrl-upload-{uuid.uuid4().hex[:8]}"
        for at in range(0, len(encoded), 65536):
            await asyncio.to_thread(
                self._exec, 'printf %s "$1" >> "$2"', encoded[at : at + 65536], spool
            )
        script = (
            'base64 -d < "$1" | tar -x --no-same-owner -C /; status=$?; rm -f "$1"; exit $status'
        )
        code, out = await asyncio.to_thread(self._exec, script, spool)
        if code != 0:
            raise OSError(f"upload into pod {self.name} failed: {out[-500:]}")

    async def get_file(self, path: str, max_bytes: int) -> bytes:
        # test -f follows a symlink and is false for a device or FIFO: those are never read.
        script = (
            'test -d "$1" && exit 21; test -e "$1" || exit 44; test -f "$1" || exit 45; '
            'test "$(wc -c < "$1")" -le "$2" || exit 46; base64 -w0 < "$1"'
        )
        code, out = await asyncio.to_thread(self._exec, script, path, str(max_bytes))
        if code == 44:
            raise FileNotFoundError(path)
        if code == 21:
            raise IsADirectoryError(path)
        if code == 45:
            raise NotRegularFile(path, "special file")
        if code == 46:
            raise FileTooLarge(path, max_bytes + 1, max_bytes)
        return base64.b64decode(out)

    async def exec_fresh(
        self,
        command: str,
        *,
        env: dict[str, str] | None,
        workdir: str,
        timeout: float,
        output_limit: int,
        binds: dict[str, tuple[str, bool]] | None = None,
        user: str | None = None,
    ) -> tuple[str, int | None, bool, bool]:
        if binds:
            return await self.exec_entered(
                command,
                env=env,
                workdir=workdir,
                timeout=timeout,
                output_limit=output_limit,
                binds=binds,
                user=user,
            )
        return await self._plain_fresh(
            command, env=env, workdir=workdir, timeout=timeout, output_limit=output_limit, user=user
        )

    async def _plain_fresh(
        self,
        command: str,
        *,
        env: dict[str, str] | None,
        workdir: str,
        timeout: float,
        output_limit: int,
        user: str | None = None,
    ) -> tuple[str, int | None, bool, bool]:
        """A new exec stream in the agent's container, as its user (the exec API has no other)."""
        if user is not None:
            return (
                f"termrl: the kubernetes backend cannot run a process as user {user!r}\n",
                126,
                False,
                False,
            )
        # The exec stream starts from the container's configured environment; `env` adds the caller's.
        variables = [f"{k}={v}" for k, v in (env or {}).items()]
        argv = ["/usr/bin/env", *variables, *fresh_argv(command, workdir)]

        async def kill(pid: int) -> None:
            await self.signal(pid, "KILL", "all")

        return await self._run_fresh(argv, CONTAINER, timeout, output_limit, kill)

    async def _run_fresh(
        self,
        argv: list[str],
        container: str,
        timeout: float,
        output_limit: int,
        kill: Callable[[int], Awaitable[None]],
    ) -> tuple[str, int | None, bool, bool]:
        """``argv`` in ``container`` behind a pid line; past ``timeout`` (or cancelled) ``kill`` ends
        it by that pid. (output, exit status or None, timed_out, truncated)."""
        mark = f"__TERMRL_FRESH_{uuid.uuid4().hex[:16]}"
        ws, channel = await self._open_channel(pid_line_argv(mark, argv), container)
        cap, pid = OutputCap(output_limit), None
        pending: bytes | None = b""  # output until the pid line is complete; None after
        deadline = time.monotonic() + timeout
        timed_out, ended = False, False
        try:
            while True:
                try:
                    chunk = await asyncio.wait_for(
                        channel.read(), max(deadline - time.monotonic(), 0)
                    )
                except TimeoutError:
                    timed_out = True
                    break
                if not chunk:
                    ended = True
                    break
                if pending is not None:
                    pending += chunk
                    if b"\n" not in pending and len(pending) < 256:
                        continue
                    pid, chunk = split_pid_line(mark, pending)
                    pending = None
                cap.add(chunk)
        finally:  # past its timeout, or its caller cancelled: the process and its children go
            if (
                not ended and pid is None and pending is not None
            ):  # on a loaded host, still on its way
                pid = await asyncio.shield(late_pid(channel.read, mark, pending, PID_LINE_WAIT_SEC))
            if not ended and pid is not None:
                await asyncio.shield(kill(pid))
            await channel.close()
        if pending:
            cap.add(pending)
        code = None if timed_out else exit_status(ws)
        if code is None and not timed_out:
            raise SandboxDied(f"the exec stream into pod {self.name} ended without an exit status")
        return cap.text(), code, timed_out, cap.truncated

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
    """Starts one pod per session in ``namespace`` through the kubernetes client.

    ``kubeconfig``: a kubeconfig file (default: ``$KUBECONFIG``, else the in-cluster service
    account, else ``~/.kube/config``, the order kubectl uses). ``api``: a ready ``CoreV1Api`` instead. ``raw_sockets``:
    egress sandboxes get NET_RAW.
    ``owner``: the stage pod the sandboxes belong to (default: from the downward API's POD_*
    variables, None outside a cluster). ``quota_wait_sec``: how long a full ResourceQuota is waited
    out, with backoff, before ``SandboxUnavailable`` (default: ``start_timeout_sec``).
    ``verifier_image``: the image of each pod's verifier container (needs bash and python3; default:
    ``$TERMRL_VERIFIER_IMAGE``, the stage's own image where the pipeline sets it, else the task's
    image as built: the agent changes its own container's files, never the image's).
    """

    name = "kubernetes"

    def __init__(
        self,
        namespace: str = NAMESPACE,
        *,
        registry: str | None = None,
        runtime_class: str | None = None,
        image_pull_secrets: tuple[str, ...] = (),
        start_timeout_sec: float = 300.0,
        quota_wait_sec: float | None = None,
        raw_sockets: bool = False,
        owner: StageOwner | None = None,
        kubeconfig: str | None = None,
        api: Any = None,
        verifier_image: str | None = None,
    ):
        self.namespace = namespace
        self.registry = registry
        self.runtime_class = runtime_class
        self.image_pull_secrets = tuple(image_pull_secrets)
        self.start_timeout_sec = start_timeout_sec
        self.quota_wait_sec = start_timeout_sec if quota_wait_sec is None else quota_wait_sec
        self.raw_sockets = raw_sockets
        self.owner = owner if owner is not None else StageOwner.from_environment()
        self.api = api if api is not None else self._load_api(kubeconfig)
        self.verifier_image = verifier_image or os.environ.get("TERMRL_VERIFIER_IMAGE") or None

    @staticmethod
    def _load_api(kubeconfig: str | None) -> Any:
        from kubernetes import client, config

        try:
            kubeconfig = kubeconfig or os.environ.get("KUBECONFIG") or None
            if kubeconfig is not None:  # named: wins over the pod's own account, as for kubectl
                return client.CoreV1Api(config.new_client_from_config(config_file=kubeconfig))
            try:
                config.load_incluster_config()
            except config.ConfigException:
                config.load_kube_config()
        except (config.ConfigException, OSError) as e:
            raise SandboxUnavailable(f"no Kubernetes configuration found: {e}") from e
        return client.CoreV1Api()

    def _new_exec_api(self) -> Any:
        """A client of its own for one exec stream (``stream()`` rewires the client it is given)."""
        from kubernetes import client

        return client.CoreV1Api(client.ApiClient(self.api.api_client.configuration))

    async def build_image(self, spec: SandboxSpec) -> str:
        if spec.image is not None:
            return spec.image
        if self.registry is None:
            raise SandboxUnavailable(
                "the kubernetes backend runs pushed images: set the sandbox registry (pipeline "
                "parameter sandbox_registry) and push the task environments there "
                "(termrl images push-tasks)"
            )
        return f"{self.registry.rstrip('/')}/{spec.image_key}"

    async def _create_pod(self, manifest: dict[str, Any]) -> None:
        """POST the pod (strict field validation: a field the server does not know is an error, never
        silently dropped), waiting out a full quota with jittered exponential backoff."""
        from kubernetes.client.exceptions import ApiException

        delay, longest = QUOTA_BACKOFF_SEC
        give_up = time.monotonic() + self.quota_wait_sec
        while True:
            try:
                await asyncio.to_thread(
                    self.api.create_namespaced_pod,
                    self.namespace,
                    manifest,
                    field_validation="Strict",
                )
                return
            except ApiException as e:
                wait = delay * random.uniform(0.5, 1.0)
                if not _is_quota_exceeded(e) or time.monotonic() + wait > give_up:
                    raise SandboxUnavailable(
                        f"cannot create pod: {e.reason}", log_tail=str(e.body)[-2000:]
                    ) from e
            await asyncio.sleep(wait)
            delay = min(delay * 2, longest)

    async def _wait_running(self, sandbox: KubernetesSandbox) -> None:
        deadline = time.monotonic() + self.start_timeout_sec
        while True:
            pod = await asyncio.to_thread(
                self.api.read_namespaced_pod, sandbox.name, self.namespace
            )
            if pod.status.phase == "Running":
                return
            if pod.status.phase in ("Failed", "Succeeded") or time.monotonic() > deadline:
                await sandbox.destroy()
                raise EnvInitFailed(
                    f"pod {sandbox.name} did not start (phase {pod.status.phase})",
                    log_tail=str(pod.status)[-2000:],
                )
            await asyncio.sleep(0.5)

    async def start(
        self, spec: SandboxSpec, image: str, output_limit: int
    ) -> tuple[KubernetesSandbox, Shell]:
        if spec.user:  # a pod's securityContext takes uids, and the exec API no user: not done yet
            raise EnvInitFailed(
                f"the kubernetes backend cannot run the agent as user {spec.user!r}: use podman"
            )
        name = f"termrl-{uuid.uuid4().hex[:12]}"
        manifest = pod_manifest(
            spec,
            image,
            name,
            runtime_class=self.runtime_class,
            image_pull_secrets=self.image_pull_secrets,
            raw_sockets=self.raw_sockets,
            owner=self.owner,
            namespace=self.namespace,
            verifier_image=self.verifier_image or image,
        )
        await self._create_pod(manifest)
        sandbox = KubernetesSandbox(self.api, self.namespace, name, self._new_exec_api)
        await self._wait_running(sandbox)
        try:
            await sandbox.record_baseline()  # before anything of the agent's runs
        except SandboxDied as e:
            await sandbox.destroy()
            raise EnvInitFailed(f"pod {name}: the verifier did not start: {e}") from e
        token = Shell.new_token()
        ws = await asyncio.to_thread(
            sandbox._stream, ["bash", "-c", SUPERVISOR, "termrl-supervisor", token], stdin=True
        )
        shell = Shell(
            ExecChannel(ws, asyncio.get_running_loop()),
            token,
            sandbox.signal,
            output_limit=output_limit,
        )
        try:
            await shell.start(spec.workdir)
        except SandboxDied as e:
            await sandbox.destroy()
            raise EnvInitFailed(f"pod {name}: shell did not start", log_tail=e.log_tail) from e
        return sandbox, shell
