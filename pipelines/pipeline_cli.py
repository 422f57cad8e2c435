"""``termrl run | compile | rerun | schedule | cluster``: the pipelines' command line.

Each command is a thin call into ``pipelines.*``; ``pipelines.cli``, the root
command group, adds them (``main.add_command(run)`` and so on).
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from components.images import CPU_IMAGE, GPU_IMAGE
from pipelines import cluster as manifests
from pipelines.docker_runner import RUNNERS, ContainerSettings, RunnerChoice
from pipelines.options import pipeline_arguments
from pipelines.placement import cluster_images, local_images, parse_gpu_placement
from pipelines.versioning import source_version
from termrl.errors import TermrlError

if TYPE_CHECKING:
    from pipelines.local import RunRecord

# kfp (and what it pulls in) is imported inside the commands: `termrl --help` stays quick.

__all__ = ["cluster", "compile_command", "rerun", "run", "schedule"]

_PLACEMENT_OPTIONS = (
    "registry",
    "cpu_image",
    "gpu_image",
    "image_pull_secrets",
    "gpu_tolerations",
    "gpu_node_selector",
)


def _placement_options(command: Callable[..., None]) -> Callable[..., None]:
    """The options that let a cluster pull and place the stages, shared by every command that targets one.

    They reach ``command`` as one dict, ``placement``, which ``_placement_fields`` turns into shape fields.
    """

    @functools.wraps(command)
    def with_placement(**kwargs: Any) -> None:
        command(placement={name: kwargs.pop(name) for name in _PLACEMENT_OPTIONS}, **kwargs)

    options = [
        click.option(
            "--registry",
            default=None,
            metavar="REG",
            help="Registry the cluster pulls the stage images from: "
            "REG/termrl/stage-cpu:<code version> and REG/termrl/stage-gpu:<code version>.",
        ),
        click.option(
            "--cpu-image",
            default=None,
            help=f"Full name of the CPU stages' image (wins over --registry; {CPU_IMAGE} is local).",
        ),
        click.option(
            "--gpu-image",
            default=None,
            help=f"Full name of the image of rollout, train and eval (wins over --registry; "
            f"{GPU_IMAGE} is local).",
        ),
        click.option(
            "--image-pull-secret",
            "image_pull_secrets",
            multiple=True,
            metavar="NAME",
            help="Secret every stage pulls its image with (a private registry; repeatable).",
        ),
        click.option(
            "--gpu-toleration",
            "gpu_tolerations",
            multiple=True,
            metavar="KEY[=VALUE][:EFFECT]",
            help="Taint of the GPU nodes that rollout, train and eval tolerate (repeatable), e.g. "
            "nvidia.com/gpu:NoSchedule; without VALUE any value (Exists), without EFFECT any effect.",
        ),
        click.option(
            "--gpu-node-selector",
            multiple=True,
            metavar="LABEL=VALUE",
            help="Node label that rollout, train and eval require (repeatable), e.g. "
            "nvidia.com/gpu.product=NVIDIA-H100-80GB-HBM3.",
        ),
    ]
    for option in reversed(options):
        with_placement = option(with_placement)
    return with_placement


def _placement_fields(placement: dict[str, Any], tag: str) -> dict[str, Any]:
    """Shape fields from the placement options; refuses images a cluster cannot pull (one line)."""
    cpu, gpu = cluster_images(
        placement["registry"], placement["cpu_image"], placement["gpu_image"], tag
    )
    if local := local_images([cpu, gpu]):
        raise click.ClickException(
            f"{' and '.join(local)}: a cluster cannot pull a local or unqualified image name; "
            "pass --registry REG or full image names (--cpu-image, --gpu-image)"
        )
    tolerations, node_selector = parse_gpu_placement(
        placement["gpu_tolerations"], placement["gpu_node_selector"]
    )
    return {
        "cpu_image": cpu,
        "gpu_image": gpu,
        "image_pull_secrets": placement["image_pull_secrets"],
        "gpu_tolerations": tolerations,
        "gpu_node_selector": node_selector,
    }


def _sandbox_fields(placement: dict[str, Any]) -> dict[str, str]:
    """A cluster's sandboxes: pods (the kubernetes backend) pulling task environments from --registry
    with the first --image-pull-secret; each is a pipeline parameter the UI can change."""
    secrets = placement["image_pull_secrets"]
    return {
        "sandbox_backend": "kubernetes",
        "sandbox_registry": placement["registry"] or "",
        "sandbox_pull_secret": secrets[0] if secrets else "",
    }


def _runner_options(*, rerun: bool) -> Callable[[Callable[..., None]], Callable[..., None]]:
    """``--runner`` and the docker runner's options, shared by ``run`` and ``rerun``.

    They reach the command as one ``RunnerChoice``, ``runner``; a rerun's unset ones are the run's.
    """
    names = ("runner", "image", "podman_socket", "container_network", "mounts")
    recorded = "; default: the run's" if rerun else ""

    def decorate(command: Callable[..., None]) -> Callable[..., None]:
        @functools.wraps(command)
        def with_runner(**kwargs: Any) -> None:
            kind, image, socket, network, mounts = (kwargs.pop(name) for name in names)
            choice = RunnerChoice(
                kind,
                image,
                Path(socket) if socket else None,
                network,
                tuple(Path(m) for m in mounts),
            )
            command(runner=choice, **kwargs)

        options = [
            click.option(
                "--runner",
                type=click.Choice(RUNNERS),
                default=None if rerun else "subprocess",
                show_default=not rerun,
                help="subprocess: every stage in this venv. docker: every stage in the stage image, "
                "through kfp's DockerRunner over podman's Docker-compatible socket, as a cluster pod "
                "runs it (a local stand-in for the cluster, not a Kubernetes backend)"
                + (". Default: the runner the run recorded, in its cache." if rerun else "."),
            ),
            click.option(
                "--image",
                default=None,
                help="--runner docker: the stage image of every stage (default: "
                + ("the run's, else " if rerun else "")
                + "localhost/termrl/stage-cpu tagged with this source's code version, as "
                "`termrl images build` tags it).",
            ),
            click.option(
                "--podman-socket",
                type=click.Path(dir_okay=False),
                default=None,
                help="--runner docker: a podman API socket to use (default: a `podman system "
                "service` started for the command).",
            ),
            click.option(
                "--container-network",
                default=None if rerun else ContainerSettings.network,
                show_default=not rerun,
                help=f"--runner docker: the stage containers' network (bridge for API models{recorded}).",
            ),
            click.option(
                "--mount",
                "mounts",
                multiple=True,
                type=click.Path(exists=True),
                help="--runner docker: a host folder a setting names (base_model=PATH), mounted "
                "read-only at its own path in every stage container (repeatable"
                + ("; added to the run's" if rerun else "")
                + ").",
            ),
        ]
        for option in reversed(options):
            with_runner = option(with_runner)
        return with_runner

    return decorate


def _summary_lines(record: RunRecord) -> list[str]:
    """The report's path and the table of every evaluated policy on the held-out tasks."""
    from pipelines.curriculum import REPORT
    from pipelines.local import summary_lines

    return summary_lines(record, REPORT)


@click.command("run")
@click.option(
    "--runs-dir",
    type=click.Path(file_okay=False),
    default="runs",
    show_default=True,
    help="Folder of run folders; its .cache holds kfp's local cache.",
)
@click.option("--name", default=None, help="Run folder name (default: the start time).")
@click.option(
    "--cache-dir",
    type=click.Path(file_okay=False),
    default=None,
    help="kfp's local cache (default: RUNS_DIR/.cache).",
)
@click.option(
    "--phase1-iterations",
    type=int,
    default=1,
    show_default=True,
    help="N: positive-only rollout -> train rounds.",
)
@click.option(
    "--phase2-iterations",
    type=int,
    default=1,
    show_default=True,
    help="M: full-signal rollout -> train rounds.",
)
@click.option(
    "--set",
    "settings",
    multiple=True,
    metavar="KEY=VALUE",
    help="Set a pipeline parameter, or any stage config field as STAGE.FIELD "
    "(repeatable), e.g. --set synth_count=24 --set train.negative_weight=0.5.",
)
@click.option("--verbose", is_flag=True, help="Stream every stage's own output.")
@_runner_options(rerun=False)
def run(
    runs_dir: str,
    name: str | None,
    cache_dir: str | None,
    phase1_iterations: int,
    phase2_iterations: int,
    settings: tuple[str, ...],
    verbose: bool,
    runner: RunnerChoice,
) -> None:
    """Run the curriculum on kfp's local runner with the embedded defaults (cached stages are reused)."""
    from pipelines.curriculum import CurriculumShape, build_curriculum
    from pipelines.local import pipeline_defaults, run_pipeline_locally

    code_version = source_version()
    runner = runner.with_image(code_version)
    try:
        shape = CurriculumShape(
            phase1_iterations, phase2_iterations, code_version=code_version, **runner.images()
        )
        pipeline = build_curriculum(shape)
        arguments = pipeline_arguments(pipeline_defaults(pipeline), settings)
        run_dir = Path(runs_dir) / (name or time.strftime("%Y%m%d-%H%M%S"))
        with runner.kfp_runner() as kfp_runner:
            click.echo(f"run folder: {run_dir.resolve()}  (log: run.log)")
            record = run_pipeline_locally(
                pipeline,
                arguments,
                run_dir=run_dir,
                cache_dir=cache_dir or runner.cache_dir(Path(runs_dir)),
                shape={
                    "phase1_iterations": phase1_iterations,
                    "phase2_iterations": phase2_iterations,
                    "code_version": shape.code_version,
                    **runner.shape_fields(),
                },
                verbose=verbose,
                runner=kfp_runner,
            )
    except TermrlError as exc:
        raise click.ClickException(str(exc)) from exc
    executed = record.executed()
    click.echo(
        f"\n{'finished' if record.ok else 'FAILED'} in {record.seconds / 60:.1f} min: "
        f"{len(executed)} stage(s) executed, "
        f"{sum(t.state == 'cached' for t in record.tasks.values())} cached"
    )
    if not record.ok:
        raise click.ClickException(f"a stage failed; see {run_dir / 'run.log'}")
    for line in _summary_lines(record):
        click.echo(line)


@click.command("compile")
@click.option(
    "--out",
    type=click.Path(dir_okay=False),
    default="curriculum.yaml",
    show_default=True,
    help="YAML to write (upload it in the Kubeflow UI: Pipelines → Upload pipeline).",
)
@click.option(
    "--pipeline",
    "name",
    type=click.Choice(["curriculum", "nightly-eval"]),
    default="curriculum",
    show_default=True,
)
@click.option("--phase1-iterations", type=int, default=1, show_default=True)
@click.option("--phase2-iterations", type=int, default=1, show_default=True)
@_placement_options
@click.option(
    "--model-cache-pvc", default="", help="PVC to mount as the model cache (TERMRL_CACHE)."
)
@click.option("--api-key-secret", default="", help="Secret whose keys become API-key env vars.")
@click.option("--api-key-env", multiple=True, help="Secret key exposed as an env var (repeatable).")
@click.option(
    "--code-version", default=None, help="Default of code_version (default: the source hash)."
)
def compile_command(
    out: str,
    name: str,
    phase1_iterations: int,
    phase2_iterations: int,
    placement: dict[str, Any],
    model_cache_pvc: str,
    api_key_secret: str,
    api_key_env: tuple[str, ...],
    code_version: str | None,
) -> None:
    """Compile a pipeline to YAML for the Kubeflow UI (images a cluster can pull: --registry or full names)."""
    from pipelines.compile import compile_pipeline, read_compiled
    from pipelines.curriculum import CurriculumShape

    code_version = code_version or source_version()
    try:
        shape = CurriculumShape(
            phase1_iterations,
            phase2_iterations,
            code_version=code_version,
            model_cache_pvc=model_cache_pvc,
            api_key_secret=api_key_secret,
            **({"api_key_env": api_key_env} if api_key_env else {}),
            **_placement_fields(placement, code_version),
            **_sandbox_fields(placement),
        )
        path = compile_pipeline(name, out, shape)
        spec, _ = read_compiled(path)
    except TermrlError as exc:
        raise click.ClickException(str(exc)) from exc
    click.echo(
        f"wrote {path} ({spec.pipeline_info.name}: {len(spec.root.dag.tasks)} tasks, "
        f"code_version default {shape.code_version})\nimages: {shape.cpu_image}, {shape.gpu_image}"
    )


@click.command("rerun")
@click.argument("stage")
@click.option(
    "--run",
    "run_dir",
    type=click.Path(exists=True, file_okay=False),
    required=True,
    help="The run folder `termrl run` printed.",
)
@click.option(
    "--set",
    "settings",
    multiple=True,
    metavar="KEY=VALUE",
    help="Change a parameter (or any field of the stage's config) for this rerun.",
)
@click.option("--no-cache", is_flag=True, help="Execute even if this exact rerun ran before.")
@click.option("--verbose", is_flag=True, help="Stream the stage's own output.")
@_runner_options(rerun=True)
def rerun(
    stage: str,
    run_dir: str,
    settings: tuple[str, ...],
    no_cache: bool,
    verbose: bool,
    runner: RunnerChoice,
) -> None:
    """Rerun STAGE (e.g. train-2, evaluate) on an earlier run's upstream artifacts, by the run's runner."""
    from pipelines.rerun import rerun_stage

    try:
        plan, record = rerun_stage(
            run_dir, stage, settings, runner=runner, cache=not no_cache, verbose=verbose
        )
    except TermrlError as exc:
        raise click.ClickException(str(exc)) from exc
    click.echo(f"upstream stages not executed; inputs imported from {run_dir}:")
    for name, (uri, _) in plan.artifacts.items():
        click.echo(f"  {name} <- {uri}")
    how = f"{plan.runner.runner} runner" + (f", {plan.runner.image}" if plan.runner.image else "")
    if plan.runner.runner != plan.recorded_runner:
        how += f"; the run used the {plan.recorded_runner} runner"
    executed = [t for t in record.tasks.values() if not t.name.startswith("importer")]
    for task in executed:
        click.echo(f"{task.display_name}: {task.state} ({how})")
        for key, uri in task.outputs.items():
            click.echo(f"  {key} -> {uri}")
    click.echo(f"cache: {record.cache_dir}")
    if not record.ok:
        raise click.ClickException(f"the rerun failed; see {Path(record.run_dir) / 'run.log'}")


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
@_placement_options
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
        fields = _placement_fields(placement, code_version)
        defaults = pipeline_defaults(build_nightly_eval())
        params = pipeline_arguments(defaults, settings)
        if host is not None:
            shape = CurriculumShape(
                code_version=code_version,
                model_cache_pvc=model_cache_pvc,
                **fields,
                **_sandbox_fields(placement),
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
        sandbox = _sandbox_fields(placement)
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
def cluster_manifests(
    namespace: str,
    sandbox_namespace: str,
    service_account: str,
    existing_account: bool,
    sandbox_pods: int,
    sandbox_cpu: str,
    sandbox_memory: str,
) -> None:
    """Print the Namespaces, ServiceAccount, RBAC, NetworkPolicies and ResourceQuota (kubectl apply -f -)."""
    try:
        documents = manifests.cluster_manifests(
            namespace=namespace,
            sandbox_namespace=sandbox_namespace,
            service_account=service_account,
            quota=manifests.SandboxQuota(pods=sandbox_pods, cpu=sandbox_cpu, memory=sandbox_memory),
            existing_account=existing_account,
        )
    except TermrlError as exc:
        raise click.ClickException(str(exc)) from exc
    click.echo(manifests.to_yaml(documents), nl=False)
