"""Both schedule paths: a KFP recurring run over real HTTP, an Argo CronWorkflow round trip.

The KFP peer is a loopback HTTP server started here that speaks the few
endpoints kfp.Client calls (healthz, experiments, recurring runs) and records
every request, so the test reads exactly what the client sent.
"""

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import yaml
from click.testing import CliRunner
from google.protobuf import json_format
from kfp.pipeline_spec import pipeline_spec_pb2

from pipelines.cluster import SERVICE_ACCOUNT
from pipelines.local import spec_defaults
from pipelines.pipeline_cli import schedule
from pipelines.schedule import argo_cron, kfp_cron, nightly_cron_workflow, round_trip
from pipelines.versioning import source_version
from termrl.errors import ConfigError
from tests.pipelines.test_compile import GPU_PLACEMENT


class _KfpPeer(BaseHTTPRequestHandler):
    requests: list[tuple[str, str, dict]] = []

    def _reply(self, body: dict) -> None:
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _record(self) -> dict:
        length = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(length)) if length else {}
        self.requests.append((self.command, self.path, body))
        return body

    def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
        self._record()
        if self.path.startswith("/apis/v2beta1/healthz"):
            self._reply({"multi_user": False})
        elif self.path.startswith("/apis/v2beta1/experiments"):
            self._reply({"experiments": [], "total_size": 0})
        else:
            self.send_error(404)

    def do_POST(self) -> None:  # noqa: N802
        body = self._record()
        if self.path.startswith("/apis/v2beta1/experiments"):
            self._reply({"experiment_id": "exp-1", "display_name": body.get("display_name")})
        elif self.path.startswith("/apis/v2beta1/recurringruns"):
            self._reply({**body, "recurring_run_id": "rr-42", "status": "ENABLED"})
        else:
            self.send_error(404)

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def kfp_peer():
    _KfpPeer.requests = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), _KfpPeer)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}", _KfpPeer.requests
    server.shutdown()
    server.server_close()


def test_cron_forms():
    assert kfp_cron("0 3 * * *") == "0 0 3 * * *"
    assert kfp_cron("0 0 3 * * *") == "0 0 3 * * *"
    assert argo_cron("0 0 3 * * *") == "0 3 * * *"
    with pytest.raises(ConfigError):
        kfp_cron("3 * *")
    with pytest.raises(ConfigError):
        argo_cron("5 0 3 * * *")


def test_kfp_recurring_run_request(kfp_peer):
    host, requests = kfp_peer
    result = CliRunner().invoke(
        schedule,
        [
            "nightly-eval",
            "--host",
            host,
            "--cron",
            "30 2 * * *",
            "--registry",
            "reg.example.com",
            "--set",
            "trials=3",
            "--set",
            "model=/models/latest",
        ],
    )
    assert result.exit_code == 0, result.output
    assert "recurring run rr-42 created" in result.output
    posts = [(path, body) for method, path, body in requests if method == "POST"]
    assert [p.split("?")[0] for p, _ in posts] == [
        "/apis/v2beta1/experiments",
        "/apis/v2beta1/recurringruns",
    ]
    assert posts[0][1]["display_name"] == "termrl"
    job = posts[1][1]
    assert job["experiment_id"] == "exp-1"
    assert job["display_name"] == "termrl-nightly-eval"
    assert job["trigger"]["cron_schedule"]["cron"] == "0 30 2 * * *"
    assert job["max_concurrency"] == "1" or job["max_concurrency"] == 1
    assert job["no_catchup"] is True
    assert job["runtime_config"]["parameters"] == {"trials": 3, "model": "/models/latest"}
    # The pipeline travels inside the request and is a valid PipelineSpec.
    spec = json_format.ParseDict(
        job["pipeline_spec"], pipeline_spec_pb2.PipelineSpec(), ignore_unknown_fields=False
    )
    assert spec.pipeline_info.name == "termrl-nightly-eval"
    caching = {
        t.task_info.name: t.caching_options.enable_cache for t in spec.root.dag.tasks.values()
    }
    assert caching["eval · nightly"] is False
    images = {
        e["container"]["image"]
        for e in json_format.MessageToDict(spec.deployment_spec)["executors"].values()
    }
    assert images == {
        f"reg.example.com/termrl/stage-{kind}:{source_version()}" for kind in ("cpu", "gpu")
    }
    defaults = spec_defaults(
        spec
    )  # the sandboxes are pods pulling task environments from the registry
    assert (defaults["sandbox_backend"], defaults["sandbox_registry"]) == (
        "kubernetes",
        "reg.example.com",
    )


def test_kfp_recurring_run_carries_the_platform_spec(kfp_peer):
    host, requests = kfp_peer
    result = CliRunner().invoke(
        schedule,
        [
            "nightly-eval",
            "--host",
            host,
            "--cron",
            "0 3 * * *",
            "--cpu-image",
            "reg.example.com/cpu:1",
            "--gpu-image",
            "reg.example.com/gpu:1",
            "--image-pull-secret",
            "regcred",
            "--gpu-toleration",
            "nvidia.com/gpu:NoSchedule",
            "--gpu-node-selector",
            "pool=gpu",
        ],
    )
    assert result.exit_code == 0, result.output
    job = next(
        body for method, path, body in requests if method == "POST" and "recurringruns" in path
    )
    # with Kubernetes extras kfp.Client sends both specs
    platform = json_format.ParseDict(
        job["pipeline_spec"]["platform_spec"],
        pipeline_spec_pb2.PlatformSpec(),
        ignore_unknown_fields=False,
    )
    executors = json_format.MessageToDict(platform)["platforms"]["kubernetes"]["deploymentSpec"][
        "executors"
    ]
    assert all(
        config["imagePullSecret"]
        == [
            {
                "secretName": "regcred",
                "secretNameParameter": {"runtimeValue": {"constant": "regcred"}},
            }
        ]
        for config in executors.values()
    )
    assert executors["exec-evaluate"]["tolerations"] == [
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
    ]
    assert executors["exec-evaluate"]["nodeSelector"] == {"labels": {"pool": "gpu"}}
    assert "tolerations" not in executors["exec-verify"]


@pytest.mark.parametrize("target", [["--host", "http://127.0.0.1:9"], ["--argo", "nightly.yaml"]])
def test_schedule_refuses_local_images(target, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(schedule, ["nightly-eval", "--cron", "0 3 * * *", *target])
    assert result.exit_code != 0
    assert "pass --registry REG or full image names" in result.output
    assert not (tmp_path / "nightly.yaml").exists()


def test_kfp_schedule_rejects_unknown_parameters(kfp_peer):
    host, requests = kfp_peer
    result = CliRunner().invoke(
        schedule,
        [
            "nightly-eval",
            "--host",
            host,
            "--cron",
            "0 3 * * *",
            "--registry",
            "reg.example.com",
            "--set",
            "trails=3",
        ],
    )
    assert result.exit_code != 0
    assert "unknown setting 'trails'" in result.output
    assert requests == []  # nothing reached the server


def test_argo_cron_workflow_round_trip(tmp_path):
    workflow = nightly_cron_workflow(
        "15 4 * * 1-5", model="/models/latest", trials=3, results_pvc="termrl-results"
    )
    text, parsed = round_trip(workflow)
    spec = parsed["spec"]
    assert parsed["kind"] == "CronWorkflow"
    assert spec["schedules"] == ["15 4 * * 1-5"]
    assert spec["concurrencyPolicy"] == "Forbid"
    flow = spec["workflowSpec"]
    params = {p["name"]: p["value"] for p in flow["arguments"]["parameters"]}
    assert params == {
        "model": "/models/latest",
        "task_count": "12",
        "task_seed": "1000",
        "trials": "3",
    }
    dag = next(t for t in flow["templates"] if t["name"] == "nightly-eval")["dag"]["tasks"]
    depends = {t["name"]: t.get("depends") for t in dag}
    assert depends == {"synthesize": None, "verify": "synthesize", "eval": "verify"}
    templates = {t["name"]: t for t in flow["templates"] if "container" in t}
    assert templates["synthesize"]["container"]["command"] == [
        "python",
        "-m",
        "components.synthesize",
    ]
    assert "--backend kubernetes" in templates["eval"]["container"]["args"][0]
    assert templates["eval"]["container"]["resources"]["limits"] == {"nvidia.com/gpu": "1"}
    assert yaml.safe_load(text) == parsed


def test_argo_command_writes_yaml(tmp_path):
    out = tmp_path / "nightly.yaml"
    result = CliRunner().invoke(
        schedule,
        [
            "nightly-eval",
            "--argo",
            str(out),
            "--cron",
            "0 3 * * *",
            "--set",
            "task_count=6",
            "--registry",
            "reg.example.com",
            *GPU_PLACEMENT,
        ],
    )
    assert result.exit_code == 0, result.output
    document = yaml.safe_load(out.read_text())
    assert document["spec"]["schedules"] == ["0 3 * * *"]
    flow = document["spec"]["workflowSpec"]
    params = {p["name"]: p["value"] for p in flow["arguments"]["parameters"]}
    assert params["task_count"] == "6"
    assert (
        flow["serviceAccountName"] == SERVICE_ACCOUNT
    )  # the account `termrl cluster manifests` sets up
    assert flow["imagePullSecrets"] == [{"name": "regcred"}]
    containers = {t["name"]: t["container"] for t in flow["templates"] if "container" in t}
    assert {c["image"] for c in containers.values()} == {
        f"reg.example.com/termrl/stage-{kind}:{source_version()}" for kind in ("cpu", "gpu")
    }
    placed = {
        t["name"]: (t.get("tolerations"), t.get("nodeSelector"))
        for t in flow["templates"]
        if "container" in t
    }
    assert placed == {
        "synthesize": (None, None),
        "verify": (None, None),
        "eval": (
            [
                {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
                {"key": "dedicated", "operator": "Equal", "value": "ml", "effect": "NoExecute"},
            ],
            {"nvidia.com/gpu.present": "true"},
        ),
    }
    # the sandboxes are pods pulling the task environments from the registry, with the pull secret
    verify_args = containers["verify"]["args"]
    assert verify_args[-4:] == [
        "--set",
        "sandbox_registry=reg.example.com",
        "--set",
        "sandbox_pull_secret=regcred",
    ]
    assert containers["eval"]["args"][0].endswith(
        "--set sandbox_registry=reg.example.com --set sandbox_pull_secret=regcred"
    )


def test_schedule_needs_exactly_one_target():
    result = CliRunner().invoke(schedule, ["nightly-eval", "--cron", "0 3 * * *"])
    assert result.exit_code != 0
    assert "exactly one of --host" in result.output
