"""``termrl stage health`` / ``python -m components.health``: the stage's command line.

Give one ``--rollout-metrics`` and one ``--train`` per iteration, oldest first
(paired in order); ``--previous`` continues an earlier report. ``--set
KEY=VALUE`` reaches any ``Thresholds`` or ``Mitigations`` field (e.g.
``--set collapse_drop=0.4``).
"""

from __future__ import annotations

from pathlib import Path

import click

from components.health.config import HealthConfig
from components.health.detectors import Thresholds
from components.health.verdict import Mitigations
from termrl.errors import TermrlError
from termrl.settings import field_types, parse_typed

__all__ = ["health"]


def _overrides(settings: tuple[str, ...]) -> tuple[Thresholds, Mitigations]:
    """``Thresholds`` and ``Mitigations`` with the ``--set`` values (their field names do not overlap)."""
    thresholds, mitigations = field_types(Thresholds), field_types(Mitigations)
    values = parse_typed({**thresholds, **mitigations}, settings)
    return (Thresholds(**{k: v for k, v in values.items() if k in thresholds}),
            Mitigations(**{k: v for k, v in values.items() if k in mitigations}))  # fmt: skip


@click.command("health")
@click.option("--rollout-metrics", "rollout_metrics", multiple=True, required=True,
              type=click.Path(dir_okay=False, path_type=Path),
              help="An iteration's rollout metrics artifact (repeatable, oldest first).")
@click.option("--train", multiple=True, required=True, type=click.Path(path_type=Path),
              help="The same iteration's train output folder, or its train_metrics.parquet (repeatable).")
@click.option("--previous", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="The health report of the iterations before these.")
@click.option("--start-policy", default=HealthConfig.start_policy, show_default=True,
              help="Label of the policy the first rollout ran (without --previous).")
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), default=HealthConfig.out,
              show_default=True, help="Health report (JSON) to write.")
@click.option("--set", "settings", multiple=True, metavar="KEY=VALUE",
              help="Set a Thresholds or Mitigations field (repeatable).")
def health(rollout_metrics: tuple[Path, ...], train: tuple[Path, ...], settings: tuple[str, ...],
           **options: object) -> None:  # fmt: skip
    """Judge the curriculum after its latest iteration: healthy, mitigate or roll back."""
    from components.health.stage import main

    try:
        thresholds, mitigations = _overrides(settings)
        config = HealthConfig(rollout_metrics=list(rollout_metrics), train=list(train), thresholds=thresholds,
                              mitigations=mitigations, **options)  # fmt: skip
        report = main(config)
    except TermrlError as exc:
        raise click.ClickException(str(exc)) from exc
    click.echo(f"verdict: {report.verdicts[-1].kind} -> {config.out}")
