"""`termrl tasks import | export | show`."""

from __future__ import annotations

from pathlib import Path

import click

from termrl.artifacts.tasks import Task, load_tasks, save_tasks
from termrl.errors import TermrlError
from termrl.taskfolders.export import export_tasks
from termrl.taskfolders.read import import_task_folders

__all__ = ["tasks", "format_task_table"]


@click.group()
def tasks() -> None:
    """Import Terminal-Bench task folders, export them, show a tasks artifact."""


@tasks.command("import")
@click.argument("paths", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option(
    "--out",
    required=True,
    type=click.Path(dir_okay=False, path_type=Path),
    help="tasks.parquet to write",
)
@click.option(
    "--skip-invalid", is_flag=True, help="Import the good folders even when some are bad."
)
def import_command(paths: tuple[Path, ...], out: Path, skip_invalid: bool) -> None:
    """Read task folders (Harbor or legacy layout; a task or a tree of tasks) into OUT.

    Every bad folder is reported on one line. Without --skip-invalid, nothing is
    written when any folder is bad and the exit status is 1.
    """
    report = import_task_folders(paths)
    for error in report.errors:
        click.echo(f"invalid task: {error}", err=True)
    for warning in report.warnings:
        click.echo(f"warning: {warning}", err=True)
    for task in report.tasks:  # what the task will not get as it asked, said plainly
        for note in task.adaptations.get("notes", []):
            click.echo(f"note: {task.id}: {note}", err=True)
    if report.errors and not skip_invalid:
        raise click.ClickException(
            f"{len(report.errors)} invalid task folder(s); nothing written (use --skip-invalid to import the rest)"
        )
    if not report.tasks:
        raise click.ClickException("no valid tasks found; nothing written")
    save_tasks(out, report.tasks)
    layouts = {}
    for task in report.tasks:
        layouts[task.layout] = layouts.get(task.layout, 0) + 1
    summary = ", ".join(f"{n} {layout}" for layout, n in sorted(layouts.items()))
    skipped = f"; skipped {len(report.errors)} invalid" if report.errors else ""
    click.echo(f"imported {len(report.tasks)} task(s) ({summary}){skipped} -> {out}")


@tasks.command("export")
@click.argument("tasks_file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option(
    "--out",
    required=True,
    type=click.Path(file_okay=False, path_type=Path),
    help="folder to write into",
)
@click.option("--force", is_flag=True, help="Replace task folders that already exist.")
def export_command(tasks_file: Path, out: Path, force: bool) -> None:
    """Write every task of TASKS_FILE as a Harbor task folder under OUT."""
    try:
        written = export_tasks(load_tasks(tasks_file), out, overwrite=force)
    except (TermrlError, FileExistsError) as exc:
        raise click.ClickException(str(exc)) from exc
    click.echo(f"exported {len(written)} task(s) -> {out}")


def format_task_table(tasks: list[Task]) -> str:
    """A plain-text table: id, source, family, difficulty, tags, timeouts."""
    header = ("id", "source", "family", "difficulty", "tags", "agent_sec", "tests_sec")
    rows = [
        (
            t.id,
            t.source,
            t.family,
            t.difficulty,
            ",".join(t.tags),
            f"{t.agent_timeout_sec:g}" if t.agent_timeout_sec is not None else "-",
            f"{t.verifier_timeout_sec:g}" if t.verifier_timeout_sec is not None else "-",
        )
        for t in tasks
    ]
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    lines = [
        "  ".join(str(v).ljust(w) for v, w in zip(row, widths, strict=True)).rstrip()
        for row in [header, *rows]
    ]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


@tasks.command("show")
@click.argument("tasks_file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
def show_command(tasks_file: Path) -> None:
    """Print a readable table of the tasks in TASKS_FILE."""
    try:
        loaded = load_tasks(tasks_file)
    except TermrlError as exc:
        raise click.ClickException(str(exc)) from exc
    click.echo(format_task_table(loaded))
    click.echo(f"{len(loaded)} task(s)")
