"""`termrl tbcompat show | kit | timing`: Terminal-Bench adaptations seen from the command line.

show    what termrl changes to run each task here (stand-ins and their differences,
        the offline test kit, notes)
kit     fetch every task's offline test kit into the cache now (before going offline,
        or to fill a cache that an air-gapped cluster mounts)
timing  tasks whose oracle run used more than 80 % of a timeout, from eval results
"""

from __future__ import annotations

import time
from pathlib import Path

import click

from termrl.artifacts.eval_results import read_eval_results
from termrl.artifacts.tasks import Task, load_tasks
from termrl.errors import TermrlError
from termrl.taskfolders.read import import_task_folders
from termrl.tbcompat.kit import KitSpec, ensure_kit, remove_kit
from termrl.tbcompat.timing import oracle_timeout_warnings

__all__ = ["tbcompat"]

_TASKS = click.option(
    "--tasks",
    "source",
    required=True,
    type=click.Path(exists=True, path_type=Path),
    help="A tasks artifact (Parquet) or a folder of Terminal-Bench task folders.",
)


def _load(source: Path) -> list[Task]:
    if not source.is_dir():
        return load_tasks(source)
    report = import_task_folders([source])
    for error in report.errors:
        click.echo(f"invalid task: {error}", err=True)
    return report.tasks


@click.group()
def tbcompat() -> None:
    """Terminal-Bench compatibility: base-image stand-ins, offline test kits, timing checks."""


@tbcompat.command("show")
@_TASKS
def show(source: Path) -> None:
    """Print each task's adaptations."""
    for task in _load(source):
        adaptations = task.adaptations
        if not any(adaptations.get(k) for k in ("base_images", "test_kit", "notes")):
            click.echo(f"{task.id}: runs as written")
            continue
        click.echo(f"{task.id}:")
        for ref, entry in adaptations.get("base_images", {}).items():
            click.echo(f"  FROM {ref} -> {entry['image']}")
            for difference in entry.get("differences", []):
                click.echo(f"    - {difference}")
        kit = adaptations.get("test_kit")
        if kit:
            uv = f"uv {kit['uv']}" if kit.get("uv") else "no uv"
            groups = "; ".join(" ".join(g) for g in kit.get("groups", [])) or "nothing pinned"
            click.echo(
                f"  test kit: {uv}, Python {kit['python']}: {groups} (from {', '.join(kit.get('found_in', []))})"
            )
        for note in adaptations.get("notes", []):
            click.echo(f"  note: {note}")


@tbcompat.command("kit")
@_TASKS
@click.option("--refresh", is_flag=True, help="Fetch again even when a kit is cached.")
def kit(source: Path, refresh: bool) -> None:
    """Fetch the offline test kit of every task into the termrl cache."""
    specs: dict[str, tuple[KitSpec, list[str]]] = {}
    for task in _load(source):
        record = task.adaptations.get("test_kit")
        if record:
            spec = KitSpec.from_json(record)
            specs.setdefault(spec.key, (spec, []))[1].append(task.id)
    if not specs:
        click.echo("no task needs a test kit")
        return
    for spec, task_ids in specs.values():
        if refresh:
            remove_kit(spec)
        started = time.monotonic()
        try:
            folder = ensure_kit(spec, log=lambda m: click.echo(f"[kit] {m}"))
        except TermrlError as exc:
            raise click.ClickException(str(exc)) from exc
        wheels = len(list((folder / "wheels").glob("*.whl")))
        click.echo(
            f"{folder} ({wheels} wheel(s), {time.monotonic() - started:.1f}s): {', '.join(task_ids)}"
        )


@tbcompat.command("timing")
@click.argument("results", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@_TASKS
def timing(results: Path, source: Path) -> None:
    """Warn about tasks whose oracle run in RESULTS used over 80 % of a timeout."""
    rows = read_eval_results(results).to_pylist()
    warnings = oracle_timeout_warnings(_load(source), rows)
    for warning in warnings:
        click.echo(f"warning: {warning}")
    if not warnings:
        click.echo(f"no task used more than 80 % of a timeout ({len(rows)} trial(s))")
