"""``termrl sandbox gc --backend kubernetes``: delete the sandbox pods no live stage owns.

A sandbox pod is deleted when it has ended (Succeeded or Failed: nothing deletes those, and they
count against nothing but clutter the namespace), or when the stage pod its owner labels name
(``termrl.owner-*``, see ``kubernetes_manifests.StageOwner``) is gone, is another pod of the same
name (a different uid), or has ended. A running pod without owner labels was started outside a
cluster (a developer's ``termrl run``): it is kept, and ends at its ``activeDeadlineSeconds``.
"""

from __future__ import annotations

from typing import Any

from termrl.sandbox.kubernetes_manifests import OWNER_LABELS

__all__ = ["orphaned_sandboxes", "delete_orphaned_sandboxes"]

ENDED = ("Succeeded", "Failed")


def _owner_alive(api: Any, labels: dict[str, str]) -> bool | None:
    """Whether the stage pod named in ``labels`` runs; None when the pod names no owner."""
    from kubernetes.client.exceptions import ApiException

    namespace, name, uid = (labels.get(key) for key in OWNER_LABELS)
    if not (namespace and name and uid):
        return None
    try:
        owner = api.read_namespaced_pod(name, namespace)
    except ApiException as e:
        if e.status == 404:
            return False
        raise
    return owner.metadata.uid == uid and owner.status.phase not in ENDED


def orphaned_sandboxes(api: Any, namespace: str) -> list[str]:
    """Names of the sandbox pods in ``namespace`` that nothing live owns (see the module docstring)."""
    orphans = []
    for pod in api.list_namespaced_pod(namespace, label_selector="termrl.sandbox=1").items:
        if pod.status.phase in ENDED or _owner_alive(api, pod.metadata.labels or {}) is False:
            orphans.append(pod.metadata.name)
    return orphans


def delete_orphaned_sandboxes(api: Any, namespace: str) -> list[str]:
    """Delete ``orphaned_sandboxes`` (at once: grace 0); returns their names."""
    from kubernetes.client.exceptions import ApiException

    deleted = []
    for name in orphaned_sandboxes(api, namespace):
        try:
            api.delete_namespaced_pod(name, namespace, grace_period_seconds=0)
        except ApiException as e:
            if e.status != 404:  # gone meanwhile: its stage closed it
                raise
        deleted.append(name)
    return deleted
