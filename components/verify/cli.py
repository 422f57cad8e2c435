"""``termrl stage verify`` / ``python -m components.verify``: the stage's command line.

Options map onto ``VerifyConfig`` fields; lists are comma-separated
(``--judges openai/gpt-4o,local``, ``--require ground_truth,noop``). An empty
``--judges ""`` runs no judges.
"""

from __future__ import annotations

import click

from components.verify.config import AGGREGATIONS, VerifyConfig
from termrl.errors import TermrlError
from termrl.settings import config_file_option, given_options, parse_settings, read_settings_file

__all__ = ["verify"]


def _csv(value: str | None) -> tuple[str, ...] | None:
    return None if value is None else tuple(v.strip() for v in value.split(",") if v.strip())


@click.command("verify")
@click.option(
    "--tasks",
    type=click.Path(exists=True, dir_okay=False),
    required=True,
    help="Tasks artifact (Parquet) to verify.",
)
@click.option(
    "--out",
    type=click.Path(dir_okay=False),
    required=True,
    help="Verdicts artifact to write: one row per task.",
)
@click.option(
    "--admitted",
    type=click.Path(dir_okay=False),
    required=True,
    help="Tasks artifact to write with only the admitted tasks.",
)
@click.option(
    "--judges",
    default=None,
    metavar="MODEL,...",
    help="Judge panel: litellm models (MODEL or MODEL@BASE_URL); 'local' is the "
    "policy behind the ModelProxy. Default: local.",
)
@click.option(
    "--repeats",
    type=int,
    default=None,
    help="K: runs of the ground truth and no-op each. Default: 3.",
)
@click.option(
    "--require",
    default=None,
    metavar="CHECK,...",
    help="Checks that must pass (flakiness, ground_truth, noop, ablation, state_replay, "
    "judges). Default: all but judges.",
)
@click.option("--concurrency", type=int, default=None, help="Sandboxes alive at once. Default: 2.")
@click.option(
    "--aggregation",
    "judge_aggregation",
    type=click.Choice(AGGREGATIONS),
    default=None,
    help="How the panel decides: any-flag (default) or majority.",
)
@click.option(
    "--model-proxy-url",
    default=None,
    help="A running ModelProxy for the 'local' judge (default: start one in-process).",
)
@click.option(
    "--local-judge-model",
    type=click.Path(exists=True, file_okay=False),
    default=None,
    help="Model folder the in-process ModelProxy serves (default: the embedded policy).",
)
@click.option(
    "--backend", "sandbox_backend", default=None, help="Sandbox backend. Default: podman."
)
@config_file_option(VerifyConfig)
@click.option(
    "--set",
    "settings",
    multiple=True,
    metavar="KEY=VALUE",
    help="Set any VerifyConfig field (repeatable); wins over the options above.",
)
@click.option("--no-progress", is_flag=True, default=False, help="Hide the progress bar.")
def verify(
    config_file: str | None,
    judges: str | None,
    require: str | None,
    no_progress: bool,
    settings: tuple[str, ...],
    **options,
) -> None:
    """Admit only tasks whose tests pass the solution, fail the no-op, and check every step."""
    from components.verify.stage import main  # heavy: sandboxes, models

    try:
        values = {**read_settings_file(VerifyConfig, config_file), **given_options(options)}
    except TermrlError as exc:
        raise click.ClickException(str(exc)) from exc
    if judges is not None:
        values["judges"] = _csv(judges)
    if require is not None:
        values["require"] = _csv(require)
    if no_progress:
        values["progress"] = False
    try:
        values.update(parse_settings(VerifyConfig, settings))
        verdicts = main(VerifyConfig(**values))
    except TermrlError as exc:
        raise click.ClickException(str(exc)) from exc
    if not any(v.admitted for v in verdicts) and verdicts:
        click.echo("verify: no task was admitted", err=True)
