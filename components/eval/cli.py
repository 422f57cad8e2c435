"""``termrl stage eval`` / ``python -m components.eval`` and ``termrl report``.

    eval    tasks (Parquet or task folders) × trials with the policy, oracle or nop agent
            -> eval-results Parquet (+ HTML report)
    report  one eval-results file -> HTML report; two -> a side-by-side comparison

Options map one-to-one onto ``EvalConfig`` fields.
"""

from __future__ import annotations

import click

from components.eval.config import AGENTS, EvalConfig
from termrl.errors import TermrlError
from termrl.sandbox.manager import BACKENDS
from termrl.settings import config_file_option, given_options, parse_settings, read_settings_file

__all__ = ["eval_command", "report_command"]


def _percent(value: float | None) -> str:
    return "–" if value is None else f"{100 * value:.1f} %"


@click.command("eval")
@click.option(
    "--tasks",
    required=True,
    type=click.Path(exists=True),
    help="Tasks artifact (Parquet), or a folder of Terminal-Bench task folders (Harbor or legacy).",
)
@click.option(
    "--agent",
    type=click.Choice(AGENTS),
    default="policy",
    show_default=True,
    help="policy: the training agent on --model; oracle: reference solutions; nop: do nothing.",
)
@click.option("--model", default=None, help="Policy model: a Hugging Face folder or litellm:MODEL.")
@click.option(
    "--api-base", default=None, help="Endpoint for a litellm: model (e.g. a vLLM server)."
)
@click.option(
    "--trials",
    type=int,
    default=1,
    show_default=True,
    help="Trials per task (pass@k up to this k).",
)
@click.option(
    "--out", required=True, type=click.Path(dir_okay=False), help="Eval-results Parquet to write."
)
@click.option(
    "--report", default=None, type=click.Path(dir_okay=False), help="HTML report to write."
)
@click.option("--task", "task_ids", multiple=True, help="Only this task id (repeatable).")
@click.option(
    "--concurrency",
    type=int,
    default=EvalConfig.concurrency,
    show_default=True,
    help="Sandboxes alive at once.",
)
@click.option("--backend", type=click.Choice(BACKENDS), default="podman", show_default=True)
@click.option("--max-turns", type=int, default=EvalConfig.max_turns, show_default=True)
@click.option("--max-new-tokens", type=int, default=EvalConfig.max_new_tokens, show_default=True)
@click.option(
    "--context-window",
    type=int,
    default=None,
    help="Token budget of an episode (default: the model's).",
)
@click.option(
    "--temperature",
    type=float,
    default=EvalConfig.temperature,
    show_default=True,
    help="Policy decoding temperature; 0 is greedy (deterministic), raise it to measure pass@k.",
)
@click.option(
    "--seed",
    type=int,
    default=EvalConfig.seed,
    help="Above temperature 0: trial t samples with seed+t (reproducible).",
)
@click.option("--run-id", default=None, help="Name of this run in the results and the report.")
@config_file_option(EvalConfig)
@click.option(
    "--set",
    "settings",
    multiple=True,
    metavar="KEY=VALUE",
    help="Set any EvalConfig field (repeatable); wins over the options above.",
)
@click.option("--no-progress", is_flag=True, default=False, help="Hide the progress bar.")
def eval_command(
    config_file: str | None,
    task_ids: tuple[str, ...],
    no_progress: bool,
    settings: tuple[str, ...],
    **options,
) -> None:
    """Evaluate an agent on Terminal-Bench tasks in sandboxes; write results and a report."""
    # Imported here: `termrl --help` must not pay for torch, matplotlib or kfp.
    from components.eval.stage import main

    try:
        values = {**read_settings_file(EvalConfig, config_file), **given_options(options)}
        if task_ids:
            values["task_ids"] = list(task_ids)
        if no_progress:
            values["progress"] = False
        config = EvalConfig(**{**values, **parse_settings(EvalConfig, settings)})
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
