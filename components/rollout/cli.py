"""``termrl stage rollout`` / ``python -m components.rollout``: the stage's command line.

Options map one-to-one onto ``RolloutConfig`` fields; ``--set KEY=VALUE``
reaches any other field (e.g. ``--set drop_ratio_limit=0.3``).
"""

from __future__ import annotations

import dataclasses
import typing
from pathlib import Path

import click

from components.rollout.config import MODES, RolloutConfig
from termrl.errors import TermrlError
from termrl.settings import config_file_option, given_options, parse_settings, read_settings_file

__all__ = ["rollout"]


@click.command("rollout")
@click.option(
    "--tasks",
    type=click.Path(dir_okay=False, path_type=Path),
    required=True,
    help="Tasks artifact (normally verify's admitted.parquet).",
)
@click.option("--model", default=None, help="Policy: a Hugging Face folder (default: SmolLM2).")
@click.option(
    "--group-size",
    type=int,
    default=None,
    help=f"Episodes per group (G). Default: {RolloutConfig.group_size}.",
)
@click.option(
    "--groups",
    type=int,
    default=None,
    help=f"Groups kept in the batch (N). Default: {RolloutConfig.groups}.",
)
@click.option(
    "--redundancy",
    type=int,
    default=1,
    show_default=True,
    help="Extra groups started (R); the first N to complete are kept.",
)
@click.option(
    "--dynamic-sampling",
    type=int,
    default=0,
    show_default=True,
    help="Extra groups that may replace groups whose rewards are all equal (no signal).",
)
@click.option(
    "--max-turns",
    type=int,
    default=None,
    help=f"Assistant turns per episode (T). Default: {RolloutConfig.max_turns}.",
)
@click.option("--mode", type=click.Choice(MODES), default="roll-managed", show_default=True)
@click.option("--policy-version", type=int, default=0, show_default=True)
@click.option(
    "--concurrency",
    type=int,
    default=8,
    show_default=True,
    help="Episodes (sandboxes) alive at once.",
)
@click.option(
    "--out",
    type=click.Path(dir_okay=False, path_type=Path),
    required=True,
    help="Trajectories artifact to write; rerunning with the same --out resumes.",
)
@click.option(
    "--metrics",
    "metrics_out",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Rollout metrics artifact (default: beside --out).",
)
@click.option(
    "--demonstrations",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default=None,
    help="Expert trajectories (termrl stage demonstrate) to start groups from.",
)
@click.option(
    "--anchoring",
    type=click.Choice(("none", "parallel", "rollback")),
    default="none",
    show_default=True,
    help="Chunk-initialized resampling: where groups start in the demonstration.",
)
@config_file_option(RolloutConfig)
@click.option(
    "--set",
    "settings",
    multiple=True,
    metavar="KEY=VALUE",
    help="Set any RolloutConfig field (repeatable); wins over the options above.",
)
def rollout(config_file: str | None, settings: tuple[str, ...], **options: typing.Any) -> None:
    """Roll the policy out on the tasks in real sandboxes; write trajectories and metrics."""
    try:
        values = {
            **read_settings_file(RolloutConfig, config_file),
            **given_options(options),
            **parse_settings(RolloutConfig, settings),
        }
        config = dataclasses.replace(RolloutConfig(), **values)
        from components.rollout.stage import main  # heavy: torch, sandboxes

        summary = main(config)
    except TermrlError as exc:
        raise click.ClickException(str(exc)) from exc
    click.echo(
        f"rollout: {summary.episodes} episodes ({summary.finished_now} run now), "
        f"{summary.rows} rows -> {config.out}"
    )
