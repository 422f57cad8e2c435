"""Both schedule paths: a KFP recurring run over real HTTP, an Argo WorkflowTemplate + CronWorkflow.

The KFP peer is a loopback HTTP server started here that speaks the few
endpoints kfp.Client calls (healthz, experiments, recurring runs) and records
every request, so the test reads exactly what the client sent.
"""

import json
import shlex
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import yaml
from click.testing import CliRunner
from google.protobuf import json_format
from kfp.pipeline_spec import pipeline_spec_pb2

from pipelines.cluster import SERVICE_ACCOUNT
from pipelines.cluster_cli import schedule
from pipelines.local import spec_defaults
from pipelines.schedule import ARGO_PARAMETERS, argo_cron, kfp_cron, nightly_argo, round_trip
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
    # The pipeline travels inside the request and is a valid PipelineSpec; its sandboxes are
    # pods, so the eval knows its own pod (the downward API, in the platform spec beside it).
    spec = json_format.ParseDict(
        submitted_spec(job), pipeline_spec_pb2.PipelineSpec(), ignore_unknown_fields=False
    )
    executors = job["pipeline_spec"]["platform_spec"]["platforms"]["kubernetes"]
    owner = executors["deploymentSpec"]["executors"]["exec-evaluate"]["fieldPathAsEnv"]
    assert {e["name"] for e in owner} == {"POD_NAME", "POD_UID", "POD_NAMESPACE"}
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


def _nightly_defaults() -> dict:
    from pipelines.local import pipeline_defaults
    from pipelines.nightly_eval import build_nightly_eval

    return pipeline_defaults(build_nightly_eval())


def _substitute(text: str, values: dict[str, str]) -> str:
    for name, value in values.items():
        text = text.replace("{{workflow.parameters." + name + "}}", value)
    return text


def submitted_spec(job: dict) -> dict:
    """The PipelineSpec a recurring-run request carries (beside its platform spec, when it has one)."""
    body = job["pipeline_spec"]
    return body["pipeline_spec"] if "platform_spec" in body else body


def _effective_eval_settings(args: str) -> dict[str, int]:
    """trials, max_turns and max_new_tokens from an eval command line (split as the shell does)."""
    words = shlex.split(args)
    flags = {"--trials": "trials", "--max-turns": "max_turns", "--max-new-tokens": "max_new_tokens"}
    return {flags[w]: int(words[i + 1]) for i, w in enumerate(words) if w in flags}


def test_argo_runs_the_kfp_nightly_settings_through_a_workflow_template():
    """The CronWorkflow runs a WorkflowTemplate with the nightly pipeline's parameters: the eval it
    runs has the KFP nightly's turns, tokens and trials (not the eval CLI's own defaults)."""
    defaults = _nightly_defaults()
    template, cron_workflow = nightly_argo(
        "15 4 * * 1-5",
        {**defaults, "model": "/models/latest", "trials": 3},
        model_cache_pvc="termrl-models",
    )
    text, (flow, cron) = round_trip(template, cron_workflow)
    assert [d["kind"] for d in yaml.safe_load_all(text)] == ["WorkflowTemplate", "CronWorkflow"]
    assert cron["spec"]["schedules"] == ["15 4 * * 1-5"]
    assert cron["spec"]["concurrencyPolicy"] == "Forbid"
    run = cron["spec"]["workflowSpec"]
    assert run["workflowTemplateRef"] == {"name": flow["metadata"]["name"]}
    passed = {p["name"]: p["value"] for p in run["arguments"]["parameters"]}
    assert passed == {name: str(defaults[name]) for name in ARGO_PARAMETERS} | {
        "model": "/models/latest",
        "trials": "3",
    }
    declared = {p["name"]: p["value"] for p in flow["spec"]["arguments"]["parameters"]}
    assert declared == passed
    dag = next(t for t in flow["spec"]["templates"] if t["name"] == "nightly-eval")["dag"]["tasks"]
    depends = {t["name"]: t.get("depends") for t in dag}
    assert depends == {"synthesize": None, "verify": "synthesize", "eval": "verify"}
    containers = {t["name"]: t["container"] for t in flow["spec"]["templates"] if "container" in t}
    evaluate = _substitute(containers["eval"]["args"][0], passed)
    # The same effective settings as the KFP nightly with those values.
    assert _effective_eval_settings(evaluate) == {
        "trials": 3,
        "max_turns": defaults["max_turns"],
        "max_new_tokens": defaults["max_new_tokens"],
    }
    assert "--sandbox-backend kubernetes" in evaluate
    assert "/var/cache/termrl/nightly/{{workflow.name}}/eval_results.parquet" in evaluate  # kept
    for container in containers.values():  # the model cache, as the kfp pipeline mounts it
        assert {"name": "model-cache", "mountPath": "/var/cache/termrl"} in container[
            "volumeMounts"
        ]
        assert {"name": "TERMRL_CACHE", "value": "/var/cache/termrl"} in container["env"]
    assert containers["eval"]["resources"]["limits"] == {"nvidia.com/gpu": "1"}


def test_argo_refuses_to_put_results_where_the_run_deletes_them():
    with pytest.raises(ConfigError, match="results PVC or a model cache PVC"):
        nightly_argo("0 3 * * *", _nightly_defaults())


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
            "--set",
            "max_turns=4",
            "--results-pvc",
            "termrl-results",
            "--registry",
            "reg.example.com",
            *GPU_PLACEMENT,
        ],
    )
    assert result.exit_code == 0, result.output
    template, document = yaml.safe_load_all(out.read_text())
    assert document["spec"]["schedules"] == ["0 3 * * *"]
    params = {
        p["name"]: p["value"] for p in document["spec"]["workflowSpec"]["arguments"]["parameters"]
    }
    assert (params["task_count"], params["max_turns"]) == ("6", "4")
    flow = template["spec"]
    assert (
        flow["serviceAccountName"] == SERVICE_ACCOUNT
    )  # the account `termrl cluster manifests` sets up
    assert flow["imagePullSecrets"] == [{"name": "regcred"}]
    assert {"name": "results", "persistentVolumeClaim": {"claimName": "termrl-results"}} in flow[
        "volumes"
    ]
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
    sandbox = ["--sandbox-namespace", "", "--sandbox-registry", "reg.example.com"]
    sandbox += ["--sandbox-pull-secret", "regcred"]
    verify_args = [_substitute(a, params) for a in containers["verify"]["args"]]
    assert _runs_of(verify_args, sandbox)
    evaluate = _substitute(containers["eval"]["args"][0], params)
    assert _runs_of(shlex.split(evaluate.rsplit("python -m components.eval", 1)[1]), sandbox)
    assert "/results/{{workflow.name}}/report.html" in evaluate


def test_argo_refuses_a_setting_it_cannot_honour(tmp_path):
    out = tmp_path / "nightly.yaml"
    result = CliRunner().invoke(
        schedule,
        [
            "nightly-eval",
            *("--argo", str(out), "--cron", "0 3 * * *", "--results-pvc", "r"),
            *("--set", "accelerator_count=2", "--registry", "reg.example.com"),
        ],
    )
    assert result.exit_code != 0 and "accelerator_count cannot be set" in result.output
    assert not out.exists()


def test_schedule_needs_exactly_one_target():
    result = CliRunner().invoke(schedule, ["nightly-eval", "--cron", "0 3 * * *"])
    assert result.exit_code != 0
    assert "exactly one of --host" in result.output


def _stage_settings(command, args: list[str], config: type) -> dict:
    """The config fields a stage command line sets: its options, then its ``--set`` items."""
    from termrl.settings import parse_settings

    context = command.make_context(command.name, list(args))
    values = {k: v for k, v in context.params.items() if v is not None and k != "settings"}
    return {**values, **parse_settings(config, context.params.get("settings") or ())}


def test_every_argo_parameter_reaches_the_stage_fields_it_sets_in_the_kfp_nightly(tmp_path):
    """Derived, not hand-kept: each parameter, given a value of its own, arrives in every stage
    field that the KFP nightly's wiring gives it (NightlyParams' links), through the real CLIs."""
    import shlex

    from components.eval.cli import eval_command
    from components.eval.config import EvalConfig
    from components.synthesize.cli import synthesize
    from components.synthesize.config import SynthesizeConfig
    from components.verify.cli import verify
    from components.verify.config import VerifyConfig
    from pipelines.nightly_eval import NightlyParams
    from pipelines.parameters import stage_links
    from pipelines.schedule import ARGO_SETTINGS

    for artifact in ("tasks", "admitted"):  # the commands check that their inputs exist
        (tmp_path / f"{artifact}.parquet").write_text("")
    defaults = _nightly_defaults()
    given = {
        name: (defaults[name] + 7 if isinstance(defaults[name], int) else f"x-{name}")
        for name in ARGO_PARAMETERS
    }
    template, _ = nightly_argo("0 3 * * *", {**defaults, **given}, results_pvc="r")
    _, (flow,) = round_trip(template)
    containers = {t["name"]: t["container"] for t in flow["spec"]["templates"] if "container" in t}
    text = {
        n: _substitute(" ".join(c["args"]), {k: str(v) for k, v in given.items()})
        for n, c in containers.items()
    }
    text = {n: t.replace("/work/", f"{tmp_path}/") for n, t in text.items()}
    eval_args = shlex.split(text["eval"].split("python -m components.eval", 1)[1])
    reached = {
        "synthesize": _stage_settings(
            synthesize, shlex.split(text["synthesize"]), SynthesizeConfig
        ),
        "verify": _stage_settings(verify, shlex.split(text["verify"]), VerifyConfig),
        "eval": _stage_settings(eval_command, eval_args, EvalConfig),
    }
    checked = 0
    for name, links in stage_links(NightlyParams).items():
        value = ARGO_SETTINGS.get(name, given.get(name))
        for link in links:
            stage, _, field = link.partition(".")
            assert reached[stage][field] == value, (name, link)
            checked += 1
    assert checked == 15  # every link of every stage-linked parameter


def _runs_of(arguments: list[str], run: list[str]) -> bool:
    """Whether ``run`` appears in ``arguments`` as consecutive items."""
    return any(arguments[i : i + len(run)] == run for i in range(len(arguments)))
