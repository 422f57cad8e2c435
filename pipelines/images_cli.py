"""``termrl images build | push | push-tasks``: the images a cluster pulls. Thin over ``pipelines.images``."""

from __future__ import annotations

from pathlib import Path

import click

from pipelines import images
from pipelines.versioning import source_version
from termrl.errors import TermrlError

__all__ = ["images_group"]


@click.group("images")
def images_group() -> None:
    """Build the stage and sandbox base images, and push them (and task environments) to a registry."""


_STAGE = click.option(
    "--stage",
    "stages",
    multiple=True,
    type=click.Choice(sorted(images.STAGE_IMAGES)),
    help="Stage image (repeatable; default stage-cpu: stage-gpu needs a CUDA base image "
    "and vLLM's CUDA wheels, see images/stage-gpu/README.md).",
)
_TAG = click.option(
    "--tag",
    default=None,
    help="Image tag (default: the code version, the tag `termrl compile` uses).",
)


def _echo(message: str) -> None:
    click.echo(f"  {message}", err=True)


@images_group.command("build")
@_STAGE
@_TAG
@click.option(
    "--no-base",
    is_flag=True,
    help="Skip the sandbox base images (termrl/base:bookworm is built anyway "
    "for the CPU image, which starts FROM it).",
)
@click.option(
    "--build-arg",
    "build_args",
    multiple=True,
    metavar="KEY=VALUE",
    help="Passed to podman build (stage-gpu: CUDA_IMAGE=...).",
)
def build(
    stages: tuple[str, ...], tag: str | None, no_base: bool, build_args: tuple[str, ...]
) -> None:
    """Build the stage images (localhost/termrl/<stage>:TAG and :latest) and the sandbox base images."""
    from termrl.sandbox.base_images import build_base_images

    tag = tag or source_version()
    try:
        if not no_base:
            built = build_base_images(log=_echo)
            click.echo(f"base images: {', '.join(built) or 'all current'}")
        for stage in stages or ("stage-cpu",):
            names = images.build_stage_image(stage, tag, build_args=build_args, log=_echo)
            click.echo(f"built {', '.join(names)}")
    except TermrlError as exc:
        raise click.ClickException(f"{exc}\n{getattr(exc, 'log_tail', '') or ''}".rstrip()) from exc


_REGISTRY = click.option(
    "--registry", required=True, metavar="REG", help="Registry to push to (host[:port][/path])."
)
_TLS = click.option(
    "--tls-verify/--no-tls-verify",
    default=True,
    show_default=True,
    help="Verify the registry's TLS certificate (--no-tls-verify: plain HTTP, self-signed).",
)


@images_group.command("push")
@_REGISTRY
@_STAGE
@_TAG
@_TLS
@click.option("--no-base", is_flag=True, help="Push only the stage images.")
def push(
    registry: str, stages: tuple[str, ...], tag: str | None, tls_verify: bool, no_base: bool
) -> None:
    """Push REG/termrl/<stage>:TAG and the base images (REG/termrl/base:bookworm, ...) built by `images build`."""
    try:
        pushed = images.push_images(
            registry,
            tag or source_version(),
            stages=stages or ("stage-cpu",),
            base=not no_base,
            tls_verify=tls_verify,
            log=_echo,
        )
    except TermrlError as exc:
        raise click.ClickException(f"{exc}\n{getattr(exc, 'log_tail', '') or ''}".rstrip()) from exc
    for name in pushed:
        click.echo(f"pushed {name}")


@images_group.command("push-tasks")
@click.option(
    "--pipeline",
    "pipeline_yaml",
    type=click.Path(exists=True, dir_okay=False),
    default=None,
    help="Compiled pipeline (termrl compile): synthesize its tasks here, with its arguments, "
    "and push their environments.",
)
@click.option(
    "--set",
    "settings",
    multiple=True,
    metavar="KEY=VALUE",
    help="A parameter the run will change (as `termrl run --set`), e.g. synth_count=96.",
)
@click.option(
    "--tasks",
    "tasks",
    multiple=True,
    type=click.Path(exists=True, dir_okay=False),
    help="Tasks artifact (Parquet) whose environments the cluster's sandboxes run (repeatable), "
    "e.g. the run's expert_tasks.",
)
@_REGISTRY
@_TLS
@click.option(
    "--tag-only",
    is_flag=True,
    help="Tag the images REG/termrl/env:<hash> in this host's podman storage, push nothing: for "
    "pods that run from this storage (the local API stand-in, python -m tests.k8s_standin).",
)
def push_tasks(
    pipeline_yaml: str | None,
    settings: tuple[str, ...],
    tasks: tuple[str, ...],
    registry: str,
    tls_verify: bool,
    tag_only: bool,
) -> None:
    """Build the task environments a run needs (podman) and push them as REG/termrl/env:<hash>, where the
    kubernetes sandbox backend pulls them. Run it before each cluster run, with the run's parameters."""
    import tempfile

    from pipelines.task_images import synthesize_pipeline_tasks

    if not pipeline_yaml and not tasks:
        raise click.UsageError(
            "give --pipeline YAML (the tasks it synthesizes) and/or --tasks FILE"
        )
    try:
        with tempfile.TemporaryDirectory(prefix="termrl-push-tasks-") as tmp:
            paths = [Path(t) for t in tasks]
            if pipeline_yaml:
                paths += synthesize_pipeline_tasks(pipeline_yaml, settings, Path(tmp))
            pushed = images.push_task_images(
                paths, registry, tls_verify=tls_verify, tag_only=tag_only, log=_echo
            )
    except TermrlError as exc:
        raise click.ClickException(f"{exc}\n{getattr(exc, 'log_tail', '') or ''}".rstrip()) from exc
    done = "tagged" if tag_only else "pushed"
    click.echo(
        f"{done} {len(pushed)} task environment image(s) as {registry.rstrip('/')}/termrl/env:<hash>"
    )
