"""``termrl cluster manifests``: every object validated by the kubernetes client's models, and wired to the backend.

No cluster runs here. Each manifest is deserialised into its ``kubernetes.client``
model and serialised back: a field the model does not know (a typo, a wrong
nesting) is dropped on the way and the round trip differs. ``kubectl apply
--dry-run=client`` runs too where kubectl has an API server to ask.
"""

import shutil
import subprocess

import pytest
import yaml
from click.testing import CliRunner
from kubernetes.client import ApiClient

from pipelines.cluster import (
    SANDBOX_NAMESPACE,
    ModelCache,
    SandboxQuota,
    cluster_manifests,
    to_yaml,
)
from pipelines.cluster_cli import cluster
from termrl.errors import ConfigError
from termrl.sandbox.kubernetes import KubernetesBackend, pod_manifest
from termrl.sandbox.spec import SandboxSpec


def _round_trip(document: dict) -> dict:
    """``document`` through its kubernetes model (``V1Role`` for kind Role) and back to a dict."""
    client = ApiClient()
    model = client._ApiClient__deserialize(document, f"V1{document['kind']}")
    return client.sanitize_for_serialization(model)


def _by_kind(documents: list[dict]) -> dict[str, list[dict]]:
    kinds: dict[str, list[dict]] = {}
    for document in documents:
        kinds.setdefault(document["kind"], []).append(document)
    return kinds


def test_every_manifest_is_a_valid_kubernetes_object():
    documents = list(yaml.safe_load_all(to_yaml(cluster_manifests())))
    assert [d["kind"] for d in documents] == [
        "Namespace",
        "Namespace",
        "ServiceAccount",
        "Role",
        "RoleBinding",
        "Role",
        "RoleBinding",
        "NetworkPolicy",
        "NetworkPolicy",
        "ResourceQuota",
    ]
    for document in documents:
        assert _round_trip(document) == document, document["kind"]


def test_rbac_lets_the_pipeline_account_run_sandboxes_and_nothing_else():
    kinds = _by_kind(cluster_manifests(namespace="ml", service_account="runner"))
    role = next(r for r in kinds["Role"] if r["metadata"]["namespace"] == SANDBOX_NAMESPACE)
    granted = {
        (resource, verb)
        for rule in role["rules"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }
    assert granted == {("pods", v) for v in ("create", "get", "list", "watch", "delete")} | {
        ("pods/exec", "create"),
        ("pods/exec", "get"),
        ("pods/log", "get"),
    }
    assert all(rule["apiGroups"] == [""] for rule in role["rules"])
    binding = next(
        b for b in kinds["RoleBinding"] if b["metadata"]["namespace"] == SANDBOX_NAMESPACE
    )
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    # the account lives where the pipeline runs; it acts in the sandbox namespace
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "runner", "namespace": "ml"}]
    assert kinds["ServiceAccount"][0]["metadata"] == {"name": "runner", "namespace": "ml"}
    assert {n["metadata"]["name"] for n in kinds["Namespace"]} == {"ml", SANDBOX_NAMESPACE}


def test_an_existing_account_is_bound_but_never_declared():
    # KFP's own account: declaring it would let `kubectl delete -f` remove it (and its namespace)
    documents = cluster_manifests(
        namespace="kubeflow", service_account="pipeline-runner", existing_account=True
    )
    assert [
        d["metadata"]["name"] for d in documents if d["kind"] in ("Namespace", "ServiceAccount")
    ] == [SANDBOX_NAMESPACE]
    bindings = _by_kind(documents)["RoleBinding"]
    assert {(s["name"], s["namespace"]) for b in bindings for s in b["subjects"]} == {
        ("pipeline-runner", "kubeflow")
    }
    # and nothing that may be the user's carries termrl's label, which a clean-up would select
    part_of = "app.kubernetes.io/part-of"
    labelled = {
        d["kind"] for d in cluster_manifests() if part_of in d["metadata"].get("labels", {})
    }
    assert labelled == {"Role", "RoleBinding", "NetworkPolicy", "ResourceQuota"}


def test_the_sandbox_namespace_admits_the_verifier_and_audits_the_agent_at_baseline():
    namespaces = {d["metadata"]["name"]: d for d in _by_kind(cluster_manifests())["Namespace"]}
    labels = namespaces[SANDBOX_NAMESPACE]["metadata"]["labels"]
    # the verifier container (SYS_ADMIN, SYS_PTRACE, unconfined) is refused below privileged
    assert labels["pod-security.kubernetes.io/enforce"] == "privileged"
    assert labels["pod-security.kubernetes.io/audit"] == "baseline"
    assert "labels" not in namespaces["termrl"]["metadata"]  # the pipeline's pods: left as they are


def test_egress_excludes_the_cluster_cidrs_given_and_refuses_bad_ones():
    documents = cluster_manifests(cluster_cidrs=("10.244.0.0/16", "10.96.0.0/12"))
    egress = next(
        p for p in _by_kind(documents)["NetworkPolicy"] if "egress" in p["metadata"]["name"]
    )
    assert egress["spec"]["egress"][0]["to"][0]["ipBlock"]["except"] == [
        "10.244.0.0/16",
        "10.96.0.0/12",
    ]
    with pytest.raises(ConfigError, match="not-a-cidr"):
        cluster_manifests(cluster_cidrs=("not-a-cidr",))


def test_network_policies_select_the_backends_pods():
    # the manifests' sandbox namespace is where the backend starts pods by default
    assert KubernetesBackend(api=object()).namespace == SANDBOX_NAMESPACE
    policies = _by_kind(cluster_manifests())["NetworkPolicy"]
    assert {p["metadata"]["namespace"] for p in policies} == {SANDBOX_NAMESPACE}

    def applying(network: str) -> list[dict]:
        labels = pod_manifest(SandboxSpec(image="img", network=network), "img", "p")["metadata"][
            "labels"
        ]
        return [
            p for p in policies if p["spec"]["podSelector"]["matchLabels"].items() <= labels.items()
        ]

    (none,) = applying("none")
    assert (
        none["spec"]["ingress"] == [] and none["spec"]["egress"] == []
    )  # nothing in, nothing out (no DNS)
    assert none["spec"]["policyTypes"] == ["Ingress", "Egress"]
    (egress,) = applying("egress")
    assert egress["spec"]["ingress"] == []  # nothing in; out to DNS and beyond the cluster's ranges
    assert egress["spec"]["egress"][0]["to"][0]["ipBlock"]["cidr"] == "0.0.0.0/0"


def test_quota_bounds_the_sandbox_namespace():
    (quota,) = _by_kind(cluster_manifests(quota=SandboxQuota(pods=16, cpu="8", memory="32Gi")))[
        "ResourceQuota"
    ]
    assert quota["metadata"]["namespace"] == SANDBOX_NAMESPACE
    assert quota["spec"]["hard"] == {
        "pods": "16",
        "requests.cpu": "8",
        "limits.cpu": "8",
        "requests.memory": "32Gi",
        "limits.memory": "32Gi",
    }
    # a sandbox pod sets requests and limits, as a namespace with a cpu/memory quota requires
    resources = pod_manifest(SandboxSpec(image="img"), "img", "p")["spec"]["containers"][0][
        "resources"
    ]
    assert set(resources) == {"requests", "limits"} and {"cpu", "memory"} <= set(
        resources["limits"]
    )


def test_bad_names_and_quantities_are_refused_at_once():
    with pytest.raises(ConfigError) as caught:
        cluster_manifests(
            namespace="Termrl", service_account="a_b", quota=SandboxQuota(pods=0, memory="lots")
        )
    assert len(caught.value.problems) == 4


def test_manifests_command_prints_the_stream():
    result = CliRunner().invoke(
        cluster,
        [
            "manifests",
            "--namespace",
            "ml",
            "--sandbox-namespace",
            "ml-sandboxes",
            "--sandbox-pods",
            "8",
        ],
    )
    assert result.exit_code == 0, result.output
    documents = list(yaml.safe_load_all(result.output))
    assert documents == cluster_manifests(
        namespace="ml", sandbox_namespace="ml-sandboxes", quota=SandboxQuota(pods=8)
    )
    bad = CliRunner().invoke(cluster, ["manifests", "--sandbox-cpu", "many"])
    assert bad.exit_code != 0 and "not a Kubernetes quantity" in bad.output


def test_kubectl_client_dry_run_accepts_the_manifests():
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl is not on PATH")
    # A client-side dry run still asks the API server which kinds exist (discovery).
    probe = subprocess.run(
        [kubectl, "api-versions", "--request-timeout=5s"], capture_output=True, text=True
    )
    if probe.returncode != 0:
        pytest.skip(
            f"kubectl has no API server to dry-run against: {probe.stderr.strip().splitlines()[-1]}"
        )
    applied = subprocess.run(
        [kubectl, "apply", "--dry-run=client", "-f", "-"],
        input=to_yaml(cluster_manifests()),
        capture_output=True,
        text=True,
    )
    assert applied.returncode == 0, applied.stderr


def test_the_model_cache_pvc_is_read_write_many_for_the_stages_that_mount_it():
    cache = ModelCache("termrl-model-cache", "200Gi", "nfs-client")
    documents = cluster_manifests(namespace="ml", model_cache=cache)
    (pvc,) = _by_kind(documents)["PersistentVolumeClaim"]
    assert _round_trip(pvc) == pvc  # a valid V1PersistentVolumeClaim
    assert pvc["metadata"]["namespace"] == "ml"  # where the pipeline's pods mount it
    assert pvc["spec"] == {
        "accessModes": ["ReadWriteMany"],  # parallel stages on different nodes, retries elsewhere
        "resources": {"requests": {"storage": "200Gi"}},
        "storageClassName": "nfs-client",
    }
    assert "PersistentVolumeClaim" not in _by_kind(cluster_manifests())  # only when asked for
    with pytest.raises(ConfigError) as caught:
        cluster_manifests(model_cache=ModelCache("Cache", "lots", "a_b"))
    assert len(caught.value.problems) == 3


def test_manifests_command_writes_the_model_cache_pvc_the_compile_step_names():
    args = ["manifests", "--namespace", "ml", "--model-cache-pvc", "termrl-model-cache"]
    result = CliRunner().invoke(cluster, [*args, "--model-cache-size", "50Gi"])
    assert result.exit_code == 0, result.output
    (pvc,) = [d for d in yaml.safe_load_all(result.output) if d["kind"] == "PersistentVolumeClaim"]
    assert (pvc["metadata"]["name"], pvc["spec"]["resources"]["requests"]["storage"]) == (
        "termrl-model-cache",
        "50Gi",
    )
    assert "storageClassName" not in pvc["spec"]  # the cluster's default class
    lone = CliRunner().invoke(cluster, ["manifests", "--storage-class", "nfs"])
    assert lone.exit_code != 0 and "give --model-cache-pvc NAME" in lone.output
