"""Nightly evals on a schedule: a KFP recurring run, or an Argo CronWorkflow.

    schedule_kfp(host, cron, ...)    kfp.Client: experiment (found or created) + recurring run
                                     carrying the compiled nightly-eval pipeline
    nightly_cron_workflow(cron, ...) hera: an Argo CronWorkflow running the same three stages
                                     (synthesize → verify → eval) through their command lines,
                                     for clusters with Argo Workflows but no Kubeflow
    round_trip(workflow)             serialise, parse back, compare: the YAML written is the
                                     object built

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

__all__ = ["argo_cron", "kfp_cron", "nightly_cron_workflow", "round_trip", "schedule_kfp"]


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


def nightly_cron_workflow(
    cron: str,
    *,
    cpu_image: str = CPU_IMAGE,
    gpu_image: str = GPU_IMAGE,
    image_pull_secrets: tuple[str, ...] = (),
    gpu_tolerations: tuple[Toleration, ...] = (),
    gpu_node_selector: tuple[tuple[str, str], ...] = (),
    namespace: str = "default",
    model: str = "",
    task_count: int = 12,
    task_seed: int = 1000,
    trials: int = 2,
    timezone: str = "UTC",
    service_account: str = SERVICE_ACCOUNT,
    results_pvc: str = "",
    sandbox_registry: str = "",
    sandbox_pull_secret: str = "",
) -> Any:
    """The nightly eval as an Argo CronWorkflow (a hera object).

    Stages exchange artifacts through a per-run workspace volume; the eval's
    results and report go to ``results_pvc`` (one folder per run) when given.
    Sandboxes are pods (``--backend kubernetes``), created under ``service_account``
    (``termrl cluster manifests`` grants it that). Every pod pulls with ``image_pull_secrets``;
    the eval pod goes to a node ``gpu_node_selector`` and ``gpu_tolerations`` allow. The sandbox
    pods pull task environments from ``sandbox_registry`` with ``sandbox_pull_secret``.
    """
    from hera.workflows import DAG, Container, CronWorkflow, Parameter
    from hera.workflows import models as m

    work = m.VolumeMount(name="work", mount_path="/work")
    mounts = [work]
    results_dir = "/work/results"
    if results_pvc:
        mounts.append(m.VolumeMount(name="results", mount_path="/results"))
        results_dir = "/results/{{workflow.name}}"

    def param(name: str) -> str:
        return "{{workflow.parameters." + name + "}}"

    sandbox = [
        f"--set sandbox_{key}={value}"
        for key, value in (("registry", sandbox_registry), ("pull_secret", sandbox_pull_secret))
        if value
    ]

    resolve_model = (
        f'MODEL="{param("model")}"; [ -n "$MODEL" ] || MODEL=$(python -c "from termrl.llm.models '
        'import prepare_default_model as p; print(p())"); '
    )
    with CronWorkflow(
        name="termrl-nightly-eval",
        namespace=namespace,
        schedules=[argo_cron(cron)],
        timezone=timezone,
        concurrency_policy="Forbid",
        starting_deadline_seconds=3600,
        entrypoint="nightly-eval",
        service_account_name=service_account,
        arguments=[
            Parameter(name="model", value=model),
            Parameter(name="task_count", value=str(task_count)),
            Parameter(name="task_seed", value=str(task_seed)),
            Parameter(name="trials", value=str(trials)),
        ],
        volume_claim_templates=[
            m.PersistentVolumeClaim(
                metadata=m.ObjectMeta(name="work"),
                spec=m.PersistentVolumeClaimSpec(
                    access_modes=["ReadWriteOnce"],
                    resources=m.VolumeResourceRequirements(requests={"storage": "20Gi"}),
                ),
            )
        ],
        volumes=[
            m.Volume(
                name="results",
                persistent_volume_claim=m.PersistentVolumeClaimVolumeSource(claim_name=results_pvc),
            )
        ]
        if results_pvc
        else None,
        image_pull_secrets=[m.LocalObjectReference(name=name) for name in image_pull_secrets]
        or None,
    ) as workflow:
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
                "1",
                "--backend",
                "kubernetes",
                "--no-progress",
                *(a for item in sandbox for a in item.split(" ", 1)),
            ],
            volume_mounts=mounts,
        )
        evaluate = Container(
            name="eval",
            image=gpu_image,
            command=["sh", "-ec"],
            args=[
                resolve_model + f"mkdir -p {results_dir}; python -m components.eval --tasks "
                f'/work/admitted.parquet --model "$MODEL" --trials {param("trials")} --backend kubernetes '
                f"--run-id nightly --no-progress --out {results_dir}/eval_results.parquet "
                f"--report {results_dir}/report.html" + "".join(f" {item}" for item in sandbox)
            ],
            volume_mounts=mounts,
            resources=m.ResourceRequirements(limits={"nvidia.com/gpu": "1"}),
            tolerations=[m.Toleration(**t.manifest()) for t in gpu_tolerations] or None,
            node_selector=dict(gpu_node_selector) or None,
        )
        with DAG(name="nightly-eval"):
            synthesize() >> verify() >> evaluate()
    return workflow


def round_trip(workflow: Any) -> tuple[str, dict[str, Any]]:
    """The workflow's YAML and its parsed-back dict; raises ``ConfigError`` if they differ."""
    from hera.workflows import CronWorkflow

    text = workflow.to_yaml()
    parsed = CronWorkflow.from_yaml(text)
    original, again = workflow.to_dict(), parsed.to_dict()
    if original != again:
        raise ConfigError("the CronWorkflow does not survive a YAML round trip")
    return text, again
