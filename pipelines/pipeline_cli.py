"""``termrl run | compile | rerun``: the pipelines' command line on this machine and its compile.

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

from pipelines.cli_options import (
    TESTED_KFP_BACKEND,
    placement_fields,
    placement_options,
    sandbox_fields,
)
from pipelines.docker_runner import RUNNERS, ContainerSettings, RunnerChoice
from pipelines.options import pipeline_arguments
from pipelines.versioning import source_version
from termrl.errors import TermrlError

if TYPE_CHECKING:
    from pipelines.local import RunRecord

# kfp (and what it pulls in) is imported inside the commands: `termrl --help` stays quick.

__all__ = ["compile_command", "rerun", "run"]


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
    "--colocate",
    is_flag=True,
    help="Each RL round's rollout and train step in one task (one GPU pod, the engine stepping "
    "aside for the trainer) instead of two.",
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
    colocate: bool,
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
            phase1_iterations,
            phase2_iterations,
            colocate,
            code_version=code_version,
            **runner.images(),
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
                    "colocate": colocate,
                    "code_version": shape.code_version,
                    **runner.shape_fields(),
                },
                verbose=verbose,
                runner=kfp_runner,
            )
    except TermrlError as exc:
        raise click.ClickException(str(exc)) from exc
    counts = f"{record.count('executed')} stage(s) executed, {record.count('cached')} cached"
    if skipped := record.count("skipped"):
        counts += f", {skipped} in branches not taken"
    click.echo(
        f"\n{'finished' if record.ok else 'FAILED'} in {record.seconds / 60:.1f} min: {counts}"
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
@click.option(
    "--colocate",
    is_flag=True,
    help="Each RL round's rollout and train step in one task (one GPU pod, the engine stepping "
    "aside for the trainer) instead of two.",
)
@placement_options
@click.option(
    "--model-cache-pvc", default="", help="PVC to mount as the model cache (TERMRL_CACHE)."
)
@click.option("--api-key-secret", default="", help="Secret whose keys become API-key env vars.")
@click.option("--api-key-env", multiple=True, help="Secret key exposed as an env var (repeatable).")
@click.option(
    "--code-version", default=None, help="Default of code_version (default: the source hash)."
)
@click.option(
    "--kfp-backend-version",
    default=TESTED_KFP_BACKEND,
    show_default=True,
    help="The KFP backend the YAML will run on: a feature it cannot run is refused, naming the "
    "version it needs (OneOf over artifacts needs 2.17.0, optional secret entries 2.15.0).",
)
def compile_command(
    out: str,
    name: str,
    phase1_iterations: int,
    phase2_iterations: int,
    colocate: bool,
    placement: dict[str, Any],
    model_cache_pvc: str,
    api_key_secret: str,
    api_key_env: tuple[str, ...],
    code_version: str | None,
    kfp_backend_version: str,
) -> None:
    """Compile a pipeline to YAML for the Kubeflow UI (images a cluster can pull: --registry or full names)."""
    from pipelines.compile import compile_pipeline, read_compiled
    from pipelines.curriculum import CurriculumShape
    from pipelines.spec_tasks import leaf_tasks

    code_version = code_version or source_version()
    try:
        shape = CurriculumShape(
            phase1_iterations,
            phase2_iterations,
            colocate,
            code_version=code_version,
            model_cache_pvc=model_cache_pvc,
            api_key_secret=api_key_secret,
            **({"api_key_env": api_key_env} if api_key_env else {}),
            **placement_fields(placement, code_version),
            **sandbox_fields(placement),
        )
        path = compile_pipeline(name, out, shape, backend=kfp_backend_version)
        spec, _ = read_compiled(path)
    except TermrlError as exc:
        raise click.ClickException(str(exc)) from exc
    leaves = leaf_tasks(spec).values()
    branched = sum(bool(leaf.branches) for leaf in leaves)
    tasks = f"{len(leaves)} tasks" + (
        f", {branched} in dsl.If/dsl.Else branches" if branched else ""
    )
    click.echo(
        f"wrote {path} ({spec.pipeline_info.name}: {tasks}, code_version default "
        f"{shape.code_version})\nimages: {shape.cpu_image}, {shape.gpu_image}"
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
