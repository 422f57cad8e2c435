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
) -> None:
    """Run the nightly eval on a cron schedule (KFP recurring run, or Argo with --argo)."""
    from pipelines.curriculum import CurriculumShape
    from pipelines.local import pipeline_defaults
    from pipelines.nightly_eval import build_nightly_eval
    from pipelines.schedule import ARGO_FIXED, nightly_argo, round_trip, schedule_kfp

    if (host is None) == (argo_out is None):
        raise click.UsageError("give exactly one of --host (KFP) or --argo FILE")
    if host is not None and results_pvc:
        raise click.UsageError("--results-pvc is for --argo: KFP keeps results as run artifacts")
    code_version = source_version()
    try:
        fields = placement_fields(placement, code_version)
        defaults = pipeline_defaults(build_nightly_eval())
        params = pipeline_arguments(defaults, settings)
        if host is not None:
            shape = CurriculumShape(
                code_version=code_version,
                model_cache_pvc=model_cache_pvc,
                **fields,
                **sandbox_fields(placement),
            )
            job = schedule_kfp(
                host, cron, params=params, experiment=experiment, namespace=namespace, shape=shape
            )
            click.echo(f"recurring run {job} created on {host} (cron {cron})")
            return
        fixed = sorted(set(params) & set(ARGO_FIXED))
        if fixed:
            raise click.UsageError(
                f"--argo: {', '.join(fixed)} cannot be set on the Argo nightly (sandboxes are pods, "
                "the GPU request and code version are the images'); drop it or schedule on KFP"
            )
        sandbox = sandbox_fields(placement)
        template, workflow = nightly_argo(
            cron,
            {
                **defaults,
                "sandbox_registry": sandbox["sandbox_registry"],
                "sandbox_pull_secret": sandbox["sandbox_pull_secret"],
                **params,
            },
            namespace=namespace or "default",
            results_pvc=results_pvc,
            model_cache_pvc=model_cache_pvc,
            **fields,
        )
        text, _ = round_trip(template, workflow)
    except TermrlError as exc:
        raise click.ClickException(str(exc)) from exc
    Path(argo_out).write_text(text)
    click.echo(
        f"wrote {argo_out} (WorkflowTemplate {template.name} and the CronWorkflow running it, "
        f"schedule {cron}); kubectl apply -f {argo_out}"
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
    cluster_cidrs: tuple[str, ...],
) -> None:
    """Print the Namespaces, ServiceAccount, RBAC, NetworkPolicies and ResourceQuota (kubectl apply -f -)."""
    try:
        documents = manifests.cluster_manifests(
            namespace=namespace,
            sandbox_namespace=sandbox_namespace,
            service_account=service_account,
            quota=manifests.SandboxQuota(pods=sandbox_pods, cpu=sandbox_cpu, memory=sandbox_memory),
            existing_account=existing_account,
            **({"cluster_cidrs": cluster_cidrs} if cluster_cidrs else {}),
        )
    except TermrlError as exc:
        raise click.ClickException(str(exc)) from exc
    click.echo(manifests.to_yaml(documents), nl=False)
