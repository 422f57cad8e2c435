"""The stand-in set up as ``termrl cluster manifests`` sets up a cluster (namespaces, policies, quota)."""

from __future__ import annotations

from pathlib import Path

__all__ = ["apply_cluster_manifests"]


def apply_cluster_manifests(kubeconfig: Path, **options: object) -> int:
    """Create every object of ``termrl cluster manifests`` (``options``: its keyword arguments)
    through the official client, as ``kubectl apply -f`` would; returns how many."""
    from kubernetes import config, utils

    from pipelines.cluster import cluster_manifests

    api_client = config.new_client_from_config(config_file=str(kubeconfig))
    try:
        manifests = cluster_manifests(**options)
        for manifest in manifests:
            utils.create_from_dict(api_client, manifest)
    finally:
        api_client.close()
    return len(manifests)
