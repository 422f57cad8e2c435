"""The kubelet's part, done with podman: a Pod becomes a podman pod, each container a podman container.

    pod "ns/name"  ─► podman pod  <prefix>-<ns>-<name>   (infra: the pause container, ``sleep infinity``)
                        --share ipc,uts,net[,pid]       (pid when ``shareProcessNamespace``)
                        --network none | slirp4netns    (what the namespace's NetworkPolicies leave)
    container "c"  ─► podman container <pod>-c          (command/args, env, workingDir, resources,
                                                         capabilities, no-new-privileges, runAsUser,
                                                         seccomp and AppArmor Unconfined)

As on a node, pid 1 of a pod that shares its process namespace is the pause process, and of one
that does not, the container's own command. Images are never pulled (there is no registry): a
missing image leaves the pod Pending with ``ErrImagePull``, as a failing pull does.
``activeDeadlineSeconds`` ends the pod (Failed, ``DeadlineExceeded``).
"""

from __future__ import annotations

import asyncio
import json
import re
import tempfile
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from kubernetes.utils import parse_quantity

__all__ = ["CONMON_DIR", "PodRuntime", "now", "run"]

EGRESS_NETWORK = "slirp4netns:allow_host_loopback=false"
"""What an egress pod gets: a network stack of its own, the host's loopback out of reach."""


def now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


CONMON_DIR = Path(tempfile.gettempdir()) / "termrl-k8s-standin"
"""Where podman runs: conmon marks an OOM kill with a file "oom" in its working directory."""


async def run(*argv: str, check: bool = True) -> tuple[int, str]:
    CONMON_DIR.mkdir(exist_ok=True)
    process = await asyncio.create_subprocess_exec(
        *argv, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT, cwd=CONMON_DIR
    )
    out, _ = await process.communicate()
    text = out.decode(errors="replace")
    if check and process.returncode != 0:
        raise RuntimeError(f"{' '.join(argv[:3])} failed ({process.returncode}): {text[-1000:]}")
    return process.returncode or 0, text


class PodRuntime:
    """Starts, watches and removes the podman pods of the stand-in's Pods."""

    def __init__(self, prefix: str, pause_base: str, *, binary: str = "podman"):
        self.prefix = prefix
        self.pause_base = pause_base
        self.pause_image = "localhost/termrl-k8s-standin-pause:" + re.sub(
            r"[^\w.-]", "-", pause_base
        )
        self.binary = binary
        self._deadlines: dict[str, asyncio.TimerHandle] = {}

    async def prepare(self) -> None:
        """Build the pause image (``sleep infinity`` over ``pause_base``): podman's own needs catatonit."""
        code, _ = await run(self.binary, "image", "exists", self.pause_image, check=False)
        if code != 0:
            containerfile = f'FROM {self.pause_base}\nENTRYPOINT ["sleep", "infinity"]\n'
            with tempfile.TemporaryDirectory() as context:
                process = await asyncio.create_subprocess_exec(
                    self.binary, "build", "-q", "-t", self.pause_image, "-f", "-", context,
                    stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
                    stderr=asyncio.subprocess.STDOUT,
                )  # fmt: skip
                out, _ = await process.communicate(containerfile.encode())
            if process.returncode != 0:
                raise RuntimeError(f"cannot build the pause image: {out.decode()[-1000:]}")

    def pod_name(self, pod: dict[str, Any]) -> str:
        return f"{self.prefix}-{pod['metadata']['namespace']}-{pod['metadata']['name']}"

    def container_name(self, pod: dict[str, Any], container: str) -> str:
        return f"{self.pod_name(pod)}-{container}"

    async def start(self, pod: dict[str, Any], network: str) -> None:
        """Create the podman pod and its containers; updates ``pod['status']`` as they start and end."""
        spec = pod["spec"]
        shared = "ipc,uts,net,pid" if spec.get("shareProcessNamespace") else "ipc,uts,net"
        name = self.pod_name(pod)
        await run(
            self.binary, "pod", "create", "--name", name, "--share", shared,
            "--infra-image", self.pause_image, "--hostname", pod["metadata"]["name"], "--label", f"{self.prefix}=1",
            "--network", "none" if network == "none" else EGRESS_NETWORK,
        )  # fmt: skip
        deadline = spec.get("activeDeadlineSeconds")
        if deadline:
            self._deadlines[name] = asyncio.get_running_loop().call_later(
                deadline, lambda: asyncio.ensure_future(self._deadline_exceeded(pod))
            )
        for container in spec["containers"]:
            status = _container_status(pod, container["name"])
            code, out = await run(*self._run_argv(pod, container), check=False)
            if code != 0:
                reason = "ErrImagePull" if "image not known" in out else "CreateContainerError"
                status["state"] = {"waiting": {"reason": reason, "message": out.strip()[-500:]}}
                continue
            status.update(ready=True, started=True, state={"running": {"startedAt": now()}})
            asyncio.ensure_future(self._watch(pod, container["name"]))
        _update_phase(pod)

    def _run_argv(self, pod: dict[str, Any], container: dict[str, Any]) -> list[str]:
        argv = [self.binary, "run", "-d", "--pull=never", "--pod", self.pod_name(pod)]
        argv += ["--name", self.container_name(pod, container["name"])]
        limits = (container.get("resources") or {}).get("limits") or {}
        if "cpu" in limits:
            argv += ["--cpus", f"{float(parse_quantity(limits['cpu'])):g}"]
        if "memory" in limits:
            memory = str(int(parse_quantity(limits["memory"])))
            argv += ["--memory", memory, "--memory-swap", memory]  # a node runs without swap
        security = {
            **pod["spec"].get("securityContext", {}),
            **container.get("securityContext", {}),
        }
        capabilities = security.get("capabilities") or {}
        argv += [f"--cap-drop={c}" for c in capabilities.get("drop", [])]
        argv += [f"--cap-add={c}" for c in capabilities.get("add", [])]
        if security.get("allowPrivilegeEscalation") is False:
            argv += ["--security-opt", "no-new-privileges"]
        if security.get("privileged"):
            argv.append("--privileged")
        if security.get("readOnlyRootFilesystem"):
            argv.append("--read-only")
        if "runAsUser" in security:
            user = str(security["runAsUser"])
            argv += [
                "--user",
                f"{user}:{security['runAsGroup']}" if "runAsGroup" in security else user,
            ]
        if (security.get("seccompProfile") or {}).get("type") == "Unconfined":
            argv += ["--security-opt", "seccomp=unconfined"]
        if (security.get("appArmorProfile") or {}).get("type") == "Unconfined":
            argv += ["--security-opt", "apparmor=unconfined"]
        for variable in container.get("env") or []:
            argv += ["--env", f"{variable['name']}={variable.get('value', '')}"]
        command, workdir = container.get("command"), container.get("workingDir")
        if workdir and command:
            # The runtime creates a missing workingDir (runc does); podman 4.3 refuses one instead.
            command = ["/bin/sh", "-c", 'mkdir -p "$0" && cd "$0" && exec "$@"', workdir, *command]
        elif workdir:
            argv += ["--workdir", workdir]
        if command:
            argv += ["--entrypoint", json.dumps(command)]
        return [*argv, container["image"], *(container.get("args") or [])]

    async def _watch(self, pod: dict[str, Any], container: str) -> None:
        code, out = await run(self.binary, "wait", self.container_name(pod, container), check=False)
        if code != 0 or pod["status"]["phase"] in ("Succeeded", "Failed"):
            return  # removed with its pod, or the pod already ended
        exit_code = int(out.strip() or 0)
        _container_status(pod, container).update(
            ready=False,
            state={
                "terminated": {
                    "exitCode": exit_code,
                    "reason": "Completed" if exit_code == 0 else "Error",
                    "finishedAt": now(),
                }
            },
        )
        _update_phase(pod)

    async def _deadline_exceeded(self, pod: dict[str, Any]) -> None:
        if pod["status"]["phase"] in ("Succeeded", "Failed"):
            return
        pod["status"].update(
            phase="Failed",
            reason="DeadlineExceeded",
            message="Pod was active on the node longer than the specified deadline",
        )
        await run(self.binary, "pod", "stop", "-t", "0", self.pod_name(pod), check=False)

    async def remove(self, pod: dict[str, Any]) -> None:
        name = self.pod_name(pod)
        timer = self._deadlines.pop(name, None)
        if timer is not None:
            timer.cancel()
        await run(self.binary, "pod", "rm", "-f", "-t", "0", name, check=False)

    async def remove_all(self) -> None:
        """Every podman pod this stand-in made (its label), whatever state its objects are in."""
        _, out = await run(
            self.binary, "pod", "ps", "-q", "--filter", f"label={self.prefix}=1", check=False
        )
        for pod_id in out.split():
            await run(self.binary, "pod", "rm", "-f", "-t", "0", pod_id, check=False)

    async def logs(self, pod: dict[str, Any], container: str) -> str:
        _, out = await run(self.binary, "logs", self.container_name(pod, container), check=False)
        return out

    def exec_argv(
        self, pod: dict[str, Any], container: str, command: list[str], stdin: bool
    ) -> list[str]:
        """``podman exec``: the container's user, environment and working directory, as the CRI's exec."""
        options = ["--interactive"] if stdin else []
        spec = next(c for c in pod["spec"]["containers"] if c["name"] == container)
        if spec.get("workingDir"):
            options += ["--workdir", spec["workingDir"]]
        return [self.binary, "exec", *options, self.container_name(pod, container), *command]


def _container_status(pod: dict[str, Any], name: str) -> dict[str, Any]:
    statuses = pod["status"].setdefault("containerStatuses", [])
    for status in statuses:
        if status["name"] == name:
            return status
    image = next(c["image"] for c in pod["spec"]["containers"] if c["name"] == name)
    status = {
        "name": name,
        "image": image,
        "imageID": "",
        "ready": False,
        "restartCount": 0,
        "started": False,
        "state": {"waiting": {"reason": "ContainerCreating"}},
    }
    statuses.append(status)
    return status


def _update_phase(pod: dict[str, Any]) -> None:
    """The phase as the kubelet derives it for ``restartPolicy: Never``."""
    states = [next(iter(s["state"])) for s in pod["status"].get("containerStatuses", [])]
    if "waiting" in states or not states:
        phase = "Pending" if "running" not in states else "Running"
    elif "running" in states:
        phase = "Running"
    else:
        codes = [s["state"]["terminated"]["exitCode"] for s in pod["status"]["containerStatuses"]]
        phase = "Succeeded" if not any(codes) else "Failed"
    pod["status"]["phase"] = phase
    if phase == "Running":
        pod["status"].setdefault("startTime", now())
