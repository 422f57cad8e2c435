"""The Kubernetes objects a cluster needs once before the pipeline's stages run there (``termrl cluster manifests``).

    namespace NAMESPACE           the pipeline's pods: ServiceAccount SERVICE_ACCOUNT (both left out when
                                  they exist already, as KFP's do), and a Role letting Argo's executor
                                  in those pods report outputs (workflowtaskresults)
    namespace SANDBOX_NAMESPACE   the sandbox pods (``termrl.sandbox.kubernetes``):
                                  Role + RoleBinding: SERVICE_ACCOUNT creates, watches and deletes pods,
                                      execs into them (pods/exec) and reads their logs
                                  labelled for Pod Security: ``privileged`` enforced (each sandbox
                                      pod's verifier container needs SYS_ADMIN and SYS_PTRACE),
                                      ``baseline`` warned and audited (what the agent's container fits)
                                  NetworkPolicies: no ingress ever; no egress (not even DNS) for a sandbox
                                      labelled ``termrl.network: none`` (the default); for one labelled
                                      ``egress`` (a task that asks for the internet) DNS and addresses
                                      outside the cluster's ranges (``cluster_cidrs``: pod, service and
                                      node CIDRs; private ranges by default), never in-cluster services
                                  ResourceQuota: most pods, CPU and memory all sandboxes hold together
    model cache (optional)        a ReadWriteMany PersistentVolumeClaim in NAMESPACE, which
                                  ``termrl compile --model-cache-pvc`` mounts in every stage (retries
                                  resume from it; parallel stages on different nodes mount it at once)

Every function returns plain manifest dicts (what ``kubectl apply -f`` reads);
tests validate them against the ``kubernetes`` client's models. The sandbox
policies are the backend's own (``network_policy_manifest``), so they select
exactly the labels its pods carry.

No-network sandboxes get no DNS either: the backend's ``network: none`` means no
network at all, as it does on podman (``--network=none``) and bwrap.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import yaml

from termrl.errors import ConfigError
from termrl.sandbox import kubernetes as sandbox_backend

__all__ = [
    "NAMESPACE",
    "POD_SECURITY",
    "SANDBOX_NAMESPACE",
    "SERVICE_ACCOUNT",
    "ModelCache",
    "SandboxQuota",
    "cluster_manifests",
    "model_cache_manifest",
    "executor_rbac",
    "namespace_manifest",
    "sandbox_quota",
    "sandbox_rbac",
    "service_account_manifest",
    "to_yaml",
]

NAMESPACE = "termrl"
SANDBOX_NAMESPACE = sandbox_backend.NAMESPACE
SERVICE_ACCOUNT = "termrl-pipeline"

_LABELS = {"app.kubernetes.io/part-of": "termrl"}
_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


@dataclass(frozen=True)
class SandboxQuota:
    """What all sandbox pods together may hold (each pod requests what its task's limits say)."""

    pods: int = 64
    """Sandboxes alive at once, across every stage and run in the namespace."""
    cpu: str = "64"
    """CPU requested (and limited) by all sandboxes: 64 of the default 1-CPU sandboxes."""
    memory: str = "128Gi"
    """Memory requested (and limited) by all sandboxes: 64 of the default 2 GiB sandboxes."""

    def problems(self) -> list[str]:
        # Imported here: the client is slow to import, and `termrl --help` imports this module.
        from kubernetes.utils import parse_quantity

        problems = [] if self.pods > 0 else [f"sandbox quota: pods must be > 0, not {self.pods}"]
        for name, value in (("cpu", self.cpu), ("memory", self.memory)):
            try:
                parse_quantity(value)
            except ValueError:
                problems.append(
                    f"sandbox quota: {name} {value!r} is not a Kubernetes quantity (e.g. 64, 500m, 128Gi)"
                )
        return problems


@dataclass(frozen=True)
class ModelCache:
    """The model-cache volume: checkpoints, converted models and the nightly's results."""

    name: str = "termrl-model-cache"
    size: str = "100Gi"
    """Room for a few policies' checkpoints (SmolLM2-class: a few GiB each) and the cache's models."""
    storage_class: str = ""
    """A class that provides ReadWriteMany (NFS, CephFS, EFS, Filestore...); '' = the default."""

    def problems(self) -> list[str]:
        from kubernetes.utils import parse_quantity

        problems = []
        if not _DNS_SUBDOMAIN.fullmatch(self.name) or len(self.name) > 253:
            problems.append(f"model cache PVC name {self.name!r} is not a valid name")
        if self.storage_class and not _DNS_SUBDOMAIN.fullmatch(self.storage_class):
            problems.append(f"storage class {self.storage_class!r} is not a valid name")
        try:
            parse_quantity(self.size)
        except ValueError:
            problems.append(f"model cache size {self.size!r} is not a Kubernetes quantity (100Gi)")
        return problems


def model_cache_manifest(cache: ModelCache, namespace: str) -> dict[str, Any]:
    """The model cache's PVC: ReadWriteMany, since stages running at once on different nodes (CPU
    and GPU ones) mount it, and a retried stage's pod may land on another node."""
    spec: dict[str, Any] = {
        "accessModes": ["ReadWriteMany"],
        "resources": {"requests": {"storage": cache.size}},
    }
    if cache.storage_class:
        spec["storageClassName"] = cache.storage_class
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": _metadata(cache.name, namespace),
        "spec": spec,
    }


def _metadata(name: str, namespace: str) -> dict[str, Any]:
    """Metadata of an object only termrl uses (a ``termrl-`` name), labelled so: a namespace or account
    may be one the user already had (``kubeflow``), and a label selector must never reach it."""
    return {"name": name, "namespace": namespace, "labels": dict(_LABELS)}


POD_SECURITY = {
    "pod-security.kubernetes.io/enforce": "privileged",
    "pod-security.kubernetes.io/warn": "baseline",
    "pod-security.kubernetes.io/audit": "baseline",
}
"""The sandbox namespace's Pod Security labels. Enforced: privileged, because scoring runs in a
verifier container beside the agent's (``termrl.sandbox.kubernetes_verifier``) that needs SYS_ADMIN,
SYS_PTRACE and no seccomp profile to stop the agent and mount the tests privately. The agent's own
container fits baseline: warned and audited, so a pod that gives the agent more shows up in
``kubectl`` and the audit log."""


def namespace_manifest(name: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name}
    if labels:
        metadata["labels"] = dict(labels)
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": metadata}


def service_account_manifest(name: str, namespace: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": {"name": name, "namespace": namespace},
    }


def _role_and_binding(
    name: str,
    namespace: str,
    rules: list[dict[str, Any]],
    service_account: str,
    account_namespace: str,
) -> list[dict[str, Any]]:
    """A Role in ``namespace`` and its binding to a service account (of ``account_namespace``)."""
    role = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": _metadata(name, namespace),
        "rules": rules,
    }
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": _metadata(name, namespace),
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
        "subjects": [
            {"kind": "ServiceAccount", "name": service_account, "namespace": account_namespace}
        ],
    }
    return [role, binding]


def sandbox_rbac(
    sandbox_namespace: str, service_account: str, namespace: str
) -> list[dict[str, Any]]:
    """What the kubernetes backend calls in the sandbox namespace, and nothing more.

    create/get/list/watch/delete pods (one pod per session), pods/exec (create for
    the websocket stream; get, which some API servers check for the upgrade), pods/log.
    """
    rules = [
        {
            "apiGroups": [""],
            "resources": ["pods"],
            "verbs": ["create", "get", "list", "watch", "delete"],
        },
        {"apiGroups": [""], "resources": ["pods/exec"], "verbs": ["create", "get"]},
        {"apiGroups": [""], "resources": ["pods/log"], "verbs": ["get"]},
    ]
    return _role_and_binding(
        "termrl-sandboxes", sandbox_namespace, rules, service_account, namespace
    )


def executor_rbac(namespace: str, service_account: str) -> list[dict[str, Any]]:
    """Argo's executor (KFP v2 runs on Argo too) reports each step's outputs as workflowtaskresults."""
    rules = [
        {
            "apiGroups": ["argoproj.io"],
            "resources": ["workflowtaskresults"],
            "verbs": ["create", "patch"],
        }
    ]
    return _role_and_binding(
        "termrl-pipeline-executor", namespace, rules, service_account, namespace
    )


def sandbox_quota(sandbox_namespace: str, quota: SandboxQuota) -> dict[str, Any]:
    hard = {
        "pods": str(quota.pods),
        "requests.cpu": quota.cpu,
        "limits.cpu": quota.cpu,
        "requests.memory": quota.memory,
        "limits.memory": quota.memory,
    }
    return {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": _metadata("termrl-sandboxes", sandbox_namespace),
        "spec": {"hard": hard},
    }


def cluster_manifests(
    *,
    namespace: str = NAMESPACE,
    sandbox_namespace: str = SANDBOX_NAMESPACE,
    service_account: str = SERVICE_ACCOUNT,
    quota: SandboxQuota = SandboxQuota(),  # noqa: B008 - frozen, never mutated
    existing_account: bool = False,
    model_cache: ModelCache | None = None,
    cluster_cidrs: tuple[str, ...] = sandbox_backend.CLUSTER_CIDRS,
) -> list[dict[str, Any]]:
    """Every object, in the order ``kubectl apply`` needs (namespaces first).

    ``existing_account``: the pipeline's namespace and service account exist already (KFP's own,
    such as ``kubeflow``/``pipeline-runner``), so they are left out: ``kubectl delete -f`` on this
    output must not remove them. ``model_cache``: its PVC, last (``model_cache_manifest``).
    ``cluster_cidrs``: what egress sandboxes never reach (the pod, service and node CIDRs; by
    default every private, shared and link-local range).
    """
    names = (
        ("namespace", namespace, _DNS_LABEL),
        ("sandbox namespace", sandbox_namespace, _DNS_LABEL),
        ("service account", service_account, _DNS_SUBDOMAIN),
    )
    problems = [
        f"{what} {name!r} is not a valid name (lowercase letters, digits, '-', alphanumeric at both ends)"
        for what, name, pattern in names
        if not pattern.fullmatch(name) or len(name) > 253
    ]
    problems += quota.problems()
    problems += model_cache.problems() if model_cache else []
    problems += _cidr_problems(cluster_cidrs)
    if problems:
        raise ConfigError(problems)
    policies = sandbox_backend.network_policy_manifest(sandbox_namespace, tuple(cluster_cidrs))
    for policy in policies:
        policy["metadata"]["labels"] = dict(_LABELS)
    namespaces = (sandbox_namespace,) if existing_account else (namespace, sandbox_namespace)
    account = [] if existing_account else [service_account_manifest(service_account, namespace)]
    return [
        *(
            namespace_manifest(name, POD_SECURITY if name == sandbox_namespace else None)
            for name in dict.fromkeys(namespaces)
        ),
        *account,
        *executor_rbac(namespace, service_account),
        *sandbox_rbac(sandbox_namespace, service_account, namespace),
        *policies,
        sandbox_quota(sandbox_namespace, quota),
        *([model_cache_manifest(model_cache, namespace)] if model_cache else []),
    ]


def _cidr_problems(cidrs: tuple[str, ...]) -> list[str]:
    import ipaddress

    problems = []
    for cidr in cidrs:
        try:
            ipaddress.ip_network(cidr)
        except ValueError:
            problems.append(f"cluster CIDR {cidr!r} is not a network (e.g. 10.244.0.0/16)")
    return problems


def to_yaml(manifests: list[dict[str, Any]]) -> str:
    """One multi-document YAML stream, keys in the order written."""
    return yaml.safe_dump_all(manifests, sort_keys=False)
