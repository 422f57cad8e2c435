"""`termrl sandbox build-base | stats | cleanup | gc`."""

from __future__ import annotations

import asyncio

import click

from termrl.errors import TermrlError
from termrl.sandbox import metrics
from termrl.sandbox.base_images import BASE_IMAGES, ON_DEMAND_IMAGES, build_base_images
from termrl.sandbox.manager import BACKENDS, SandboxManager
from termrl.sandbox.spec import SandboxSpec

__all__ = ["sandbox"]


@click.group()
def sandbox() -> None:
    """Sandboxes for agents: local base images, metrics, leftovers."""


@sandbox.command("build-base")
@click.option("--force", is_flag=True, help="Rebuild even when the images are current.")
@click.option("--binary", default="podman", show_default=True, help="Container CLI to import into.")
def build_base(force: bool, binary: str) -> None:
    """Build the Debian base images with mmdebstrap and tag them (skipped when current)."""
    try:
        built = build_base_images(
            binary=binary, force=force, log=lambda m: click.echo(f"[build-base] {m}")
        )
    except TermrlError as e:
        raise click.ClickException(str(e)) from e
    for image in BASE_IMAGES:
        state = "built" if image.name in built else "current"
        click.echo(
            f"{image.name} ({state}, recipe {image.recipe_hash}): {', '.join(image.aliases)}"
        )
    for image in ON_DEMAND_IMAGES:  # minutes to build: made when a task first starts FROM one
        click.echo(f"{image.name} (built on first use): {', '.join(image.aliases)}")


async def _probe(backend: str, image: str, count: int) -> None:
    async with SandboxManager(backend=backend) as manager:
        for _ in range(count):
            async with await manager.create(SandboxSpec(image=image)) as session:
                await session.exec("true")


@sandbox.command("stats")
@click.option("--backend", type=click.Choice(BACKENDS), default="podman", show_default=True)
@click.option(
    "--probe", default=0, show_default=True, help="First run this many create/exec/close cycles."
)
@click.option("--image", default=BASE_IMAGES[0].name, show_default=True, help="Image for --probe.")
@click.option("--prometheus", is_flag=True, help="Print the Prometheus text exposition format.")
def stats(backend: str, probe: int, image: str, prometheus: bool) -> None:
    """Print the sandbox counters and gauges of this process (after an optional probe)."""
    if probe:
        try:
            asyncio.run(_probe(backend, image, probe))
        except TermrlError as e:
            raise click.ClickException(str(e)) from e
    if prometheus:
        from prometheus_client import generate_latest

        click.echo(generate_latest(metrics.REGISTRY).decode(), nl=False)
        return
    for key, value in metrics.snapshot(backend).items():
        if "_bucket{" not in key:
            click.echo(f"{key} {value:g}")


@sandbox.command("cleanup")
@click.option("--binary", default="podman", show_default=True)
@click.option(
    "--older-than",
    default=6 * 3600.0,
    show_default=True,
    help="Seconds a running container whose owner cannot be told from here must have run "
    "(one made by an older termrl, or from another pid namespace).",
)
def cleanup(binary: str, older_than: float) -> None:
    """Remove sandboxes left behind: those whose owning process is gone (at once, running or
    not) and stopped ones; a live owner's are kept, whatever their age."""
    from termrl.sandbox.podman import PodmanBackend

    removed = asyncio.run(PodmanBackend(binary).cleanup(older_than))
    click.echo(f"removed {removed} container(s)")


@sandbox.command("gc")
@click.option(
    "--backend",
    type=click.Choice(["kubernetes"]),
    default="kubernetes",
    show_default=True,
    help="Where to collect (podman's leftovers: `termrl sandbox cleanup`).",
)
@click.option("--namespace", default=None, help="The sandbox namespace [the backend's default].")
@click.option("--kubeconfig", default=None, help="A kubeconfig file [in-cluster, else ~/.kube].")
@click.option("--dry-run", is_flag=True, help="Only list what would be deleted.")
def gc(backend: str, namespace: str | None, kubeconfig: str | None, dry_run: bool) -> None:
    """Delete the sandbox pods no live stage owns: ended ones, and those whose stage pod is gone."""
    from termrl.sandbox.kubernetes import NAMESPACE, KubernetesBackend
    from termrl.sandbox.kubernetes_gc import delete_orphaned_sandboxes, orphaned_sandboxes

    namespace = namespace or NAMESPACE
    try:
        api = KubernetesBackend(namespace, kubeconfig=kubeconfig).api
    except TermrlError as e:
        raise click.ClickException(str(e)) from e
    collect = orphaned_sandboxes if dry_run else delete_orphaned_sandboxes
    names = collect(api, namespace)
    for name in names:
        click.echo(name)
    click.echo(f"{'would delete' if dry_run else 'deleted'} {len(names)} pod(s) in {namespace}")
