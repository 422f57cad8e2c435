"""``termrl run | compile | rerun | schedule``: the pipelines' command line.

Each command is a thin call into ``pipelines.*``; the lead wires them into
``termrl.cli`` (``main.add_command(run)`` and so on).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING

import click

from components.images import CPU_IMAGE, GPU_IMAGE
from pipelines.options import pipeline_arguments
from pipelines.versioning import source_version
from termrl.errors import TermrlError

if TYPE_CHECKING:
    from pipelines.local import RunRecord

# kfp (and what it pulls in) is imported inside the commands: `termrl --help` stays quick.

__all__ = ["compile_command", "rerun", "run", "schedule"]


def _summary_lines(record: RunRecord) -> list[str]:
    """The report's path and the table of every evaluated policy on the held-out tasks."""
    from pipelines.curriculum import REPORT
    from pipelines.local import summary_lines

    return summary_lines(record, REPORT)


@click.command("run")
@click.option("--runs-dir", type=click.Path(file_okay=False), default="runs", show_default=True,
              help="Folder of run folders; its .cache holds kfp's local cache.")
@click.option("--name", default=None, help="Run folder name (default: the start time).")
@click.option("--cache-dir", type=click.Path(file_okay=False), default=None,
              help="kfp's local cache (default: RUNS_DIR/.cache).")
@click.option("--phase1-iterations", type=int, default=1, show_default=True,
              help="N: positive-only rollout -> train rounds.")
@click.option("--phase2-iterations", type=int, default=1, show_default=True,
              help="M: full-signal rollout -> train rounds.")
@click.option("--set", "settings", multiple=True, metavar="KEY=VALUE",
              help="Set a pipeline parameter, or any stage config field as STAGE.FIELD "
                   "(repeatable), e.g. --set synth_count=24 --set train.negative_weight=0.5.")
@click.option("--verbose", is_flag=True, help="Stream every stage's own output.")
def run(runs_dir: str, name: str | None, cache_dir: str | None, phase1_iterations: int,
        phase2_iterations: int, settings: tuple[str, ...], verbose: bool) -> None:  # fmt: skip
    """Run the curriculum on kfp's local runner with the embedded defaults (cached stages are reused)."""
    from pipelines.curriculum import CurriculumShape, build_curriculum
    from pipelines.local import pipeline_defaults, run_pipeline_locally

    try:
        shape = CurriculumShape(phase1_iterations, phase2_iterations, code_version=source_version())
        pipeline = build_curriculum(shape)
        arguments = pipeline_arguments(pipeline_defaults(pipeline), settings)
        run_dir = Path(runs_dir) / (name or time.strftime("%Y%m%d-%H%M%S"))
        click.echo(f"run folder: {run_dir.resolve()}  (log: run.log)")
        record = run_pipeline_locally(
            pipeline, arguments, run_dir=run_dir, cache_dir=cache_dir or Path(runs_dir) / ".cache",
            shape={"phase1_iterations": phase1_iterations, "phase2_iterations": phase2_iterations,
                   "code_version": shape.code_version},
            verbose=verbose,
        )  # fmt: skip
    except TermrlError as exc:
        raise click.ClickException(str(exc)) from exc
    executed = record.executed()
    click.echo(f"\n{'finished' if record.ok else 'FAILED'} in {record.seconds / 60:.1f} min: "
               f"{len(executed)} stage(s) executed, "
               f"{sum(t.state == 'cached' for t in record.tasks.values())} cached")  # fmt: skip
    if not record.ok:
        raise click.ClickException(f"a stage failed; see {run_dir / 'run.log'}")
    for line in _summary_lines(record):
        click.echo(line)



@click.command("compile")
@click.option("--out", type=click.Path(dir_okay=False), default="curriculum.yaml", show_default=True,
              help="YAML to write (upload it in the Kubeflow UI: Pipelines → Upload pipeline).")
@click.option("--pipeline", "name", type=click.Choice(["curriculum", "nightly-eval"]), default="curriculum",
              show_default=True)
@click.option("--phase1-iterations", type=int, default=1, show_default=True)
@click.option("--phase2-iterations", type=int, default=1, show_default=True)
@click.option("--cpu-image", default=CPU_IMAGE, show_default=True,
              help="Image of the CPU stages, as the cluster pulls it.")
@click.option("--gpu-image", default=GPU_IMAGE, show_default=True,
              help="Image of rollout, train and eval.")
@click.option("--model-cache-pvc", default="", help="PVC to mount as the model cache (TERMRL_CACHE).")
@click.option("--api-key-secret", default="", help="Secret whose keys become API-key env vars.")
@click.option("--api-key-env", multiple=True, help="Secret key exposed as an env var (repeatable).")
@click.option("--code-version", default=None, help="Default of code_version (default: the source hash).")
def compile_command(out: str, name: str, phase1_iterations: int, phase2_iterations: int, cpu_image: str,
                    gpu_image: str, model_cache_pvc: str, api_key_secret: str, api_key_env: tuple[str, ...],
                    code_version: str | None) -> None:  # fmt: skip
    """Compile a pipeline to YAML for the Kubeflow UI."""
    from pipelines.compile import compile_pipeline, read_compiled
    from pipelines.curriculum import CurriculumShape

    try:
        shape = CurriculumShape(
            phase1_iterations, phase2_iterations, cpu_image=cpu_image, gpu_image=gpu_image,
            code_version=code_version or source_version(), model_cache_pvc=model_cache_pvc,
            api_key_secret=api_key_secret, **({"api_key_env": api_key_env} if api_key_env else {}),
        )  # fmt: skip
        path = compile_pipeline(name, out, shape)
        spec, _ = read_compiled(path)
    except TermrlError as exc:
        raise click.ClickException(str(exc)) from exc
    click.echo(f"wrote {path} ({spec.pipeline_info.name}: {len(spec.root.dag.tasks)} tasks, "
               f"code_version default {shape.code_version})")  # fmt: skip


@click.command("rerun")
@click.argument("stage")
@click.option("--run", "run_dir", type=click.Path(exists=True, file_okay=False), required=True,
              help="The run folder `termrl run` printed.")
@click.option("--set", "settings", multiple=True, metavar="KEY=VALUE",
              help="Change a parameter (or any field of the stage's config) for this rerun.")
@click.option("--no-cache", is_flag=True, help="Execute even if this exact rerun ran before.")
@click.option("--verbose", is_flag=True, help="Stream the stage's own output.")
def rerun(stage: str, run_dir: str, settings: tuple[str, ...], no_cache: bool, verbose: bool) -> None:
    """Rerun STAGE (e.g. train-2, evaluate) on an earlier run's upstream artifacts."""
    from pipelines.rerun import rerun_stage

    try:
        plan, record = rerun_stage(run_dir, stage, settings, cache=not no_cache, verbose=verbose)
    except TermrlError as exc:
        raise click.ClickException(str(exc)) from exc
    click.echo(f"upstream stages not executed; inputs imported from {run_dir}:")
    for name, (uri, _) in plan.artifacts.items():
        click.echo(f"  {name} <- {uri}")
    executed = [t for t in record.tasks.values() if not t.name.startswith("importer")]
    for task in executed:
        click.echo(f"{task.display_name}: {task.state}")
        for key, uri in task.outputs.items():
            click.echo(f"  {key} -> {uri}")
    if not record.ok:
        raise click.ClickException(f"the rerun failed; see {Path(record.run_dir) / 'run.log'}")


@click.group("schedule")
def schedule() -> None:
    """Schedule recurring pipelines."""


@schedule.command("nightly-eval")
@click.option("--cron", required=True, help="Five-field cron, e.g. '0 3 * * *' (03:00 every night).")
@click.option("--host", default=None, help="KFP API endpoint (e.g. http://localhost:8080): create a recurring run.")
@click.option("--argo", "argo_out", type=click.Path(dir_okay=False), default=None,
              help="Write an Argo CronWorkflow YAML here instead (kubectl apply -f it).")
@click.option("--set", "settings", multiple=True, metavar="KEY=VALUE", help="Nightly-eval pipeline parameter.")
@click.option("--experiment", default="termrl", show_default=True)
@click.option("--namespace", default=None, help="KFP namespace (multi-user) / Argo namespace.")
@click.option("--cpu-image", default=CPU_IMAGE, show_default=True)
@click.option("--gpu-image", default=GPU_IMAGE, show_default=True)
def schedule_nightly(cron: str, host: str | None, argo_out: str | None, settings: tuple[str, ...], experiment: str,
                     namespace: str | None, cpu_image: str, gpu_image: str) -> None:  # fmt: skip
    """Run the nightly eval on a cron schedule (KFP recurring run, or Argo CronWorkflow with --argo)."""
    from pipelines.local import pipeline_defaults
    from pipelines.nightly_eval import build_nightly_eval
    from pipelines.schedule import nightly_cron_workflow, round_trip, schedule_kfp

    if (host is None) == (argo_out is None):
        raise click.UsageError("give exactly one of --host (KFP) or --argo FILE")
    try:
        defaults = pipeline_defaults(build_nightly_eval())
        params = pipeline_arguments(defaults, settings)
        if host is not None:
            job = schedule_kfp(host, cron, params=params, experiment=experiment, namespace=namespace)
            click.echo(f"recurring run {job} created on {host} (cron {cron})")
            return
        keys = ("model", "task_count", "task_seed", "trials")
        workflow = nightly_cron_workflow(
            cron, cpu_image=cpu_image, gpu_image=gpu_image, namespace=namespace or "default",
            **{k: v for k, v in params.items() if k in keys},
        )  # fmt: skip
        text, _ = round_trip(workflow)
    except TermrlError as exc:
        raise click.ClickException(str(exc)) from exc
    Path(argo_out).write_text(text)
    click.echo(f"wrote {argo_out} (CronWorkflow {workflow.name}, schedule {cron}); kubectl apply -f {argo_out}")
