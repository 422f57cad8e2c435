"""What a KFP backend does with the compiled YAML: the GPU request it resolves, the API-key entries
it may leave out, and the backend versions ``termrl compile`` refuses to write for.

The driver (kubeflow/pipelines backend/src/v2/driver) resolves the accelerator placeholders with
``Value.GetStringValue()``: a parameter that is not a protobuf string resolves to "" and no
``nvidia.com/gpu`` limit is set. ``_driver_resolves`` does what it does, on the compiled spec.
"""

import re
import tomllib
from importlib.metadata import version
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner
from google.protobuf import json_format

from pipelines.cli_options import TESTED_KFP_BACKEND
from pipelines.compile import (
    BACKEND_FEATURES,
    backend_problems,
    compile_pipeline,
    read_compiled,
    release,
)
from pipelines.curriculum import CurriculumShape, build_curriculum
from pipelines.local import pipeline_defaults
from pipelines.nightly_eval import build_nightly_eval
from pipelines.options import pipeline_arguments
from pipelines.pipeline_cli import compile_command
from termrl.errors import ConfigError

SECRET_SHAPE = CurriculumShape(api_key_secret="termrl-api-keys", model_cache_pvc="cache")
_PLACEHOLDER = re.compile(r"\{\{\$\.inputs\.parameters\['pipelinechannel--(\w+)'\]\}\}")


def _driver_resolves(spec, placeholder: str) -> str:
    """The value KFP's driver puts in the pod for a resource placeholder, from the parameter's
    default: ``GetStringValue()``, which is "" for any value that is not a string."""
    (name,) = _PLACEHOLDER.fullmatch(placeholder).groups()
    default = spec.root.input_definitions.parameters[name].default_value
    return default.string_value if default.WhichOneof("kind") == "string_value" else ""


@pytest.mark.parametrize("pipeline", ["curriculum", "nightly-eval"])
def test_the_gpu_count_reaches_the_pod_as_a_string(tmp_path, pipeline):
    spec, _ = read_compiled(compile_pipeline(pipeline, tmp_path / "p.yaml"))
    count = spec.root.input_definitions.parameters["accelerator_count"]
    assert json_format.MessageToDict(count)["parameterType"] == "STRING"
    executors = json_format.MessageToDict(spec.deployment_spec)["executors"]
    requests = [
        e["container"]["resources"]["accelerator"]
        for e in executors.values()
        if "accelerator" in e["container"].get("resources", {})
    ]
    assert requests  # rollout, train and eval (the nightly: eval)
    for accelerator in requests:
        assert _driver_resolves(spec, accelerator["resourceCount"]) == "1"
        assert _driver_resolves(spec, accelerator["resourceType"]) == "nvidia.com/gpu"


@pytest.mark.parametrize("build", [build_curriculum, build_nightly_eval])
def test_a_cpu_only_cluster_sets_the_gpu_count_to_zero(build):
    defaults = pipeline_defaults(build())
    assert pipeline_arguments(defaults, ["accelerator_count=0"]) == {"accelerator_count": "0"}


def test_api_key_entries_are_each_optional(tmp_path):
    _, platform = read_compiled(compile_pipeline("nightly-eval", tmp_path / "n.yaml", SECRET_SHAPE))
    executors = json_format.MessageToDict(platform)["platforms"]["kubernetes"]["deploymentSpec"][
        "executors"
    ]
    with_keys = {
        name: config["secretAsEnv"] for name, config in executors.items() if "secretAsEnv" in config
    }
    assert set(with_keys) == {"exec-synthesize", "exec-verify", "exec-evaluate"}
    for entries in with_keys.values():
        # the driver copies ``optional`` onto every key's SecretKeyRef: a missing key (or secret)
        # leaves its variable unset instead of failing the pod with CreateContainerConfigError
        assert [e["optional"] for e in entries] == [True]
        assert {k["secretKey"] for k in entries[0]["keyToEnv"]} == {
            "OPENAI_API_KEY",
            "ANTHROPIC_API_KEY",
        }


def test_the_sdk_pins_are_the_tested_versions():
    pins = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text())["project"]
    pinned = {d.split(">=")[0]: d for d in pins["dependencies"] if d.startswith("kfp")}
    for package in ("kfp", "kfp-kubernetes"):
        floor, ceiling = re.fullmatch(rf"{package}>=([\d.]+),<([\d.]+)", pinned[package]).groups()
        installed = version(package)
        assert tuple(map(int, floor.split("."))) <= tuple(map(int, installed.split(".")))
        assert installed.split(".")[:2] == floor.split(".")[:2], (package, installed, floor)
        assert ceiling == f"{floor.split('.')[0]}.{int(floor.split('.')[1]) + 1}"
    # the SDK's minor is the backend release the output is written for
    assert TESTED_KFP_BACKEND.split(".")[:2] == version("kfp").split(".")[:2]


def _documents(path: Path) -> list[dict]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d is not None]


def test_the_tested_backend_runs_everything_and_the_default_output_is_unchanged(tmp_path):
    default = compile_pipeline("curriculum", tmp_path / "a.yaml", SECRET_SHAPE)
    named = compile_pipeline("curriculum", tmp_path / "b.yaml", SECRET_SHAPE, TESTED_KFP_BACKEND)
    assert _documents(default) == _documents(named)
    assert backend_problems(_documents(default), TESTED_KFP_BACKEND, "curriculum") == []
    # every feature is in this output, so each floor below is exercised
    assert all(list(f.where(_documents(default))) for f in BACKEND_FEATURES)


@pytest.mark.parametrize(
    ("backend", "needs"),
    [
        ("2.16.1", {"dsl.OneOf over artifacts": "2.17.0"}),
        ("2.14.4", {"dsl.OneOf over artifacts": "2.17.0", "secretAsEnv.optional": "2.15.0"}),
        (
            "2.3.0",
            {
                "dsl.OneOf over artifacts": "2.17.0",
                "secretAsEnv.optional": "2.15.0",
                "secretNameParameter/pvcNameParameter": "2.5.0",
                "parameterized resource requests": "2.4.0",
            },
        ),
    ],
)
def test_compile_refuses_what_an_older_backend_cannot_run(tmp_path, backend, needs):
    out = tmp_path / "curriculum.yaml"
    with pytest.raises(ConfigError) as refused:
        compile_pipeline("curriculum", out, SECRET_SHAPE, backend)
    problems = refused.value.problems
    assert len(problems) == len(needs), problems
    for feature, since in needs.items():
        (line,) = [p for p in problems if feature in p]
        assert f"KFP backend {backend} cannot run" in line and f"needs {since} or newer" in line
    assert not out.exists()


def test_what_an_older_backend_can_run_still_compiles(tmp_path):
    # the nightly has no OneOf, and without the API-key secret no optional entries
    out = compile_pipeline("nightly-eval", tmp_path / "n.yaml", CurriculumShape(), "2.14.4")
    assert read_compiled(out)[0].pipeline_info.name == "termrl-nightly-eval"
    with pytest.raises(ConfigError, match="secretAsEnv.optional"):
        compile_pipeline("nightly-eval", tmp_path / "s.yaml", SECRET_SHAPE, "2.14.4")


def test_compile_command_names_the_backend(tmp_path):
    out = tmp_path / "c.yaml"
    common = ["--out", str(out), "--registry", "reg.example.com"]
    result = CliRunner().invoke(compile_command, [*common, "--kfp-backend-version", "2.16.0"])
    assert result.exit_code != 0 and not out.exists()
    assert "KFP backend 2.16.0 cannot run dsl.OneOf over artifacts" in result.output
    assert "needs 2.17.0 or newer" in result.output
    bad = CliRunner().invoke(compile_command, [*common, "--kfp-backend-version", "latest"])
    assert bad.exit_code != 0 and "'latest' is not a release number" in bad.output
    nightly = ["--pipeline", "nightly-eval", "--kfp-backend-version", "2.16.0"]
    assert CliRunner().invoke(compile_command, [*common, *nightly]).exit_code == 0
    assert out.exists()


@pytest.mark.parametrize(
    ("given", "read"), [("2.17", (2, 17, 0)), ("v2.16.1", (2, 16, 1)), ("3", (3, 0, 0))]
)
def test_a_short_version_means_its_first_release(given, read):
    assert release(given) == read


def test_a_short_backend_version_runs_what_its_first_release_runs(tmp_path):
    # "2.17" is 2.17.0, which runs OneOf over artifacts: not (2, 17) < (2, 17, 0)
    assert compile_pipeline("curriculum", tmp_path / "c.yaml", SECRET_SHAPE, "2.17").exists()
