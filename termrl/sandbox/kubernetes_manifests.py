"""The manifests of the kubernetes backend: a session's pod, the sandbox namespace's NetworkPolicies.

The agent's container is non-privileged and fits the Pod Security Standards' *baseline* level (no
host namespaces, no privilege escalation, capabilities cut to Docker's default set less NET_RAW,
RuntimeDefault seccomp). Beside it, sharing its process namespace, runs the verifier container
(``termrl.sandbox.kubernetes_verifier``: root, SYS_ADMIN and SYS_PTRACE, no seccomp or AppArmor
profile), which scores the agent from outside its reach; it needs a namespace whose Pod Security
level is ``privileged``. The pod mounts no service-account token and no service links, carries the
spec's CPU and memory as requests and limits and its ``storage_mb`` as an ephemeral-storage
limit, ends at ``activeDeadlineSeconds`` (the lifetime) and is labelled per task/group so a whole
group can be listed or deleted. NET_RAW (ping, raw sockets) is added only where the backend is told
to (``raw_sockets``) and the task asks for the network; such pods need a namespace whose Pod
Security level is ``privileged``.

``network: none`` is a label that ``network_policy_manifest`` turns into a deny-all policy; egress
pods may reach DNS and any address outside the cluster's ranges (``CLUSTER_CIDRS`` by default, or
the pod, service and node CIDRs given), never the cluster's own services (object store, KFP API).

Run in a cluster, a sandbox names its stage's pod (``StageOwner``: the downward API's POD_NAME,
POD_UID and POD_NAMESPACE in the stage's environment) in labels, so ``termrl sandbox gc`` can
delete what no live stage owns, and, where both share a namespace, in ``ownerReferences``, so the
garbage collector deletes it with the stage pod (an owner in another namespace counts as absent
to the garbage collector, which would delete the sandbox at once: never set across namespaces).
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from termrl.sandbox.docker_defaults import DOCKER_CAPS
from termrl.sandbox.kubernetes_verifier import verifier_container
from termrl.sandbox.spec import SandboxSpec

__all__ = [
    "CLUSTER_CIDRS",
    "CONTAINER",
    "IDLE_COMMAND",
    "OWNER_LABELS",
    "StageOwner",
    "network_policy_manifest",
    "pod_manifest",
]

CONTAINER = "sandbox"
# pid 1 reaps orphans and exits on SIGTERM.
IDLE_COMMAND = ["bash", "-c", "trap 'exit 0' TERM; while :; do sleep 3600 & wait $!; done"]
BASELINE_CAPS = tuple(c.removeprefix("CAP_") for c in DOCKER_CAPS if c != "CAP_NET_RAW")
"""Docker's default capabilities that the baseline Pod Security level allows to add (all but NET_RAW)."""
CLUSTER_CIDRS = (
    "10.0.0.0/8",
    "172.16.0.0/12",
    "192.168.0.0/16",
    "100.64.0.0/10",
    "169.254.0.0/16",
    "fc00::/7",
    "fe80::/10",
)
"""What egress never reaches unless told otherwise: the private, shared and link-local ranges that
pod, service and node CIDRs are drawn from, and the cloud metadata address (169.254.169.254)."""
OWNER_LABELS = ("termrl.owner-namespace", "termrl.owner-pod", "termrl.owner-uid")


@dataclass(frozen=True)
class StageOwner:
    """The stage pod that starts sandboxes (from the downward API), or None outside a cluster."""

    namespace: str
    name: str
    uid: str

    @classmethod
    def from_environment(cls, environ: Mapping[str, str] | None = None) -> StageOwner | None:
        """From POD_NAMESPACE, POD_NAME and POD_UID, which the stage's pod spec sets (``fieldRef``)."""
        environ = os.environ if environ is None else environ
        values = [environ.get(k, "") for k in ("POD_NAMESPACE", "POD_NAME", "POD_UID")]
        return cls(*values) if all(values) else None

    def labels(self) -> dict[str, str]:
        return dict(zip(OWNER_LABELS, (self.namespace, self.name, self.uid), strict=True))

    def reference(self) -> dict[str, Any]:
        return {"apiVersion": "v1", "kind": "Pod", "name": self.name, "uid": self.uid}


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
    raw_sockets: bool = False,
    owner: StageOwner | None = None,
    namespace: str | None = None,
    verifier_image: str | None = None,
) -> dict[str, Any]:
    """The pod of one session, as a plain manifest dict (``image_pull_secrets``: a private registry).

    ``raw_sockets``: egress sandboxes get NET_RAW. ``owner``: the stage pod, named in labels, and
    in ``ownerReferences`` when it runs in ``namespace`` (the pod's own). ``verifier_image``: the
    verifier container's (``termrl.sandbox.kubernetes_verifier``; default: ``image``).
    """
    labels = {"termrl.sandbox": "1", "termrl.network": spec.network}
    labels.update({key: _label_value(value) for key, value in spec.labels.items()})
    caps = list(BASELINE_CAPS)
    if raw_sockets and spec.network == "egress":
        caps.append("NET_RAW")
    metadata: dict[str, Any] = {"name": name, "labels": labels}
    if owner is not None:
        labels.update({k: _label_value(v) for k, v in owner.labels().items()})
        if owner.namespace == namespace:
            metadata["ownerReferences"] = [owner.reference()]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": metadata,
        "spec": _pod_spec(
            spec, image, verifier_image or image, caps, runtime_class, image_pull_secrets
        ),
    }


def _pod_spec(
    spec: SandboxSpec,
    image: str,
    verifier_image: str,
    caps: list[str],
    runtime_class: str | None,
    image_pull_secrets: tuple[str, ...],
) -> dict[str, Any]:
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
            "capabilities": {"drop": ["ALL"], "add": caps},
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
        # The verifier sees and stops the agent's processes; the agent cannot reach it.
        "shareProcessNamespace": True,
        "containers": [
            container,
            verifier_container(verifier_image, resources["cpu"], resources["memory"]),
        ],
    }
    if runtime_class:
        pod_spec["runtimeClassName"] = runtime_class
    if image_pull_secrets:
        pod_spec["imagePullSecrets"] = [{"name": secret} for secret in image_pull_secrets]
    return pod_spec


def network_policy_manifest(
    namespace: str, cluster_cidrs: tuple[str, ...] = CLUSTER_CIDRS
) -> list[dict[str, Any]]:
    """Policies for the sandbox namespace: no traffic at all, or egress outside ``cluster_cidrs``.

    Egress sandboxes also reach the cluster's DNS (kube-system's kube-dns, port 53), or names
    would not resolve once the service range is excluded.
    """

    def policy(name: str, network: str, egress: list[dict[str, Any]]) -> dict[str, Any]:
        return {
            "apiVersion": "networking.k8s.io/v1",
            "kind": "NetworkPolicy",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {
                "podSelector": {"matchLabels": {"termrl.sandbox": "1", "termrl.network": network}},
                "policyTypes": ["Ingress", "Egress"],
                "ingress": [],
                "egress": egress,
            },
        }

    v4 = [c for c in cluster_cidrs if ":" not in c]
    v6 = [c for c in cluster_cidrs if ":" in c]
    outside = [
        {"ipBlock": {"cidr": "0.0.0.0/0", **({"except": v4} if v4 else {})}},
        {"ipBlock": {"cidr": "::/0", **({"except": v6} if v6 else {})}},
    ]
    dns = {
        "to": [
            {
                "namespaceSelector": {
                    "matchLabels": {"kubernetes.io/metadata.name": "kube-system"}
                },
                "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}},
            }
        ],
        "ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}],
    }
    return [
        policy("termrl-sandbox-none", "none", []),
        policy("termrl-sandbox-egress", "egress", [{"to": outside}, dns]),
    ]
