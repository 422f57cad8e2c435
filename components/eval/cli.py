"""``termrl stage eval`` / ``python -m components.eval`` and ``termrl report``.

    eval    tasks (Parquet or task folders) × trials with the policy, oracle or nop agent
            -> eval-results Parquet (+ HTML report)
    report  one eval-results file -> HTML report; two -> a side-by-side comparison

Its options are generated from ``EvalConfig`` fields (``termrl.settings``) and default to
the config's own defaults.
"""

from __future__ import annotations

import click

from components.eval.config import AGENTS, EvalConfig
from termrl.errors import TermrlError
from termrl.sandbox.settings import SandboxSettings
from termrl.settings import config_options, resolve_config, stage_command_options

__all__ = ["eval_command", "report_command"]


def _percent(value: float | None) -> str:
    return "–" if value is None else f"{100 * value:.1f} %"


@click.command("eval")
@config_options(
    EvalConfig,
    "tasks",
    "agent",
    "model",
    "api_base",
    "trials",
    "out",
    "report",
    "task_ids",
    "concurrency",
    *SandboxSettings.flat_types(),  # --sandbox-backend (--backend), --sandbox-namespace, ...
    "max_turns",
    "max_new_tokens",
    "context_window",
    "temperature",
    "seed",
    "run_id",
    "progress",
    required=("tasks", "out"),
    aliases={"task_ids": "--task"},
    overrides={
        "tasks": {"type": click.Path(exists=True)},
        "agent": {"type": click.Choice(AGENTS)},
    },
)
@stage_command_options(EvalConfig)
def eval_command(config_file: str | None, settings: tuple[str, ...], **options: object) -> None:
    """Evaluate an agent on Terminal-Bench tasks in sandboxes; write results and a report."""
    # Imported here: `termrl --help` must not pay for torch, matplotlib or kfp.
    from components.eval.stage import main

    try:
        config = resolve_config(EvalConfig, config_file, options, settings)
        summary = main(config)
    except TermrlError as exc:
        raise click.ClickException(str(exc)) from exc
    passk = ", ".join(f"{k} {_percent(v)}" for k, v in summary.items() if k.startswith("pass@"))
    interval = f"[{_percent(summary['accuracy_ci_low'])}, {_percent(summary['accuracy_ci_high'])}]"
    modes = ", ".join(f"{m} {n}" for m, n in summary["failure_modes"].items() if n)
    click.echo(
        f"{summary['run_id']}: {summary['passed']}/{summary['trials']} trials passed on "
        f"{summary['tasks']} task(s), accuracy {_percent(summary['accuracy'])} (95 % CI {interval}); {passk}"
        + (f"; failures: {modes}" if modes else "")
    )
    click.echo(
        f"results -> {config.out}" + (f", report -> {config.report}" if config.report else "")
    )


@click.command("report")
@click.argument("results", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False))
@click.option("--out", required=True, type=click.Path(dir_okay=False), help="HTML file to write.")
@click.option(
    "--heldout-family",
    "heldout_families",
    multiple=True,
    help="A family no compared policy was trained on (repeatable): its pass rate is shown apart.",
)
def report_command(results: tuple[str, ...], out: str, heldout_families: tuple[str, ...]) -> None:
    """Render eval results as one HTML report; given two files, compare them (the first is the base)."""
    if len(results) > 2:
        raise click.UsageError("give one results file, or two to compare")
    from components.eval.report import report_from_files

    try:
        path = report_from_files(out, results, heldout_families=heldout_families)
    except TermrlError as exc:
        raise click.ClickException(str(exc)) from exc
    click.echo(f"report -> {path}")
