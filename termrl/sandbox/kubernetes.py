"""The Kubernetes backend: one pod per session, the shell over the exec stream API.

    create: POST a pod (``pod_manifest``) ─► wait for Running ─► exec ``bash -c SUPERVISOR``
            with stdin over a websocket (``ExecChannel``) ─► the same ``Shell`` as podman

The pod is non-privileged (no privilege escalation, capabilities cut to
Docker's default set, RuntimeDefault seccomp), mounts no service-account
token and no service links, carries the spec's CPU and memory as requests
and limits and its ``storage_mb`` as an ephemeral-storage limit, ends at ``activeDeadlineSeconds`` (the lifetime) and is labelled
per task/group so a whole group can be listed or deleted. ``network: none``
is a label that ``network_policy_manifest`` turns into a deny-all policy;
egress pods get a policy allowing only egress. A pod's pids limit is a
kubelet setting (``podPidsLimit``), not a pod field.

Scoring's fresh processes (``exec_fresh``) are new exec streams with the
container's configured environment (plus the caller's variables) and the
pod's security context. Stopping the agent's processes during scoring runs
``STOP_HELPER`` in the pod (there is no host to act from), with the agent's
own privileges: it uses bash builtins and ``ls``, which the agent could have
replaced.

Images are not built here: a cluster pulls task images from a registry, so
``registry`` maps a task environment to ``<registry>/termrl/env:<hash>``,
pushed by whoever built it (``SandboxManager(backend="podman").build_image``).
Files move through exec'd ``base64``/``tar`` (text-safe over the stream).

The manifests and the channel logic are tested without a cluster; the
create/exec path against a real API server is covered by no test (the README
says what has and has not run).
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
from termrl.sandbox.fresh import fresh_argv, pid_line_argv, split_pid_line
from termrl.sandbox.procs import SERVICE_GRACE_SEC
from termrl.sandbox.session import FileTooLarge, NotRegularFile, Sandbox
from termrl.sandbox.shell import KILL_HELPER, SUPERVISOR, Channel, OutputCap, Shell
from termrl.sandbox.spec import SandboxSpec

__all__ = [
    "NAMESPACE",
    "STOP_HELPER",
    "ExecChannel",
    "KubernetesBackend",
    "KubernetesSandbox",
    "network_policy_manifest",
    "pod_manifest",
]

NAMESPACE = "termrl-sandboxes"
"""Where sessions start unless told otherwise; ``termrl cluster manifests`` sets this namespace up."""
CONTAINER = "sandbox"
# pid 1 reaps orphans and exits on SIGTERM.
IDLE_COMMAND = ["bash", "-c", "trap 'exit 0' TERM; while :; do sleep 3600 & wait $!; done"]

# Runs inside the pod: stop-helper stop [GRACE [SHELL_PID]] | stop-helper cont PID:START...
# stop: first waits, at most GRACE seconds (integer), while a running process that is not a
# service is younger than GRACE: a server the agent started last may still be on its way to
# listening (termrl.sandbox.procs.SERVICE_GRACE_SEC, the host backends' wait; SHELL_PID, the agent's
# shell, is never waited for: it is as young as the pod). Then SIGSTOPs
# every process but pid 1, this helper (and what it starts) and the services (holders of a
# listening socket, and their descendants: termrl.sandbox.procs's rule), in rounds until a
# round finds nothing new; prints PID:START of each process it stopped.
# cont: SIGCONT each PID whose start time (field 22 of its stat) is still START.
STOP_HELPER = r"""
me=$$
start_of() { local line; read -r line 2>/dev/null < "/proc/$1/stat" || return 1; set -- ${line##*) }; REPLY=${20}; }
if [ "$1" = cont ]; then
  shift
  for entry in "$@"; do
    start_of "${entry%%:*}" && [ "$REPLY" = "${entry#*:}" ] && kill -CONT "${entry%%:*}" 2>/dev/null
  done
  exit 0
fi
holds_listener() {
  local line ino
  while read -r line; do
    [[ $line == *"socket:["* ]] || continue
    ino=${line##*socket:[}; ino=${ino%]}
    [ -n "${listening[$ino]}" ] && return 0
  done < <(ls -l "/proc/$1/fd" 2>/dev/null)
  return 1
}
scan() {  # the process table (state, ppid, start) and the services, as of now
  declare -gA listening=() ppid=() state=() start=() service=()
  local table want st inode flags p d line
  for table in tcp tcp6 udp udp6; do
    want=0A; [ "${table#udp}" != "$table" ] && want=07
    { read -r _; while read -r _ _ _ st _ _ _ _ _ inode _; do
        [ "$st" = "$want" ] && listening[$inode]=1
      done; } 2>/dev/null < "/proc/net/$table"
  done
  { read -r _; while read -r _ _ _ flags _ _ inode _; do
      (( 16#$flags & 0x10000 )) && listening[$inode]=1
    done; } 2>/dev/null < /proc/net/unix
  for d in /proc/[0-9]*; do
    p=${d#/proc/}
    read -r line 2>/dev/null < "$d/stat" || continue
    set -- ${line##*) }
    state[$p]=$1 ppid[$p]=$2 start[$p]=${20}
  done
  for p in "${!state[@]}"; do holds_listener "$p" && service[$p]=1; done
}
stoppable() {  # running, not pid 1, not this helper's, not a service's
  local q=$1
  [ "$1" = 1 ] && return 1
  case ${state[$1]} in T|t|Z|X) return 1 ;; esac
  while [ -n "$q" ] && [ "$q" != 0 ] && [ "$q" != 1 ]; do
    [ "$q" = "$me" ] || [ -n "${service[$q]}" ] && return 1
    q=${ppid[$q]}
  done
  return 0
}
uptime_cs() { local up; read -r up _ < /proc/uptime; REPLY=$(( ${up%.*} * 100 + 10#${up#*.} )); }
grace_cs=$(( ${2:-0} * 100 ))
declare -A settled  # the agent's shell: as young as the pod, never a service starting up
for p in "${@:3}"; do settled[$p]=1; done
idle_of_init() {  # pid 1's own `sleep 3600` (IDLE_COMMAND): as young as the pod too
  local args
  [ "${ppid[$1]}" = 1 ] && mapfile -d '' args 2>/dev/null < "/proc/$1/cmdline" && [ "${args[*]}" = "sleep 3600" ]
}
exec {pause}<> <(:)  # read -t on a pipe nobody writes: a sleep without an external binary
uptime_cs; until_cs=$(( REPLY + grace_cs ))
while (( grace_cs > 0 )); do
  scan; uptime_cs; young=0
  for p in "${!state[@]}"; do  # /proc start times are in USER_HZ ticks, 100 a second
    [ -z "${settled[$p]}" ] && ! idle_of_init "$p" && stoppable "$p" && (( REPLY - start[$p] < grace_cs )) \
      && { young=1; break; }
  done
  (( young && REPLY < until_cs )) || break
  read -t 0.2 -u "$pause" _
done
declare -A stopped
for round in 1 2 3 4 5 6 7 8 9 10; do
  scan
  fresh=0
  for p in "${!state[@]}"; do
    [ -n "${stopped[$p]}" ] && continue
    stoppable "$p" || continue
    kill -STOP "$p" 2>/dev/null && { stopped[$p]=1; echo "$p:${start[$p]}"; fresh=1; }
  done
  ((fresh)) || break
done
exit 0
"""


def _label_value(value: str) -> str:
    """A valid label value: <= 63 of [A-Za-z0-9._-], alphanumeric at both ends."""
    cleaned = re.sub(r"[^A-Za-z0-9._-]", "-", value)[:63]
    return cleaned.strip("._-") or "x"


def pod_manifest(
    spec: SandboxSpec,
    image: str,
    name: str,
    *,
    runtime_class: str | None = None,
    image_pull_secrets: tuple[str, ...] = (),
) -> dict[str, Any]:
    """The pod of one session, as a plain manifest dict (``image_pull_secrets``: a private registry)."""
    labels = {"termrl.sandbox": "1", "termrl.network": spec.network}
    labels.update({key: _label_value(value) for key, value in spec.labels.items()})
    resources = {"cpu": f"{int(spec.cpus * 1000)}m", "memory": f"{spec.memory_mb}Mi"}
    # The kubelet evicts a pod that writes past the limit. The request is explicitly 0: left out, it
    # would default to the limit and reserve storage_mb of node disk per pod.
    storage = {"ephemeral-storage": f"{spec.storage_mb}Mi"} if spec.storage_mb else {}
    no_storage = {"ephemeral-storage": "0"} if spec.storage_mb else {}
    container: dict[str, Any] = {
        "name": CONTAINER,
        "image": image,
        "command": IDLE_COMMAND,
        "env": [{"name": k, "value": v} for k, v in sorted(spec.env.items())],
        "resources": {
            "requests": dict(resources, **no_storage),
            "limits": dict(resources, **storage),
        },
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
    if image_pull_secrets:
        pod_spec["imagePullSecrets"] = [{"name": secret} for secret in image_pull_secrets]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": labels},
        "spec": pod_spec,
    }


def network_policy_manifest(namespace: str) -> list[dict[str, Any]]:
    """Policies for the sandbox namespace: no traffic at all, or egress only."""

    def policy(name: str, network: str, egress: list[dict[str, Any]] | None) -> dict[str, Any]:
        spec: dict[str, Any] = {
            "podSelector": {"matchLabels": {"termrl.sandbox": "1", "termrl.network": network}},
            "policyTypes": ["Ingress", "Egress"],
            "ingress": [],
        }
        spec["egress"] = egress or []
        return {
            "apiVersion": "networking.k8s.io/v1",
            "kind": "NetworkPolicy",
            "metadata": {"name": name, "namespace": namespace},
            "spec": spec,
        }

    return [
        policy("termrl-sandbox-none", "none", None),
        policy("termrl-sandbox-egress", "egress", [{}]),
    ]


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

    def _stream(self, command: list[str]) -> Any:
        from kubernetes.stream import stream

        return stream(
            self.api.connect_get_namespaced_pod_exec,
            self.name,
            self.namespace,
            container=CONTAINER,
            command=command,
            stdin=False,
            stdout=True,
            stderr=True,
            tty=False,
            _preload_content=False,
        )

    def _exec(self, script: str, *args: str) -> tuple[int, str]:
        """Run a short helper script in the pod (not the session shell); (status, stdout)."""
        ws = self._stream(["bash", "-c", script, "termrl", *args])
        out = []
        deadline = time.monotonic() + 120
        while ws.is_open() and time.monotonic() < deadline:
            ws.update(timeout=1)
            out.append(ws.read_stdout(timeout=0) or "")
        ws.close()
        return ws.returncode or 0, "".join(out)

    async def signal(self, pid: int, sig: str, mode: str) -> str:
        return (await asyncio.to_thread(self._exec, KILL_HELPER, sig, str(pid), mode))[1]

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
        binds: dict[str, tuple[str, bool]]
        | None = None,  # never given: private_binds is False (no host access to a pod)
        user: str | None = None,
    ) -> tuple[str, int | None, bool, bool]:
        if user is not None:  # Kubernetes' exec API runs as the container's user only
            return (
                f"termrl: the kubernetes backend cannot run a process as user {user!r}\n",
                126,
                False,
                False,
            )
        # The exec stream starts from the container's configured environment; `env` adds the caller's.
        mark = f"__TERMRL_FRESH_{uuid.uuid4().hex[:16]}"
        variables = [f"{k}={v}" for k, v in (env or {}).items()]
        argv = pid_line_argv(mark, ["/usr/bin/env", *variables, *fresh_argv(command, workdir)])
        ws = await asyncio.to_thread(self._stream, argv)
        channel = ExecChannel(ws, asyncio.get_running_loop())
        cap, pid = OutputCap(output_limit), None
        pending: bytes | None = b""  # output until the pid line is complete; None after
        deadline = time.monotonic() + timeout
        timed_out = False
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
                    break
                if pending is not None:
                    pending += chunk
                    if b"\n" not in pending and len(pending) < 256:
                        continue
                    pid, chunk = split_pid_line(mark, pending)
                    pending = None
                cap.add(chunk)
        finally:
            if timed_out and pid is not None:
                await self.signal(pid, "KILL", "all")
            await channel.close()
        if pending:
            cap.add(pending)
        return cap.text(), None if timed_out else (ws.returncode or 0), timed_out, cap.truncated

    async def stop_agent_processes(self, shell_pid: int | None) -> list[str]:
        settled = [] if shell_pid is None else [str(shell_pid)]
        _, out = await asyncio.to_thread(
            self._exec, STOP_HELPER, "stop", str(math.ceil(SERVICE_GRACE_SEC)), *settled
        )
        return out.split()

    async def resume_agent_processes(self, stopped: object) -> None:
        if stopped:
            await asyncio.to_thread(self._exec, STOP_HELPER, "cont", *stopped)  # type: ignore[misc]

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
        namespace: str = NAMESPACE,
        *,
        registry: str | None = None,
        runtime_class: str | None = None,
        image_pull_secrets: tuple[str, ...] = (),
        start_timeout_sec: float = 300.0,
        api: Any = None,
    ):
        self.namespace = namespace
        self.registry = registry
        self.runtime_class = runtime_class
        self.image_pull_secrets = tuple(image_pull_secrets)
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
            raise SandboxUnavailable(
                "the kubernetes backend runs pushed images: set the sandbox registry (pipeline "
                "parameter sandbox_registry) and push the task environments there "
                "(termrl images push-tasks)"
            )
        return f"{self.registry.rstrip('/')}/{spec.image_key}"

    async def start(
        self, spec: SandboxSpec, image: str, output_limit: int
    ) -> tuple[KubernetesSandbox, Shell]:
        if spec.user:  # a pod's securityContext takes uids, and the exec API no user: not done yet
            raise EnvInitFailed(
                f"the kubernetes backend cannot run the agent as user {spec.user!r}: use podman"
            )
        from kubernetes.client.exceptions import ApiException
        from kubernetes.stream import stream

        name = f"termrl-{uuid.uuid4().hex[:12]}"
        manifest = pod_manifest(
            spec,
            image,
            name,
            runtime_class=self.runtime_class,
            image_pull_secrets=self.image_pull_secrets,
        )
        try:
            await asyncio.to_thread(self.api.create_namespaced_pod, self.namespace, manifest)
        except ApiException as e:
            raise SandboxUnavailable(
                f"cannot create pod: {e.reason}", log_tail=str(e.body)[-2000:]
            ) from e
        sandbox = KubernetesSandbox(self.api, self.namespace, name)
        deadline = time.monotonic() + self.start_timeout_sec
        while True:
            pod = await asyncio.to_thread(self.api.read_namespaced_pod, name, self.namespace)
            if pod.status.phase == "Running":
                break
            if pod.status.phase in ("Failed", "Succeeded") or time.monotonic() > deadline:
                await sandbox.destroy()
                raise EnvInitFailed(
                    f"pod {name} did not start (phase {pod.status.phase})",
                    log_tail=str(pod.status)[-2000:],
                )
            await asyncio.sleep(0.5)
        token = Shell.new_token()
        ws = await asyncio.to_thread(
            stream,
            self.api.connect_get_namespaced_pod_exec,
            name,
            self.namespace,
            container=CONTAINER,
            command=["bash", "-c", SUPERVISOR, "termrl-supervisor", token],
            stdin=True,
            stdout=True,
            stderr=True,
            tty=False,
            _preload_content=False,
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
