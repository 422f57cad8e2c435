"""The stand-in API server refuses what a real one refuses, where the kubernetes backend depends on it,
and keeps what ``termrl cluster manifests`` writes. Driven through the official client only."""

from __future__ import annotations

import json
import time
import uuid

import pytest
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException
from kubernetes.stream import stream

from pipelines.cluster import cluster_manifests

pytestmark = [pytest.mark.podman, pytest.mark.timeout(300)]
NAMESPACE = "termrl-sandboxes"


@pytest.fixture
def api(k8s_standin) -> client.CoreV1Api:
    return client.CoreV1Api(config.new_client_from_config(config_file=str(k8s_standin.kubeconfig)))


def _pod(image: str, **container: object) -> dict:
    name = f"probe-{uuid.uuid4().hex[:6]}"
    spec = {"name": "main", "image": image, "command": ["sleep", "300"], **container}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {"containers": [spec]},
    }


def _wait_phase(api: client.CoreV1Api, name: str, phase: str) -> None:
    for _ in range(600):
        if api.read_namespaced_pod(name, NAMESPACE).status.phase == phase:
            return
        time.sleep(0.1)
    raise AssertionError(f"pod {name} never became {phase}")


def test_unknown_fields_are_refused_under_strict_validation_and_dropped_otherwise(api, base_images):
    manifest = _pod(base_images, bogus=1)
    with pytest.raises(ApiException) as refused:
        api.create_namespaced_pod(NAMESPACE, manifest, field_validation="Strict")
    assert refused.value.status == 400
    message = json.loads(refused.value.body)["message"]
    assert 'strict decoding error: unknown field "spec.containers[0].bogus"' in message
    created = api.create_namespaced_pod(NAMESPACE, manifest)  # Warn, the default: pruned
    assert "bogus" not in str(api.api_client.sanitize_for_serialization(created))
    api.delete_namespaced_pod(created.metadata.name, NAMESPACE)


def test_a_pod_past_the_quota_is_forbidden(api, base_images):
    namespace = f"q-{uuid.uuid4().hex[:6]}"
    api.create_namespace({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    quota = {"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "q"}}
    api.create_namespaced_resource_quota(namespace, {**quota, "spec": {"hard": {"pods": "1"}}})
    try:
        api.create_namespaced_pod(namespace, _pod(base_images))
        with pytest.raises(ApiException) as refused:
            api.create_namespaced_pod(namespace, _pod(base_images))
        assert refused.value.status == 403 and "exceeded quota: q" in refused.value.body
    finally:
        api.delete_namespace(namespace)


def test_exec_needs_a_running_container(api, base_images):
    pending = api.create_namespaced_pod(NAMESPACE, _pod("termrl/no-such-image:1"))
    ended = api.create_namespaced_pod(NAMESPACE, _pod(base_images, command=["true"]))
    _wait_phase(api, ended.metadata.name, "Succeeded")
    for pod, answer in (
        (pending, "unable to upgrade connection: container not found"),
        (ended, "cannot exec into a container in a completed pod; current phase is Succeeded"),
    ):
        with pytest.raises(ApiException) as refused:
            stream(
                api.connect_get_namespaced_pod_exec, pod.metadata.name, NAMESPACE, command=["true"]
            )
        assert "Handshake status 400" in refused.value.reason and answer in refused.value.reason
    waiting = api.read_namespaced_pod(pending.metadata.name, NAMESPACE).status.container_statuses
    assert waiting[0].state.waiting.reason == "ErrImagePull"
    for pod in (pending, ended):
        api.delete_namespaced_pod(pod.metadata.name, NAMESPACE)


def test_exec_speaks_the_channel_protocol_to_the_official_client(api, base_images):
    pod = api.create_namespaced_pod(NAMESPACE, _pod(base_images))
    _wait_phase(api, pod.metadata.name, "Running")
    ws = stream(
        api.connect_get_namespaced_pod_exec,
        pod.metadata.name,
        NAMESPACE,
        command=["sh", "-c", "read line; echo out $line; echo err >&2; exit 7"],
        stdin=True,
        stdout=True,
        stderr=True,
        tty=False,
        _preload_content=False,
    )
    ws.write_stdin("in\n")
    ws.run_forever(timeout=60)
    assert (ws.read_stdout(), ws.read_stderr(), ws.returncode) == ("out in\n", "err\n", 7)
    assert api.read_namespaced_pod_log(pod.metadata.name, NAMESPACE) == ""
    api.delete_namespaced_pod(pod.metadata.name, NAMESPACE)
    with pytest.raises(ApiException) as gone:
        api.read_namespaced_pod(pod.metadata.name, NAMESPACE)
    assert gone.value.status == 404


def test_the_cluster_manifests_are_stored_and_read_back(k8s_standin):
    """The fixture applied every object of ``termrl cluster manifests``; each reads back as written."""
    api_client = config.new_client_from_config(config_file=str(k8s_standin.kubeconfig))
    core, networking = client.CoreV1Api(api_client), client.NetworkingV1Api(api_client)
    rbac = client.RbacAuthorizationV1Api(api_client)
    read = {
        "Namespace": lambda m: core.read_namespace(m["metadata"]["name"]),
        "ServiceAccount": lambda m: core.read_namespaced_service_account(
            m["metadata"]["name"], m["metadata"]["namespace"]
        ),
        "ResourceQuota": lambda m: core.read_namespaced_resource_quota(
            m["metadata"]["name"], m["metadata"]["namespace"]
        ),
        "NetworkPolicy": lambda m: networking.read_namespaced_network_policy(
            m["metadata"]["name"], m["metadata"]["namespace"]
        ),
        "Role": lambda m: rbac.read_namespaced_role(
            m["metadata"]["name"], m["metadata"]["namespace"]
        ),
        "RoleBinding": lambda m: rbac.read_namespaced_role_binding(
            m["metadata"]["name"], m["metadata"]["namespace"]
        ),
    }
    for manifest in cluster_manifests():
        stored = api_client.sanitize_for_serialization(read[manifest["kind"]](manifest))
        for key, value in manifest.items():
            if key == "metadata":
                assert stored["metadata"].get("labels") == value.get("labels")
            else:
                assert stored[key] == value, (manifest["kind"], key)


def test_a_pod_past_its_active_deadline_is_failed_and_stopped(api, base_images):
    pod = _pod(base_images)
    pod["spec"]["activeDeadlineSeconds"] = 2
    name = api.create_namespaced_pod(NAMESPACE, pod).metadata.name
    _wait_phase(api, name, "Failed")
    assert api.read_namespaced_pod(name, NAMESPACE).status.reason == "DeadlineExceeded"
    with pytest.raises(ApiException) as refused:
        stream(api.connect_get_namespaced_pod_exec, name, NAMESPACE, command=["true"])
    assert "current phase is Failed" in refused.value.reason
    api.delete_namespaced_pod(name, NAMESPACE)
