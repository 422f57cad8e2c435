"""``termrl schedule | cluster``: what runs on a cluster on a schedule, and what a cluster needs once.

Each command is a thin call into ``pipelines.*``; ``pipelines.cli`` adds them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from pipelines import cluster as manifests
from pipelines.cli_options import placement_fields, placement_options, sandbox_fields
from pipelines.options import pipeline_arguments
from pipelines.versioning import source_version
from termrl.errors import TermrlError

__all__ = ["cluster", "schedule"]

ARGO_VERSION_DEFAULT = "3.6"
"""``pipelines.schedule.ARGO_VERSION`` (that module imports hera; `termrl --help` stays quick)."""


@click.group("schedule")
def schedule() -> None:
    """Schedule recurring pipelines."""


@schedule.command("nightly-eval")
@click.option(
    "--cron", required=True, help="Five-field cron, e.g. '0 3 * * *' (03:00 every night)."
)
@click.option(
    "--host",
    default=None,
    help="KFP API endpoint (e.g. http://localhost:8080): create a recurring run.",
)
@click.option(
    "--argo",
    "argo_out",
    type=click.Path(dir_okay=False),
    default=None,
    help="Write an Argo WorkflowTemplate + CronWorkflow YAML here instead (kubectl apply -f it).",
)
@click.option(
    "--results-pvc",
    default="",
    help="--argo: PVC keeping each night's results and report (default: the model cache PVC).",
)
@click.option(
    "--model-cache-pvc", default="", help="PVC to mount as the model cache (TERMRL_CACHE)."
)
@click.option(
    "--set", "settings", multiple=True, metavar="KEY=VALUE", help="Nightly-eval pipeline parameter."
)
@click.option("--experiment", default="termrl", show_default=True)
@click.option("--namespace", default=None, help="KFP namespace (multi-user) / Argo namespace.")
@click.option(
    "--service-account",
    default=None,
    help="Account the runs' pods run as: with --argo default "
    f"{manifests.SERVICE_ACCOUNT} (`termrl cluster manifests`; with its --existing-account, the "
    "--service-account given there, e.g. pipeline-runner); with --host default the KFP profile's.",
)
@click.option(
    "--no-cache",
    is_flag=True,
    help="--host: run every task afresh each night. Default: each task's own caching, as the "
    "pipeline sets it (the policy copy and the eval never cached, the tasks cached).",
)
@click.option(
    "--argo-version",
    default=None,
    help=f"--argo: the cluster's Argo Workflows version (default {ARGO_VERSION_DEFAULT}): before "
    "3.6 the CronWorkflow gets `schedule`, from 3.6 `schedules`.",
)
@click.option(
    "--workspace-access-mode",
    type=click.Choice(["ReadWriteMany", "ReadWriteOnce"]),
    default=None,
    help="--argo: access mode of the per-run workspace volume (default ReadWriteMany: the CPU "
    "steps and the eval on a GPU node mount it from different nodes).",
)
@click.option(
    "--workspace-storage-class",
    default=None,
    help="--argo: storage class of the workspace volume (default: the cluster's default class).",
)
@placement_options
def schedule_nightly(
    cron: str,
    host: str | None,
    argo_out: str | None,
    settings: tuple[str, ...],
    experiment: str,
    namespace: str | None,
    placement: dict[str, Any],
    results_pvc: str,
    model_cache_pvc: str,
    service_account: str | None,
    no_cache: bool,
    argo_version: str | None,
    workspace_access_mode: str | None,
    workspace_storage_class: str | None,
) -> None:
    """Run the nightly eval on a cron schedule (KFP recurring run, or Argo with --argo)."""
    from pipelines.local import pipeline_defaults
    from pipelines.nightly_eval import build_nightly_eval

    _check_schedule_target(
        host,
        argo_out,
        no_cache=no_cache,
        argo_only={
            "--results-pvc": results_pvc,
            "--argo-version": argo_version,
            "--workspace-access-mode": workspace_access_mode,
            "--workspace-storage-class": workspace_storage_class,
        },
    )
    code_version = source_version()
    try:
        fields = placement_fields(placement, code_version)
        defaults = pipeline_defaults(build_nightly_eval())
        params = pipeline_arguments(defaults, settings)
        if host is not None:
            _schedule_on_kfp(
                host,
                cron,
                params,
                experiment=experiment,
                namespace=namespace,
                shape_fields={
                    "code_version": code_version,
                    "model_cache_pvc": model_cache_pvc,
                    **fields,
                    **sandbox_fields(placement),
                },
                enable_caching=False if no_cache else None,
                service_account=service_account,
            )
            return
        _write_argo_nightly(
            Path(argo_out),
            cron,
            defaults,
            params,
            placement,
            namespace=namespace or "default",
            results_pvc=results_pvc,
            model_cache_pvc=model_cache_pvc,
            service_account=service_account or manifests.SERVICE_ACCOUNT,
            workspace_access_mode=workspace_access_mode or "ReadWriteMany",
            workspace_storage_class=workspace_storage_class or "",
            argo_version=argo_version or ARGO_VERSION_DEFAULT,
            fields=fields,
        )
    except TermrlError as exc:
        raise click.ClickException(str(exc)) from exc


def _check_schedule_target(
    host: str | None, argo_out: str | None, *, no_cache: bool, argo_only: dict[str, Any]
) -> None:
    """Exactly one of KFP (``host``) or Argo (``argo_out``), and only that target's options."""
    if (host is None) == (argo_out is None):
        raise click.UsageError("give exactly one of --host (KFP) or --argo FILE")
    if host is not None and (given := [name for name, value in argo_only.items() if value]):
        raise click.UsageError(
            f"{', '.join(given)}: for --argo only (KFP keeps results as run artifacts and "
            "its own workspace)"
        )
    if argo_out is not None and no_cache:
        raise click.UsageError("--no-cache is for --host: the Argo nightly caches nothing")


def _schedule_on_kfp(
    host: str,
    cron: str,
    params: dict[str, Any],
    *,
    experiment: str,
    namespace: str | None,
    shape_fields: dict[str, Any],
    enable_caching: bool | None,
    service_account: str | None,
) -> None:
    """Create the KFP recurring run of the nightly eval pipeline."""
    from pipelines.curriculum import CurriculumShape
    from pipelines.schedule import schedule_kfp

    job = schedule_kfp(
        host,
        cron,
        params=params,
        experiment=experiment,
        namespace=namespace,
        shape=CurriculumShape(**shape_fields),
        enable_caching=enable_caching,
        service_account=service_account,
    )
    click.echo(f"recurring run {job} created on {host} (cron {cron})")


def _write_argo_nightly(
    out: Path,
    cron: str,
    defaults: dict[str, Any],
    params: dict[str, Any],
    placement: dict[str, Any],
    *,
    argo_version: str,
    fields: dict[str, Any],
    **options: Any,
) -> None:
    """Write the Argo WorkflowTemplate and the CronWorkflow running it to ``out``; ``options``
    are ``nightly_argo``'s (namespace, volumes, service account)."""
    from pipelines.schedule import ARGO_FIXED, argo_yaml, nightly_argo

    fixed = sorted(set(params) & set(ARGO_FIXED))
    if fixed:
        raise click.UsageError(
            f"--argo: {', '.join(fixed)} cannot be set on the Argo nightly (sandboxes are pods, "
            "the GPU request and code version are the images'); drop it or schedule on KFP"
        )
    sandbox = sandbox_fields(placement)
    arguments = {
        **defaults,
        "sandbox_registry": sandbox["sandbox_registry"],
        "sandbox_pull_secret": sandbox["sandbox_pull_secret"],
        **params,
    }
    template, workflow = nightly_argo(cron, arguments, **options, **fields)
    out.write_text(argo_yaml(template, workflow, argo_version))
    click.echo(
        f"wrote {out} (WorkflowTemplate {template.name} and the CronWorkflow running it, "
        f"schedule {cron}); kubectl apply -f {out}"
    )


@click.group("cluster")
def cluster() -> None:
    """What a Kubernetes cluster needs once before the pipeline runs there."""


@cluster.command("manifests")
@click.option(
    "--namespace",
    default=manifests.NAMESPACE,
    show_default=True,
    help="Namespace the pipeline's pods run in (standalone KFP: kubeflow; multi-user: your profile's).",
)
@click.option(
    "--sandbox-namespace",
    default=manifests.SANDBOX_NAMESPACE,
    show_default=True,
    help="Namespace of the sandbox pods (the kubernetes sandbox backend's).",
)
@click.option(
    "--service-account",
    default=manifests.SERVICE_ACCOUNT,
    show_default=True,
    help="Service account the pipeline's pods run as (standalone KFP: pipeline-runner; "
    "multi-user: default-editor).",
)
@click.option(
    "--existing-account",
    is_flag=True,
    help="NAMESPACE and SERVICE_ACCOUNT exist already (KFP's): leave them out of the output.",
)
@click.option(
    "--sandbox-pods",
    type=int,
    default=manifests.SandboxQuota.pods,
    show_default=True,
    help="Most sandbox pods at once (ResourceQuota).",
)
@click.option(
    "--sandbox-cpu",
    default=manifests.SandboxQuota.cpu,
    show_default=True,
    help="Most CPU all sandbox pods request and use together.",
)
@click.option(
    "--sandbox-memory",
    default=manifests.SandboxQuota.memory,
    show_default=True,
    help="Most memory all sandbox pods request and use together.",
)
@click.option(
    "--model-cache-pvc",
    default=None,
    metavar="NAME",
    help="Also a ReadWriteMany PVC NAME in NAMESPACE for `termrl compile --model-cache-pvc NAME` "
    "(retries resume from it; stages on different nodes mount it at once).",
)
@click.option(
    "--model-cache-size",
    default=manifests.ModelCache.size,
    show_default=True,
    help="--model-cache-pvc: the storage it requests.",
)
@click.option(
    "--storage-class",
    default="",
    help="--model-cache-pvc: a storage class providing ReadWriteMany (default: the cluster's default).",
)
@click.option(
    "--cluster-cidr",
    "cluster_cidrs",
    multiple=True,
    help="A pod, service or node CIDR that egress sandboxes must not reach (repeat; default: "
    "every private, shared and link-local range).",
)
def cluster_manifests(
    namespace: str,
    sandbox_namespace: str,
    service_account: str,
    existing_account: bool,
    sandbox_pods: int,
    sandbox_cpu: str,
    sandbox_memory: str,
    model_cache_pvc: str | None,
    model_cache_size: str,
    storage_class: str,
    cluster_cidrs: tuple[str, ...],
) -> None:
    """Print the Namespaces, ServiceAccount, RBAC, NetworkPolicies, ResourceQuota and model-cache PVC (kubectl apply -f -)."""
    if storage_class and not model_cache_pvc:
        raise click.UsageError("--storage-class is the model cache's: give --model-cache-pvc NAME")
    try:
        documents = manifests.cluster_manifests(
            namespace=namespace,
            sandbox_namespace=sandbox_namespace,
            service_account=service_account,
            quota=manifests.SandboxQuota(pods=sandbox_pods, cpu=sandbox_cpu, memory=sandbox_memory),
            existing_account=existing_account,
            model_cache=manifests.ModelCache(model_cache_pvc, model_cache_size, storage_class)
            if model_cache_pvc
            else None,
            **({"cluster_cidrs": cluster_cidrs} if cluster_cidrs else {}),
        )
    except TermrlError as exc:
        raise click.ClickException(str(exc)) from exc
    click.echo(manifests.to_yaml(documents), nl=False)
