"""``termrl stage rollout`` / ``python -m components.rollout``: the stage's command line.

Its options are generated from ``RolloutConfig`` fields (``termrl.settings.config_options``)
and default to the config's own defaults; ``--set KEY=VALUE`` reaches any other field
(e.g. ``--set drop_ratio_limit=0.3``).
"""

from __future__ import annotations

import typing
from pathlib import Path

import click

from components.rollout.config import ANCHORINGS, MODES, RolloutConfig
from termrl.errors import TermrlError
from termrl.sandbox.settings import SandboxSettings
from termrl.settings import config_options, resolve_config, stage_command_options

__all__ = ["rollout"]


@click.command("rollout")
@config_options(
    RolloutConfig,
    "tasks",
    "model",
    "group_size",
    "groups",
    "redundancy",
    "dynamic_sampling",
    "max_turns",
    "mode",
    "policy_version",
    "concurrency",
    "out",
    "metrics_out",
    "demonstrations",
    "anchoring",
    *SandboxSettings.flat_types(),  # --sandbox-backend (--backend), --sandbox-namespace, ...
    required=("tasks", "out"),
    aliases={"metrics_out": "--metrics"},
    overrides={
        "mode": {"type": click.Choice(MODES)},
        "anchoring": {"type": click.Choice(ANCHORINGS)},
        "demonstrations": {"type": click.Path(exists=True, dir_okay=False, path_type=Path)},
    },
)
@stage_command_options(RolloutConfig)
def rollout(config_file: str | None, settings: tuple[str, ...], **options: typing.Any) -> None:
    """Roll the policy out on the tasks in real sandboxes; write trajectories and metrics."""
    try:
        config = resolve_config(RolloutConfig, config_file, options, settings)
        from components.rollout.stage import main  # heavy: torch, sandboxes

        summary = main(config)
    except TermrlError as exc:
        raise click.ClickException(str(exc)) from exc
    click.echo(
        f"rollout: {summary.episodes} episodes ({summary.finished_now} run now), "
        f"{summary.rows} rows -> {config.out}"
    )
