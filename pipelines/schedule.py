"""Nightly evals on a schedule: a KFP recurring run, or an Argo WorkflowTemplate + CronWorkflow.

    schedule_kfp(host, cron, ...)    kfp.Client: experiment (found or created) + recurring run
                                     carrying the compiled nightly-eval pipeline
    nightly_argo(cron, params, ...)  hera: an Argo WorkflowTemplate running the same three stages
                                     (synthesize → verify → eval) through their command lines with
                                     the same parameters, and a CronWorkflow running it, for
                                     clusters with Argo Workflows but no Kubeflow
    round_trip(*documents)           serialise, parse back, compare: the YAML written is the
                                     objects built

Cron expressions are the standard five fields (``0 3 * * *``); KFP's scheduler
wants six (seconds first), so ``kfp_cron`` prepends ``0``.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from components.images import CPU_IMAGE, GPU_IMAGE
from pipelines.cluster import SERVICE_ACCOUNT
from pipelines.placement import Toleration
from termrl.errors import ConfigError

if TYPE_CHECKING:
    from pipelines.curriculum import CurriculumShape

__all__ = [
    "ARGO_FIXED",
    "ARGO_PARAMETERS",
    "argo_cron",
    "kfp_cron",
    "nightly_argo",
    "round_trip",
    "schedule_kfp",
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
) -> str:
    """Create the recurring run on the KFP API at ``host``; returns its id.

    Without ``pipeline_yaml`` the nightly-eval pipeline is compiled on the fly with ``shape``.
    Caching is off for the recurring run: a nightly eval that reused last
    night's results would measure nothing.
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
            enable_caching=False,
        )
    return job.recurring_run_id


ARGO_PARAMETERS = (
    "model",
    "task_count",
    "task_seed",
    "verify_repeats",
    "trials",
    "max_turns",
    "max_new_tokens",
    "sandbox_namespace",
    "sandbox_registry",
    "sandbox_pull_secret",
)
"""The nightly-eval pipeline's parameters the Argo workflow takes, under the same names. The rest are
fixed there: sandboxes are pods, the GPU request is the container's, the code version is the image's."""
ARGO_FIXED = (
    "code_version",
    "sandbox_backend",
    "accelerator_type",
    "accelerator_count",
    "eval_options",
)
TEMPLATE_NAME = "termrl-nightly-eval"


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
) -> tuple[Any, Any]:
    """The nightly eval for Argo Workflows: a WorkflowTemplate, and a CronWorkflow that runs it.

    ``params`` are the nightly-eval pipeline's parameters (its defaults with the
    user's ``--set`` values): every one in ``ARGO_PARAMETERS`` becomes a template
    parameter with that default and is passed by the CronWorkflow, so both paths
    evaluate with the same settings. The rest are ``ARGO_FIXED``: the caller refuses
    a value set for one of them (``termrl schedule``) rather than dropping it. Stages exchange artifacts through a per-run
    workspace volume. The eval's results and report are kept on ``results_pvc``,
    else on the model cache (``nightly/<workflow name>``); with neither, they would
    go with the workspace, so that is refused. ``model_cache_pvc`` is mounted in
    every stage as the kfp pipeline mounts it (TERMRL_CACHE). Sandboxes are pods
    created under ``service_account`` (``termrl cluster manifests`` grants it that).
    """
    from hera.workflows import DAG, Container, CronWorkflow, Parameter, WorkflowTemplate
    from hera.workflows import models as m

    missing = [name for name in ARGO_PARAMETERS if name not in params]
    if missing:
        raise ConfigError(f"the nightly eval has no parameter {', '.join(missing)}")
    if not (results_pvc or model_cache_pvc):
        raise ConfigError(
            "the Argo nightly eval keeps its results on a volume: give a results PVC or a model "
            "cache PVC (the run's own workspace is deleted with the run)"
        )
    mounts = [m.VolumeMount(name="work", mount_path="/work")]
    volumes = []
    env = []
    if model_cache_pvc:
        mounts.append(m.VolumeMount(name="model-cache", mount_path=model_cache_path))
        volumes.append(
            m.Volume(
                name="model-cache",
                persistent_volume_claim=m.PersistentVolumeClaimVolumeSource(
                    claim_name=model_cache_pvc
                ),
            )
        )
        env.append(m.EnvVar(name="TERMRL_CACHE", value=model_cache_path))
    if results_pvc:
        mounts.append(m.VolumeMount(name="results", mount_path="/results"))
        volumes.append(
            m.Volume(
                name="results",
                persistent_volume_claim=m.PersistentVolumeClaimVolumeSource(claim_name=results_pvc),
            )
        )
        results_dir = "/results/{{workflow.name}}"
    else:
        results_dir = f"{model_cache_path}/nightly/{{{{workflow.name}}}}"

    def param(name: str) -> str:
        return "{{workflow.parameters." + name + "}}"

    sandbox = [
        f"--set sandbox_{key}={param('sandbox_' + key)}"
        for key in ("namespace", "registry", "pull_secret")
    ]
    resolve_model = (
        f'MODEL="{param("model")}"; [ -n "$MODEL" ] || MODEL=$(python -c "from termrl.llm.models '
        'import prepare_default_model as p; print(p())"); '
    )
    with WorkflowTemplate(
        name=TEMPLATE_NAME,
        namespace=namespace,
        entrypoint="nightly-eval",
        service_account_name=service_account,
        arguments=[Parameter(name=name, value=str(params[name])) for name in ARGO_PARAMETERS],
        volume_claim_templates=[
            m.PersistentVolumeClaim(
                metadata=m.ObjectMeta(name="work"),
                spec=m.PersistentVolumeClaimSpec(
                    access_modes=["ReadWriteOnce"],
                    resources=m.VolumeResourceRequirements(requests={"storage": "20Gi"}),
                ),
            )
        ],
        volumes=volumes or None,
        image_pull_secrets=[m.LocalObjectReference(name=name) for name in image_pull_secrets]
        or None,
    ) as template:
        synthesize = Container(
            name="synthesize",
            image=cpu_image,
            command=["python", "-m", "components.synthesize"],
            args=[
                "--count",
                param("task_count"),
                "--seed",
                param("task_seed"),
                "--no-progress",
                "--out",
                "/work/tasks.parquet",
            ],
            volume_mounts=mounts,
            env=env or None,
        )
        verify = Container(
            name="verify",
            image=cpu_image,
            command=["python", "-m", "components.verify"],
            args=[
                "--tasks",
                "/work/tasks.parquet",
                "--out",
                "/work/verdicts.parquet",
                "--admitted",
                "/work/admitted.parquet",
                "--repeats",
                param("verify_repeats"),
                "--backend",
                "kubernetes",
                "--no-progress",
                *(a for item in sandbox for a in item.split(" ", 1)),
            ],
            volume_mounts=mounts,
            env=env or None,
        )
        evaluate = Container(
            name="eval",
            image=gpu_image,
            command=["sh", "-ec"],
            args=[
                resolve_model + f"mkdir -p {results_dir}; python -m components.eval --tasks "
                f'/work/admitted.parquet --model "$MODEL" --trials {param("trials")} '
                f"--max-turns {param('max_turns')} --max-new-tokens {param('max_new_tokens')} "
                "--backend kubernetes --run-id nightly --no-progress "
                f"--out {results_dir}/eval_results.parquet --report {results_dir}/report.html"
                + "".join(f" {item}" for item in sandbox)
            ],
            volume_mounts=mounts,
            env=env or None,
            resources=m.ResourceRequirements(limits={"nvidia.com/gpu": "1"}),
            tolerations=[m.Toleration(**t.manifest()) for t in gpu_tolerations] or None,
            node_selector=dict(gpu_node_selector) or None,
        )
        with DAG(name="nightly-eval"):
            synthesize() >> verify() >> evaluate()
    cron_workflow = CronWorkflow(
        name=TEMPLATE_NAME,
        namespace=namespace,
        schedules=[argo_cron(cron)],
        timezone=timezone,
        concurrency_policy="Forbid",
        starting_deadline_seconds=3600,
        workflow_template_ref=m.WorkflowTemplateRef(name=TEMPLATE_NAME),
        arguments=[Parameter(name=name, value=str(params[name])) for name in ARGO_PARAMETERS],
    )
    return template, cron_workflow


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
