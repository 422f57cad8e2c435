"""``termrl stage health`` / ``python -m components.health``: the stage's command line.

Give one ``--rollout-metrics`` and one ``--train`` per iteration, oldest first
(paired in order); ``--previous`` continues an earlier report. ``--set
KEY=VALUE`` reaches any ``Thresholds`` or ``Mitigations`` field (e.g.
``--set collapse_drop=0.4``).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import click

from components.health.config import HealthConfig
from components.health.detectors import Thresholds
from components.health.verdict import Mitigations
from termrl.errors import TermrlError
from termrl.settings import (
    config_file_option,
    config_options,
    field_types,
    parse_typed,
    read_settings_file,
    unset_removed,
)

__all__ = ["health"]


def _overrides(
    settings: tuple[str, ...], thresholds: Thresholds, mitigations: Mitigations
) -> tuple[Thresholds, Mitigations]:
    """``thresholds`` and ``mitigations`` with the ``--set`` values (their field names do not overlap)."""
    threshold_fields, mitigation_fields = field_types(Thresholds), field_types(Mitigations)
    values = parse_typed({**threshold_fields, **mitigation_fields}, settings)
    return (
        dataclasses.replace(
            thresholds, **{k: v for k, v in values.items() if k in threshold_fields}
        ),
        dataclasses.replace(
            mitigations, **{k: v for k, v in values.items() if k in mitigation_fields}
        ),
    )


@click.command("health")
@click.option(
    "--rollout-metrics",
    "rollout_metrics",
    multiple=True,
    required=True,
    type=click.Path(dir_okay=False, path_type=Path),
    help="An iteration's rollout metrics artifact (repeatable, oldest first).",
)
@click.option(
    "--train",
    multiple=True,
    required=True,
    type=click.Path(path_type=Path),
    help="The same iteration's train output folder, or its train_metrics.parquet (repeatable).",
)
@config_options(
    HealthConfig,
    "previous",
    "start_policy",
    "out",
    overrides={"previous": {"type": click.Path(dir_okay=False, path_type=Path)}},
)
@config_file_option(HealthConfig)
@click.option(
    "--set",
    "settings",
    multiple=True,
    metavar="KEY=VALUE",
    help="Set a Thresholds or Mitigations field (repeatable); wins over the file.",
)
def health(
    config_file: str | None,
    rollout_metrics: tuple[Path, ...],
    train: tuple[Path, ...],
    settings: tuple[str, ...],
    **options: object,
) -> None:
    """Judge the curriculum after its latest iteration: healthy, mitigate or roll back."""
    from components.health.stage import main

    try:
        values = {**read_settings_file(HealthConfig, config_file), **unset_removed(options)}
        values["thresholds"], values["mitigations"] = _overrides(
            settings,
            values.get("thresholds", Thresholds()),
            values.get("mitigations", Mitigations()),
        )
        config = HealthConfig(
            **{**values, "rollout_metrics": list(rollout_metrics), "train": list(train)}
        )
        report = main(config)
    except TermrlError as exc:
        raise click.ClickException(str(exc)) from exc
    click.echo(f"verdict: {report.verdicts[-1].kind} -> {config.out}")
