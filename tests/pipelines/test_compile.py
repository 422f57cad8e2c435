"""The compiled pipelines, parsed strictly: shape, resources, caching, retries, env, platform.

The golden YAML (tests/pipelines/golden/curriculum.yaml) catches wiring drift:
regenerate it on purpose with ``TERMRL_UPDATE_GOLDEN=1``.
"""

import os
import re
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner
from google.protobuf import json_format

from pipelines.compile import compile_pipeline, read_compiled
from pipelines.curriculum import RESOURCES, RETRIED, CurriculumShape
from pipelines.local import spec_defaults
from pipelines.pipeline_cli import compile_command
from pipelines.spec_tasks import leaf_tasks, output_sources
from termrl.errors import ConfigError

GOLDEN = Path(__file__).parent / "golden" / "curriculum.yaml"
GOLDEN_SHAPE = CurriculumShape(
    phase1_iterations=2,
    phase2_iterations=1,
    code_version="golden",
    model_cache_pvc="termrl-model-cache",
    api_key_secret="termrl-api-keys",
)


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    path = compile_pipeline(
        "curriculum", tmp_path_factory.mktemp("c") / "curriculum.yaml", GOLDEN_SHAPE
    )
    return path, *read_compiled(path)


def _stage(task_name: str) -> str:
    """``rollout-3`` -> ``rollout``; ``prepare-model`` -> ``prepare_model``."""
    base = task_name.rsplit("-", 1)[0] if task_name.rsplit("-", 1)[-1].isdigit() else task_name
    return base.replace("-", "_")


def _origin(spec, leaf: str, name: str) -> list[str]:
    """The leaves input artifact ``name`` of task ``leaf`` may come from, followed out of the
    ``dsl.If`` branches it sits in (one leaf, or one per branch of a ``dsl.OneOf``)."""

    def path_to(dag, path):
        for key, task in dag.tasks.items():
            here = [*path, (dag, key)]
            component = spec.components[task.component_ref.name]
            if component.HasField("dag"):
                if found := path_to(component.dag, here):
                    return found
            elif task.component_ref.name == f"comp-{leaf}":
                return here
        return None

    *outer, (dag, key) = path_to(spec.root.dag, [])
    value = dag.tasks[key].inputs.artifacts[name]
    for dag, key in reversed(outer):  # a branch's input is its DAG task's
        if not value.component_input_artifact:
            break
        value = dag.tasks[key].inputs.artifacts[value.component_input_artifact]
    out = value.task_output_artifact
    return [local for local, _ in output_sources(spec, out.producer_task, out.output_artifact_key)]


def _condition(spec, branch: str) -> str:
    """The trigger condition of the ``dsl.If``/``dsl.Else`` branch task ``branch``."""
    (task,) = [c.dag.tasks[branch] for c in spec.components.values() if branch in c.dag.tasks]
    return task.trigger_policy.condition


def test_dag_has_every_stage_in_curriculum_order(compiled):
    _, spec, _ = compiled
    tasks = spec.root.dag.tasks
    # prepare, (synthesize + verify) x 2 (training, held-out), curate, demonstrate x 2, imitation,
    # (rollout + train + health + rollback branches) x (2 + 1), eval x 4 (base, imitation,
    # phase 1, final), compare
    assert len(tasks) == 1 + 2 * 2 + 1 + 2 + 1 + 4 * 3 + 4 + 1
    leaves = leaf_tasks(spec)
    # ... and in each round's branches, one task that hands on the next round's policy
    assert len(leaves) == len(tasks) - 3 + 2 * 3
    names = {leaf.display_name for leaf in leaves.values()}
    assert {
        "phase 1 · rollout 1/2",
        "phase 1 · train 2/2 (positive-only)",
        "phase 2 · train 1/1 (full)",
        "demonstrate · imitation pool",
        "demonstrate · phase-1 pool",
        "imitation · train on demonstrations",
        "eval · base policy",
        "eval · after imitation",
        "eval · after phase 1",
        "eval · final policy",
        "report · policies",
        "phase 1 · roll back 2/2",
        "phase 2 · go on 1/1",
    } <= names

    def producer(task: str, artifact: str) -> str:
        return tasks[task].inputs.artifacts[artifact].task_output_artifact.producer_task

    # imitation trains on the imitation pool's demonstrations alone, and keeps imitating them in
    # phase 1; phase-1 rollouts learn on the other tasks, anchored in their demonstrations
    assert (
        producer("train", "trajectories") == producer("train-2", "demonstrations") == "demonstrate"
    )
    assert producer("rollout", "demonstrations") == "demonstrate-2"

    def key(task, name):
        return tasks[task].inputs.artifacts[name].task_output_artifact.output_artifact_key

    assert (
        key("demonstrate", "tasks") == "imitation_pool"
        and key("demonstrate-2", "tasks") == "train_pool"
    )
    assert "demonstrations" not in tasks["rollout-3"].inputs.artifacts  # phase 2: from scratch
    # recovery demonstrations need a demonstration: phase 1's rollouts only
    recoveries = tasks["rollout"].inputs.parameters["recoveries_per_task"]
    assert recoveries.component_input_parameter == "recoveries_per_task"
    assert "recoveries_per_task" not in tasks["rollout-3"].inputs.parameters
    # train N consumes rollout N's trajectories; each round starts from the policy that the
    # branch taken on the health verdict of the round before handed on
    assert producer("rollout", "policy") == "train"
    assert producer("train-3", "trajectories") == "rollout-2"
    assert (
        producer("health-2", "checkpoint") == "train-3"
        and producer("health-2", "rollout_metrics") == "rollout-2"
    )
    assert producer("health-2", "previous") == "health"
    assert "previous" not in tasks["health"].inputs.artifacts
    assert producer("health", "policy") == "train"  # the imitation policy
    options = tasks["train-3"].inputs.parameters["options"].task_output_parameter
    assert (options.producer_task, options.output_parameter_key) == ("health", "next_train_options")
    assert producer("compare", "health") == "health-3"
    # round r (health step h, train step t) branches into "roll back" and "go on"
    rounds = [("health", "train-2"), ("health-2", "train-3"), ("health-3", "train-4")]
    started = ["train"]  # the policy the round started from (the imitation policy first)
    fallback = ["train"]  # the last policy a rollout measured without a collapse
    for r, (health, train) in enumerate(rounds):
        back = "continue-from" if r == 0 else f"continue-from-{2 * r + 1}"
        on = f"continue-from-{2 * r + 2}"
        assert _condition(spec, leaves[back].branches[-1]) == (
            f"inputs.parameter_values['pipelinechannel--{health}-verdict'] == 'rollback'"
        )
        assert _condition(spec, leaves[on].branches[-1]) == (
            f"!(inputs.parameter_values['pipelinechannel--{health}-verdict'] == 'rollback')"
        )
        assert _origin(spec, back, "policy") == _origin(spec, back, "fallback") == fallback
        assert _origin(spec, on, "policy") == [train]
        assert _origin(spec, on, "fallback") == started
        nxt = [back, on]  # the next round gets the output of whichever branch ran (dsl.OneOf)
        if r + 1 < len(rounds):
            assert _origin(spec, rounds[r + 1][1], "policy") == nxt
            assert _origin(spec, f"rollout-{r + 2}", "policy") == nxt
        started = fallback = nxt
    assert (
        tasks["rollout-3"].inputs.artifacts["tasks"].task_output_artifact.output_artifact_key
        == "expert_pool"
    )
    assert (
        tasks["rollout"].inputs.artifacts["tasks"].task_output_artifact.output_artifact_key
        == "train_pool"
    )
    modes = {
        n: t.inputs.parameters["mode"].runtime_value.constant.string_value
        for n, t in tasks.items()
        if n.startswith("train")
    }
    assert modes == {
        "train": "positive-only",
        "train-2": "positive-only",
        "train-3": "positive-only",
        "train-4": "full",
    }
    evals = {t.task_info.name: t for t in tasks.values() if t.task_info.name.startswith("eval")}
    assert {
        name: _origin(spec, key, "policy")
        for key, t in tasks.items()
        if (name := t.task_info.name).startswith("eval") and name != "eval · base policy"
    } == {
        "eval · after imitation": ["train"],
        "eval · after phase 1": ["continue-from-3", "continue-from-4"],
        "eval · final policy": ["continue-from-5", "continue-from-6"],
    }
    # every policy is evaluated on the same held-out tasks, which training never sees
    assert {
        t.inputs.artifacts["tasks"].task_output_artifact.producer_task for t in evals.values()
    } == {"verify-2"}


def test_every_stage_is_cached_named_versioned_and_sized(compiled):
    _, spec, _ = compiled
    executors = json_format.MessageToDict(spec.deployment_spec)["executors"]
    for name, leaf in leaf_tasks(spec).items():
        stage, task = _stage(name), leaf.task
        assert task.caching_options.enable_cache, name
        assert task.task_info.name and task.task_info.name != name, name
        assert task.inputs.parameters["code_version"].component_input_parameter in (
            "code_version",
            "pipelinechannel--code_version",  # in a branch: its DAG's input
        )
        assert (
            (task.retry_policy.max_retry_count == RETRIED[stage])
            if stage in RETRIED
            else not task.HasField("retry_policy")
        ), name
        container = executors[f"exec-{name}"]["container"]
        resources = container["resources"]
        cpu, memory, limit = RESOURCES[stage]
        assert (
            resources["resourceCpuRequest"],
            resources["resourceMemoryRequest"],
            resources["resourceMemoryLimit"],
        ) == (cpu, memory, limit)
        accelerator = resources.get("accelerator")
        if stage in ("rollout", "train", "evaluate"):
            assert accelerator == {
                "resourceType": "{{$.inputs.parameters['pipelinechannel--accelerator_type']}}",
                "resourceCount": "{{$.inputs.parameters['pipelinechannel--accelerator_count']}}",
            }
            assert container["image"] == GOLDEN_SHAPE.gpu_image
        else:
            assert accelerator is None
            assert container["image"] == GOLDEN_SHAPE.cpu_image
        assert {"name": "TERMRL_CACHE", "value": "/var/cache/termrl"} in container["env"]
        # Lightweight components, no pip install at run time: the image carries the package.
        assert "pip install" not in " ".join(container["command"])
        assert "kfp.dsl.executor_main" in " ".join(container["command"])


def test_gpu_parameters_have_defaults(compiled):
    _, spec, _ = compiled
    params = spec.root.input_definitions.parameters
    assert params["accelerator_type"].default_value.string_value == "nvidia.com/gpu"
    assert params["accelerator_count"].default_value.string_value == "1"
    assert params["code_version"].default_value.string_value == "golden"
    assert all(p.HasField("default_value") or p.is_optional for p in params.values())


def test_platform_spec_mounts_the_cache_and_exposes_secrets(compiled):
    path, _, platform = compiled
    assert platform is not None
    executors = json_format.MessageToDict(platform)["platforms"]["kubernetes"]["deploymentSpec"][
        "executors"
    ]
    assert len(executors) == 1 + 2 * 2 + 1 + 2 + 1 + 5 * 3 + 4 + 1
    for name, config in executors.items():
        assert config["pvcMount"][0]["mountPath"] == "/var/cache/termrl"
        assert (
            config["pvcMount"][0]["pvcNameParameter"]["runtimeValue"]["constant"]
            == "termrl-model-cache"
        )
        has_secret = "secretAsEnv" in config
        assert has_secret == any(s in name for s in ("synthesize", "verify", "evaluate")), name
        if has_secret:
            env = {e["envVar"] for e in config["secretAsEnv"][0]["keyToEnv"]}
            assert env == {"OPENAI_API_KEY", "ANTHROPIC_API_KEY"}
            assert config["secretAsEnv"][0]["optional"] is True, name


def test_on_kubernetes_the_sandbox_stages_know_their_own_pod(tmp_path):
    """The downward API gives each sandbox stage its pod's name, uid and namespace, so the
    sandbox pods carry an owner reference to it (deleted with it) and ``sandbox gc`` can judge
    them; the other stages, and a compile for local sandboxes, get none."""
    shape = CurriculumShape(sandbox_backend="kubernetes", code_version="owner")
    _, platform = read_compiled(compile_pipeline("curriculum", tmp_path / "c.yaml", shape))
    executors = json_format.MessageToDict(platform)["platforms"]["kubernetes"]["deploymentSpec"][
        "executors"
    ]
    owners = {
        name: {e["name"]: e["fieldPath"] for e in config.get("fieldPathAsEnv", [])}
        for name, config in executors.items()
    }
    sandbox_stages = ("verify", "demonstrate", "rollout", "evaluate")
    expected = {
        "POD_NAME": "metadata.name",
        "POD_UID": "metadata.uid",
        "POD_NAMESPACE": "metadata.namespace",
    }
    for name, fields in owners.items():
        assert fields == (expected if any(s in name for s in sandbox_stages) else {}), name
    assert sum(1 for fields in owners.values() if fields) == 2 + 2 + 2 + 4  # 2 verify, ...
    local = compile_pipeline("curriculum", tmp_path / "l.yaml", CurriculumShape())
    assert read_compiled(local)[1] is None  # local sandboxes: no Kubernetes extras at all


def test_matches_golden(compiled):
    path, _, _ = compiled
    text = path.read_text()
    if os.environ.get("TERMRL_UPDATE_GOLDEN"):
        GOLDEN.parent.mkdir(exist_ok=True)
        GOLDEN.write_text(text)
    assert GOLDEN.is_file(), "no golden file: run with TERMRL_UPDATE_GOLDEN=1 once"
    # Compared as YAML documents, not text: importing hera (the Argo schedule does) changes
    # PyYAML's string style process-wide, so the same spec may be written either way.
    compiled_docs = list(yaml.safe_load_all(text))
    assert compiled_docs == list(yaml.safe_load_all(GOLDEN.read_text())), (
        "the compiled curriculum changed; if on purpose, regenerate: "
        "TERMRL_UPDATE_GOLDEN=1 pytest tests/pipelines/test_compile.py -k golden"
    )


def test_nightly_eval_compiles_without_caching_the_eval(tmp_path):
    spec, platform = read_compiled(compile_pipeline("nightly-eval", tmp_path / "n.yaml"))
    assert platform is None  # no Kubernetes extras asked for
    caching = {
        t.task_info.name: t.caching_options.enable_cache for t in spec.root.dag.tasks.values()
    }
    assert caching == {
        "prepare policy": False,
        "synthesize eval tasks": True,
        "verify eval tasks": True,
        "eval · nightly": False,
    }


def test_strict_parse_rejects_unknown_fields(tmp_path, compiled):
    path, _, _ = compiled
    bad = tmp_path / "bad.yaml"
    bad.write_text(path.read_text().replace("pipelineInfo:", "pipelineInfoo: {}\npipelineInfo:", 1))
    with pytest.raises(json_format.ParseError):
        read_compiled(bad)


def test_shape_is_validated():
    with pytest.raises(ConfigError, match="at least one"):
        CurriculumShape(phase1_iterations=0, phase2_iterations=0).validate()


def test_compile_command_writes_uploadable_yaml(tmp_path):
    out = tmp_path / "curriculum.yaml"
    result = CliRunner().invoke(
        compile_command,
        [
            "--out",
            str(out),
            "--phase1-iterations",
            "3",
            "--registry",
            "registry.example",
            "--gpu-image",
            "registry.example/termrl/stage-gpu:1",
        ],
    )
    assert result.exit_code == 0, result.output
    spec, _ = read_compiled(out)
    assert len(leaf_tasks(spec)) == 1 + 2 * 2 + 1 + 2 + 1 + 5 * 4 + 4 + 1
    code_version = spec.root.input_definitions.parameters["code_version"].default_value.string_value
    assert code_version.startswith("src-")
    # the full name given wins over --registry; the other image is the registry's, tagged by code version
    assert _images(out) == {
        "registry.example/termrl/stage-gpu:1",
        f"registry.example/termrl/stage-cpu:{code_version}",
    }
    assert "termrl-curriculum: 34 tasks, 8 in dsl.If/dsl.Else branches" in result.output


def _images(path: Path) -> set[str]:
    """Every ``image:`` value anywhere in a YAML file."""
    return set(
        re.findall(r"^\s*-?\s*image:\s*['\"]?([^\s'\"]+)", path.read_text(), flags=re.MULTILINE)
    )


GPU_PLACEMENT = [
    "--image-pull-secret",
    "regcred",
    "--gpu-toleration",
    "nvidia.com/gpu:NoSchedule",
    "--gpu-toleration",
    "dedicated=ml:NoExecute",
    "--gpu-node-selector",
    "nvidia.com/gpu.present=true",
]


def test_compile_for_a_registry_references_only_its_images_and_places_gpu_stages(tmp_path):
    out = tmp_path / "curriculum.yaml"
    result = CliRunner().invoke(
        compile_command,
        [
            "--out",
            str(out),
            "--registry",
            "reg.example.com:5000/ml",
            "--code-version",
            "v7",
            *GPU_PLACEMENT,
        ],
    )
    assert result.exit_code == 0, result.output
    assert _images(out) == {
        "reg.example.com:5000/ml/termrl/stage-cpu:v7",
        "reg.example.com:5000/ml/termrl/stage-gpu:v7",
    }
    spec, platform = read_compiled(out)  # strict: kfp-kubernetes' own message for every executor
    executors = json_format.MessageToDict(platform)["platforms"]["kubernetes"]["deploymentSpec"][
        "executors"
    ]
    assert set(executors) == {f"exec-{name}" for name in leaf_tasks(spec)}
    resources = json_format.MessageToDict(spec.deployment_spec)["executors"]
    for name, config in executors.items():
        assert config["imagePullSecret"][0]["secretName"] == "regcred", name
        gpu = _stage(name.removeprefix("exec-")) in ("rollout", "train", "evaluate")
        assert ("accelerator" in resources[name]["container"]["resources"]) == gpu, (
            name
        )  # emitted as before
        if gpu:
            assert config["tolerations"] == [
                {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
                {"key": "dedicated", "operator": "Equal", "value": "ml", "effect": "NoExecute"},
            ], name
            assert config["nodeSelector"]["labels"] == {"nvidia.com/gpu.present": "true"}, name
        else:
            assert "tolerations" not in config and "nodeSelector" not in config, name


def test_compile_for_a_registry_runs_sandboxes_as_pods_pulling_task_environments_from_it(tmp_path):
    out = tmp_path / "curriculum.yaml"
    result = CliRunner().invoke(
        compile_command,
        ["--out", str(out), "--registry", "reg.example.com/ml", "--image-pull-secret", "regcred"],
    )
    assert result.exit_code == 0, result.output
    spec, _ = read_compiled(out)
    defaults = spec_defaults(spec)
    assert {
        k: defaults[k]
        for k in ("sandbox_backend", "sandbox_namespace", "sandbox_registry", "sandbox_pull_secret")
    } == {
        "sandbox_backend": "kubernetes",
        "sandbox_namespace": "",
        "sandbox_registry": "reg.example.com/ml",
        "sandbox_pull_secret": "regcred",
    }
    sandboxed = 0
    for name, task in spec.root.dag.tasks.items():
        if _stage(name) not in ("verify", "demonstrate", "rollout", "evaluate"):
            continue
        sandboxed += 1
        bound = {
            key: given.component_input_parameter for key, given in task.inputs.parameters.items()
        }
        for parameter in ("sandbox_namespace", "sandbox_registry", "sandbox_pull_secret"):
            assert bound[parameter] == parameter, (name, parameter)
        assert "sandbox_backend" in bound.values(), name
    assert sandboxed >= 6
    # a local run keeps podman
    assert (
        spec_defaults(read_compiled(compile_pipeline("curriculum", tmp_path / "local.yaml"))[0])[
            "sandbox_backend"
        ]
        == "podman"
    )


@pytest.mark.parametrize(
    "options",
    [
        [],
        ["--cpu-image", "termrl/stage-cpu:1", "--registry", "reg.example.com"],
        ["--registry", "localhost"],
    ],
)
def test_compile_refuses_images_a_cluster_cannot_pull(tmp_path, options):
    out = tmp_path / "curriculum.yaml"
    result = CliRunner().invoke(compile_command, ["--out", str(out), *options])
    assert result.exit_code != 0
    assert len(result.output.strip().splitlines()) == 1, result.output
    assert "pass --registry REG or full image names" in result.output
    assert not out.exists()


def test_shape_validates_placement():
    from pipelines.placement import Toleration

    shape = CurriculumShape(
        gpu_tolerations=(Toleration("gpu", effect="Never"),), gpu_node_selector=(("a b", "x"),)
    )
    with pytest.raises(ConfigError) as caught:
        shape.validate()
    assert len(caught.value.problems) == 2


def test_source_version_follows_stage_code_only(tmp_path):
    from pipelines.versioning import source_version

    for name in ("termrl/a.py", "components/x/b.py", "pipelines/glue.py", "pipelines/local.py"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("x = 1\n")
    first = source_version(tmp_path)
    (tmp_path / "pipelines/local.py").write_text("x = 2\n")  # the runner: not stage code
    assert source_version(tmp_path) == first
    (tmp_path / "components/x/b.py").write_text("x = 2\n")
    assert source_version(tmp_path) != first


def test_a_colocated_curriculum_runs_each_rl_round_as_one_gpu_task(tmp_path):
    """``colocate``: each round's rollout and train step are one task on the GPU image, with
    the accelerator, the retries and the sandbox owner fields of both, its outputs read by the
    health step; the imitation step is still a train task."""
    shape = CurriculumShape(
        phase1_iterations=2, phase2_iterations=1, colocate=True, sandbox_backend="kubernetes"
    )
    spec, platform = read_compiled(compile_pipeline("curriculum", tmp_path / "c.yaml", shape))
    leaves = leaf_tasks(spec)
    stages = sorted(_stage(name) for name in leaves)
    assert stages.count("colocated_round") == 3 and "rollout" not in stages
    assert stages.count("train") == 1  # the imitation step
    executors = json_format.MessageToDict(spec.deployment_spec)["executors"]
    owners = json_format.MessageToDict(platform)["platforms"]["kubernetes"]["deploymentSpec"][
        "executors"
    ]
    rounds = sorted(name for name in leaves if name.startswith("colocated-round"))
    for name in rounds:
        task = leaves[name].task
        assert task.retry_policy.max_retry_count == RETRIED["colocated_round"]
        container = executors[f"exec-{name}"]["container"]
        assert "accelerator" in container["resources"] and container["image"] == shape.gpu_image
        assert {e["name"] for e in owners[f"exec-{name}"]["fieldPathAsEnv"]} == {
            "POD_NAME",
            "POD_UID",
            "POD_NAMESPACE",
        }
    phase1 = [n for n in rounds if "positive-only" in leaves[n].task.task_info.name]
    assert len(phase1) == 2
    for name in rounds:
        inputs = set(leaves[name].task.inputs.artifacts)
        anchored = {"rollout_demonstrations", "demonstrations"} <= inputs
        assert anchored == (name in phase1), (name, inputs)
        recovers = "recoveries_per_task" in leaves[name].task.inputs.parameters
        assert recovers == (name in phase1), name
    for name in (n for n in leaves if n.startswith("health")):
        assert set(_origin(spec, name, "rollout_metrics")) <= set(rounds)
        assert set(_origin(spec, name, "checkpoint")) <= set(rounds)
