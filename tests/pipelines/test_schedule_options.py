"""``termrl schedule nightly-eval``'s cluster options: the KFP recurring run keeps the pipeline's
caching and takes a service account; the Argo output takes the account, the Argo version (its
CronWorkflow's ``schedule`` or ``schedules``) and a workspace volume the eval's GPU node can mount.

The KFP peer is ``test_schedule``'s loopback server, which records what kfp.Client sent.
"""

import pytest
import yaml
from click.testing import CliRunner
from google.protobuf import json_format
from kfp.pipeline_spec import pipeline_spec_pb2
from kubernetes.client import ApiClient

from pipelines.cluster import SERVICE_ACCOUNT
from pipelines.cluster_cli import ARGO_VERSION_DEFAULT, schedule
from pipelines.schedule import ARGO_VERSION, argo_yaml, nightly_argo
from termrl.errors import ConfigError
from tests.pipelines.test_schedule import (  # noqa: F401 (kfp_peer: a fixture)
    _nightly_defaults,
    kfp_peer,
    submitted_spec,
)

CRON = ["--cron", "0 3 * * *", "--registry", "reg.example.com"]


def _recurring_run(requests: list) -> dict:
    return next(
        body for method, path, body in requests if method == "POST" and "recurringruns" in path
    )


def _caching(job: dict) -> dict[str, bool]:
    spec = json_format.ParseDict(
        submitted_spec(job), pipeline_spec_pb2.PipelineSpec(), ignore_unknown_fields=False
    )
    return {t.task_info.name: t.caching_options.enable_cache for t in spec.root.dag.tasks.values()}


def test_the_recurring_run_keeps_the_pipelines_caching(kfp_peer):  # noqa: F811
    host, requests = kfp_peer
    result = CliRunner().invoke(schedule, ["nightly-eval", "--host", host, *CRON])
    assert result.exit_code == 0, result.output
    # as nightly_eval.py and pipelines/README.md say: the tasks cached, the policy and eval afresh
    assert _caching(_recurring_run(requests)) == {
        "prepare policy": False,
        "synthesize eval tasks": True,
        "verify eval tasks": True,
        "eval · nightly": False,
    }
    assert "service_account" not in _recurring_run(requests)  # the KFP profile's own


def test_no_cache_runs_every_task_afresh_under_the_account_given(kfp_peer):  # noqa: F811
    host, requests = kfp_peer
    options = ["--no-cache", "--service-account", "pipeline-runner"]
    result = CliRunner().invoke(schedule, ["nightly-eval", "--host", host, *CRON, *options])
    assert result.exit_code == 0, result.output
    job = _recurring_run(requests)
    assert set(_caching(job).values()) == {False}
    assert job["service_account"] == "pipeline-runner"


def _argo(tmp_path, *options: str) -> tuple[dict, dict]:
    out = tmp_path / "nightly.yaml"
    args = ["nightly-eval", "--argo", str(out), *CRON, "--model-cache-pvc", "termrl-model-cache"]
    result = CliRunner().invoke(schedule, [*args, *options])
    assert result.exit_code == 0, result.output
    template, cron = yaml.safe_load_all(out.read_text())
    return template, cron


def test_argo_runs_under_the_account_of_the_existing_account_flow(tmp_path):
    template, _ = _argo(tmp_path, "--service-account", "pipeline-runner", "--namespace", "kubeflow")
    assert template["spec"]["serviceAccountName"] == "pipeline-runner"
    assert template["metadata"]["namespace"] == "kubeflow"
    default, _ = _argo(tmp_path)
    assert default["spec"]["serviceAccountName"] == SERVICE_ACCOUNT


@pytest.mark.parametrize(
    ("argo_version", "field", "value"),
    [
        (None, "schedules", ["0 3 * * *"]),  # the default, ARGO_VERSION
        ("3.6.0", "schedules", ["0 3 * * *"]),
        ("v4.0.5", "schedules", ["0 3 * * *"]),
        ("3.5.8", "schedule", "0 3 * * *"),
        ("3.4", "schedule", "0 3 * * *"),
    ],
)
def test_the_cron_workflow_is_written_for_the_argo_version_named(
    tmp_path, argo_version, field, value
):
    options = ["--argo-version", argo_version] if argo_version else []
    _, cron = _argo(tmp_path, *options)
    other = {"schedule", "schedules"} - {field}
    assert cron["spec"][field] == value and not other & set(cron["spec"])
    assert cron["kind"] == "CronWorkflow" and cron["spec"]["workflowSpec"]["workflowTemplateRef"]


def test_the_default_argo_version_is_the_documented_one(tmp_path):
    assert ARGO_VERSION == ARGO_VERSION_DEFAULT == "3.6"
    bad = CliRunner().invoke(
        schedule,
        ["nightly-eval", "--argo", str(tmp_path / "n.yaml"), *CRON, "--results-pvc", "r"]
        + ["--argo-version", "four"],
    )
    assert bad.exit_code != 0 and "Argo version 'four' is not a release number" in bad.output
    template, cron = nightly_argo("0 3 * * *", _nightly_defaults(), results_pvc="r")
    with pytest.raises(ConfigError, match="not a release number"):
        argo_yaml(template, cron, "latest")


def _workspace(template: dict) -> dict:
    """The workspace's volume claim template, through the kubernetes client's PVC model."""
    (claim,) = template["spec"]["volumeClaimTemplates"]
    client = ApiClient()
    model = client._ApiClient__deserialize(claim, "V1PersistentVolumeClaim")
    assert client.sanitize_for_serialization(model) == claim  # nothing the model does not know
    return claim


def test_the_workspace_is_shared_by_the_cpu_steps_and_the_gpu_node_eval(tmp_path):
    template, _ = _argo(tmp_path)
    claim = _workspace(template)
    assert claim["spec"]["accessModes"] == ["ReadWriteMany"]
    assert "storageClassName" not in claim["spec"]
    one_node, _ = _argo(
        tmp_path,
        *("--workspace-access-mode", "ReadWriteOnce", "--workspace-storage-class", "local-path"),
    )
    claim = _workspace(one_node)
    assert claim["spec"]["accessModes"] == ["ReadWriteOnce"]
    assert claim["spec"]["storageClassName"] == "local-path"
    with pytest.raises(ConfigError, match="workspace access mode"):
        nightly_argo("0 3 * * *", _nightly_defaults(), results_pvc="r", workspace_access_mode="RWX")


@pytest.mark.parametrize(
    "options",
    [
        ["--argo-version", "3.5"],
        ["--workspace-access-mode", "ReadWriteOnce"],
        ["--results-pvc", "r"],
    ],
)
def test_argo_only_options_are_refused_with_host(options):
    result = CliRunner().invoke(
        schedule, ["nightly-eval", "--host", "http://127.0.0.1:9", *CRON, *options]
    )
    assert result.exit_code != 0 and "for --argo" in result.output


def test_no_cache_is_refused_with_argo(tmp_path):
    result = CliRunner().invoke(
        schedule,
        [
            "nightly-eval",
            "--argo",
            str(tmp_path / "n.yaml"),
            *CRON,
            "--results-pvc",
            "r",
            "--no-cache",
        ],
    )
    assert result.exit_code != 0 and "--no-cache is for --host" in result.output
