"""Nightly evals on a schedule: a KFP recurring run, or an Argo WorkflowTemplate + CronWorkflow.

    schedule_kfp(host, cron, ...)    kfp.Client: experiment (found or created) + recurring run
                                     carrying the compiled nightly-eval pipeline
    nightly_argo(cron, params, ...)  hera: an Argo WorkflowTemplate running the same three stages
                                     (synthesize → verify → eval) through their command lines, and
                                     a CronWorkflow running it, for clusters with Argo Workflows but
                                     no Kubeflow. Its parameters and the stage arguments they become
                                     are derived from the KFP nightly's ``NightlyParams``: each one
                                     reaches the stage fields it sets there (``stage_arguments``)
    round_trip(*documents)           serialise, parse back, compare: the YAML written is the
                                     objects built

The CronWorkflow is written for one Argo version (``ARGO_VERSION`` by default):
``schedules`` (a list) from Argo 3.6, which deprecated ``schedule`` (one
expression), the only form before it.

Cron expressions are the standard five fields (``0 3 * * *``); KFP's scheduler
wants six (seconds first), so ``kfp_cron`` prepends ``0``.
"""

from __future__ import annotations

import dataclasses
import importlib
import shlex
import tempfile
import typing
from pathlib import Path
from typing import Any

import click

from components.images import CPU_IMAGE, GPU_IMAGE
from pipelines.cluster import SERVICE_ACCOUNT
from pipelines.nightly_eval import NIGHTLY_RUN_ID, NightlyParams
from pipelines.parameters import is_platform, stage_links
from pipelines.placement import Toleration
from pipelines.shape import CurriculumShape
from termrl.errors import ConfigError

__all__ = [
    "ARGO_FIXED",
    "ARGO_PARAMETERS",
    "ARGO_SETTINGS",
    "ARGO_VERSION",
    "WORKSPACE_ACCESS_MODES",
    "argo_cron",
    "argo_yaml",
    "kfp_cron",
    "nightly_argo",
    "round_trip",
    "schedule_kfp",
    "stage_arguments",
]


def kfp_cron(expression: str) -> str:
    """A five-field cron as KFP's six-field form; six fields pass through."""
    fields = expression.split()
    if len(fields) == 5:
        return "0 " + " ".join(fields)
    if len(fields) == 6:
        return " ".join(fields)
    raise ConfigError(f"cron {expression!r} must have 5 fields (minute hour day month weekday)")


def argo_cron(expression: str) -> str:
    """Argo takes the standard five fields; a six-field form is accepted when its seconds are 0."""
    fields = expression.split()
    if len(fields) == 6 and fields[0] == "0":
        fields = fields[1:]
    if len(fields) != 5:
        raise ConfigError(f"cron {expression!r} must have 5 fields (minute hour day month weekday)")
    return " ".join(fields)


def schedule_kfp(
    host: str,
    cron: str,
    *,
    params: dict[str, Any] | None = None,
    experiment: str = "termrl",
    job_name: str = "termrl-nightly-eval",
    namespace: str | None = None,
    pipeline_yaml: str | Path | None = None,
    shape: CurriculumShape | None = None,
    enable_caching: bool | None = None,
    service_account: str | None = None,
) -> str:
    """Create the recurring run on the KFP API at ``host``; returns its id.

    Without ``pipeline_yaml`` the nightly-eval pipeline is compiled on the fly with ``shape``.
    ``enable_caching`` None keeps each task's own caching, as the pipeline sets it (the policy
    copy and the eval never cached, so each night measures afresh; the tasks cached); False runs
    every task afresh. ``service_account``: the runs' account (None: the KFP profile's default).
    """
    import kfp

    from pipelines.compile import compile_pipeline

    with tempfile.TemporaryDirectory() as tmp:
        package = (
            Path(pipeline_yaml)
            if pipeline_yaml
            else compile_pipeline("nightly-eval", Path(tmp) / "n.yaml", shape)
        )
        client = kfp.Client(host=host, namespace=namespace or "kubeflow")
        found = client.create_experiment(experiment, namespace=namespace)
        job = client.create_recurring_run(
            experiment_id=found.experiment_id,
            job_name=job_name,
            cron_expression=kfp_cron(cron),
            pipeline_package_path=str(package),
            params=params or {},
            max_concurrency=1,
            no_catchup=True,
            enable_caching=enable_caching,
            service_account=service_account,
        )
    return job.recurring_run_id


ARGO_SETTINGS = {"sandbox_backend": "kubernetes"}
"""Parameters the Argo nightly fixes to a value: its sandboxes are pods."""
ARGO_STAGES = {
    "synthesize": "components.synthesize.cli:synthesize",
    "verify": "components.verify.cli:verify",
    "eval": "components.eval.cli:eval_command",
}
"""The stages the Argo nightly runs (``python -m components.<stage>``) and their commands."""
ARGO_OWN = ("model",)
"""Parameters no stage field takes, which the workflow uses itself (the eval resolves ``model``)."""
TEMPLATE_NAME = "termrl-nightly-eval"
ARGO_VERSION = "3.6"
"""The Argo Workflows version the nightly's YAML is written for unless told: the first with the
CronWorkflow's ``schedules`` (KFP 2.17's manifests install Argo 4.0, which has only that)."""
SCHEDULES_SINCE = (3, 6, 0)
WORKSPACE_ACCESS_MODES = ("ReadWriteMany", "ReadWriteOnce")
"""The per-run workspace's access mode: ReadWriteMany by default, since the CPU steps and the eval
on a GPU node mount it from different nodes; ReadWriteOnce where every step lands on one node."""


def _argo_parameters() -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The nightly pipeline's parameters (``NightlyParams``) the Argo workflow takes under the same
    names, and those it fixes: the platform's (the GPU request is the container's, the code version
    the image's), ``ARGO_SETTINGS``, and the options objects, which no stage command line takes."""
    hints = typing.get_type_hints(NightlyParams)
    fixed = {
        f.name
        for f in dataclasses.fields(NightlyParams)
        if is_platform(NightlyParams, f.name)
        or f.name in ARGO_SETTINGS
        or hints[f.name] not in (str, int, float, bool)
    }
    names = [f.name for f in dataclasses.fields(NightlyParams)]
    return tuple(n for n in names if n not in fixed), tuple(n for n in names if n in fixed)


ARGO_PARAMETERS, ARGO_FIXED = _argo_parameters()


def _workflow_parameter(name: str) -> str:
    return "{{workflow.parameters." + name + "}}"


def _command_options(stage: str) -> dict[str, str]:
    """Config field -> the stage command's own option for it (``max_turns`` -> ``--max-turns``):
    the commands' options map one to one onto their config's fields."""
    module, name = ARGO_STAGES[stage].split(":")
    command = getattr(importlib.import_module(module), name)
    return {
        option.name: option.opts[0]
        for option in command.params
        if isinstance(option, click.Option) and not option.is_flag and not option.multiple
    }


def stage_arguments(stage: str) -> list[str]:
    """The arguments that set ``stage``'s config fields from the workflow's parameters (or the values
    ``ARGO_SETTINGS`` fixes), as the KFP nightly's component parameters set them: the stage command's
    own option where it has one, else ``--set FIELD=VALUE`` (after the options)."""
    options, flags, sets = _command_options(stage), [], []
    for name, links in stage_links(NightlyParams).items():
        value = ARGO_SETTINGS.get(name)
        if value is None and name in ARGO_PARAMETERS:
            value = _workflow_parameter(name)
        for link in links if value is not None else ():
            owner, _, field = link.partition(".")
            if owner != stage:
                continue
            if field in options:
                flags += [options[field], value]
            else:
                sets += ["--set", f"{field}={value}"]
    return flags + sets


def _unconsumed() -> list[str]:
    """Argo parameters that neither a stage field nor the workflow itself takes."""
    linked = {
        name
        for name, links in stage_links(NightlyParams).items()
        if any(link.partition(".")[0] in ARGO_STAGES for link in links)
    }
    return [name for name in ARGO_PARAMETERS if name not in linked and name not in ARGO_OWN]


@dataclasses.dataclass(frozen=True)
class _Storage:
    """Where the Argo stages keep things: mounts, volumes, environment, the results folder."""

    mounts: list[Any]
    volumes: list[Any]
    env: list[Any]
    results_dir: str


def _storage(results_pvc: str, model_cache_pvc: str, model_cache_path: str) -> _Storage:
    """The per-run workspace at /work, the model cache (TERMRL_CACHE, as the kfp pipeline mounts it)
    and the results volume; results go to the model cache when there is no results PVC."""
    from hera.workflows import models as m

    def claim(name: str, pvc: str) -> Any:
        source = m.PersistentVolumeClaimVolumeSource(claim_name=pvc)
        return m.Volume(name=name, persistent_volume_claim=source)

    storage = _Storage([m.VolumeMount(name="work", mount_path="/work")], [], [], "")
    if model_cache_pvc:
        storage.mounts.append(m.VolumeMount(name="model-cache", mount_path=model_cache_path))
        storage.volumes.append(claim("model-cache", model_cache_pvc))
        storage.env.append(m.EnvVar(name="TERMRL_CACHE", value=model_cache_path))
    if results_pvc:
        storage.mounts.append(m.VolumeMount(name="results", mount_path="/results"))
        storage.volumes.append(claim("results", results_pvc))
        return dataclasses.replace(storage, results_dir="/results/{{workflow.name}}")
    return dataclasses.replace(
        storage, results_dir=f"{model_cache_path}/nightly/{{{{workflow.name}}}}"
    )


def _eval_script(results_dir: str) -> str:
    """The eval's shell command: the policy is ``model``, or the embedded one when that is ''."""
    resolve_model = (
        f'MODEL="{_workflow_parameter("model")}"; [ -n "$MODEL" ] || MODEL=$(python -c "from '
        'termrl.llm.models import prepare_default_model as p; print(p())"); '
    )
    fixed = (
        f'--tasks /work/admitted.parquet --model "$MODEL" --run-id {NIGHTLY_RUN_ID} --no-progress '
        f"--out {results_dir}/eval_results.parquet --report {results_dir}/report.html"
    )
    # Quoted: a parameter may be empty ('' sandbox namespace) or hold spaces.
    settings = " ".join(shlex.quote(argument) for argument in stage_arguments("eval"))
    return f"{resolve_model}mkdir -p {results_dir}; python -m components.eval {fixed} {settings}"


def _stage_containers(
    storage: _Storage,
    cpu_image: str,
    gpu_image: str,
    gpu_tolerations: tuple[Toleration, ...],
    gpu_node_selector: tuple[tuple[str, str], ...],
) -> list[Any]:
    """synthesize, verify and eval, exchanging their artifacts through /work."""
    from hera.workflows import Container
    from hera.workflows import models as m

    mounted = {"volume_mounts": storage.mounts, "env": storage.env or None}
    tasks = ["--out", "/work/tasks.parquet"]
    verdicts = ["--tasks", "/work/tasks.parquet", "--out", "/work/verdicts.parquet"]
    return [
        Container(
            name="synthesize",
            image=cpu_image,
            command=["python", "-m", "components.synthesize"],
            args=[*stage_arguments("synthesize"), "--no-progress", *tasks],
            **mounted,
        ),
        Container(
            name="verify",
            image=cpu_image,
            command=["python", "-m", "components.verify"],
            args=[*verdicts, "--admitted", "/work/admitted.parquet", "--no-progress"]
            + stage_arguments("verify"),
            **mounted,
        ),
        Container(
            name="eval",
            image=gpu_image,
            command=["sh", "-ec"],
            args=[_eval_script(storage.results_dir)],
            resources=m.ResourceRequirements(limits={"nvidia.com/gpu": "1"}),
            tolerations=[m.Toleration(**t.manifest()) for t in gpu_tolerations] or None,
            node_selector=dict(gpu_node_selector) or None,
            **mounted,
        ),
    ]


def nightly_argo(
    cron: str,
    params: dict[str, Any],
    *,
    cpu_image: str = CPU_IMAGE,
    gpu_image: str = GPU_IMAGE,
    image_pull_secrets: tuple[str, ...] = (),
    gpu_tolerations: tuple[Toleration, ...] = (),
    gpu_node_selector: tuple[tuple[str, str], ...] = (),
    namespace: str = "default",
    timezone: str = "UTC",
    service_account: str = SERVICE_ACCOUNT,
    results_pvc: str = "",
    model_cache_pvc: str = "",
    model_cache_path: str = "/var/cache/termrl",
    workspace_access_mode: str = WORKSPACE_ACCESS_MODES[0],
    workspace_storage_class: str = "",
) -> tuple[Any, Any]:
    """The nightly eval for Argo Workflows: a WorkflowTemplate, and a CronWorkflow that runs it.

    ``params`` are the nightly-eval pipeline's parameters (its defaults with the user's ``--set``
    values): every one in ``ARGO_PARAMETERS`` becomes a template parameter with that default and is
    passed by the CronWorkflow, and reaches the stage fields it sets in the KFP nightly
    (``stage_arguments``), so both paths evaluate with the same settings. The rest are
    ``ARGO_FIXED``: the caller refuses a value set for one of them (``termrl schedule``) rather than
    dropping it. Stages exchange artifacts through a per-run workspace volume. The eval's results and
    report are kept on ``results_pvc``, else on the model cache (``nightly/<workflow name>``); with
    neither, they would go with the workspace, so that is refused. ``model_cache_pvc`` is mounted in
    every stage as the kfp pipeline mounts it (TERMRL_CACHE). Sandboxes are pods created under
    ``service_account`` (``termrl cluster manifests`` grants it that). The workspace volume is
    ``workspace_access_mode`` (``WORKSPACE_ACCESS_MODES``), of ``workspace_storage_class`` ('' =
    the cluster's default class).
    """
    from hera.workflows import DAG, Parameter, WorkflowTemplate
    from hera.workflows import models as m

    problems = _argo_problems(params, results_pvc, model_cache_pvc, workspace_access_mode)
    if problems:
        raise ConfigError(problems)
    storage = _storage(results_pvc, model_cache_pvc, model_cache_path)
    arguments = [Parameter(name=name, value=str(params[name])) for name in ARGO_PARAMETERS]
    workspace = m.PersistentVolumeClaimSpec(
        access_modes=[workspace_access_mode],
        storage_class_name=workspace_storage_class or None,
        resources=m.VolumeResourceRequirements(requests={"storage": "20Gi"}),
    )
    with WorkflowTemplate(
        name=TEMPLATE_NAME,
        namespace=namespace,
        entrypoint="nightly-eval",
        service_account_name=service_account,
        arguments=arguments,
        volume_claim_templates=[
            m.PersistentVolumeClaim(metadata=m.ObjectMeta(name="work"), spec=workspace)
        ],
        volumes=storage.volumes or None,
        image_pull_secrets=[m.LocalObjectReference(name=n) for n in image_pull_secrets] or None,
    ) as template:
        synthesize, verify, evaluate = _stage_containers(
            storage, cpu_image, gpu_image, gpu_tolerations, gpu_node_selector
        )
        with DAG(name="nightly-eval"):
            synthesize() >> verify() >> evaluate()
    return template, _cron_workflow(cron, arguments, namespace=namespace, timezone=timezone)


def _argo_problems(
    params: dict[str, Any], results_pvc: str, model_cache_pvc: str, workspace_access_mode: str
) -> list[str]:
    """What keeps ``nightly_argo`` from deriving the nightly from ``params`` and its volumes."""
    problems = [
        f"the nightly eval has no parameter {n}" for n in ARGO_PARAMETERS if n not in params
    ]
    problems += [f"the Argo nightly passes parameter {n} to no stage" for n in _unconsumed()]
    if not (results_pvc or model_cache_pvc):
        problems.append(
            "the Argo nightly eval keeps its results on a volume: give a results PVC or a model "
            "cache PVC (the run's own workspace is deleted with the run)"
        )
    if workspace_access_mode not in WORKSPACE_ACCESS_MODES:
        problems.append(
            f"workspace access mode {workspace_access_mode!r}: one of "
            + ", ".join(WORKSPACE_ACCESS_MODES)
        )
    return problems


def _cron_workflow(cron: str, arguments: list[Any], *, namespace: str, timezone: str) -> Any:
    """The CronWorkflow that runs the nightly's WorkflowTemplate with ``arguments``; a night
    still running when the next is due keeps it from starting (``Forbid``)."""
    from hera.workflows import CronWorkflow
    from hera.workflows import models as m

    return CronWorkflow(
        name=TEMPLATE_NAME,
        namespace=namespace,
        schedules=[argo_cron(cron)],
        timezone=timezone,
        concurrency_policy="Forbid",
        starting_deadline_seconds=3600,
        workflow_template_ref=m.WorkflowTemplateRef(name=TEMPLATE_NAME),
        arguments=arguments,
    )


def round_trip(*documents: Any) -> tuple[str, list[dict[str, Any]]]:
    """The documents' YAML (one after the other) and their parsed-back dicts; raises ``ConfigError``
    if one of them does not survive the round trip."""
    from hera.workflows import CronWorkflow, WorkflowTemplate

    kinds = {"CronWorkflow": CronWorkflow, "WorkflowTemplate": WorkflowTemplate}
    texts, parsed = [], []
    for document in documents:
        text = document.to_yaml()
        original = document.to_dict()
        again = kinds[original["kind"]].from_yaml(text).to_dict()
        if original != again:
            raise ConfigError(f"the {original['kind']} does not survive a YAML round trip")
        texts.append(text)
        parsed.append(again)
    return "---\n".join(texts), parsed


def argo_yaml(template: Any, cron_workflow: Any, argo_version: str = ARGO_VERSION) -> str:
    """The two documents' YAML (checked by ``round_trip``) for Argo ``argo_version``: before 3.6
    the CronWorkflow takes one ``schedule``, not the ``schedules`` list, which it would reject."""
    import yaml

    from pipelines.compile import release

    text, (_, cron) = round_trip(template, cron_workflow)
    if release(argo_version, "Argo version") >= SCHEDULES_SINCE:
        return text
    spec = cron["spec"]
    (spec["schedule"],) = spec.pop("schedules")
    return "---\n".join([template.to_yaml(), yaml.safe_dump(cron, sort_keys=False)])
