"""``termrl stage verify`` / ``python -m components.verify``: the stage's command line.

Its options are generated from ``VerifyConfig`` fields (``termrl.settings``) and default
to the config's own defaults; lists are comma-separated
(``--judges openai/gpt-4o,local``, ``--require ground_truth,noop``). An empty
``--judges ""`` runs no judges.
"""

from __future__ import annotations

import click

from components.verify.config import AGGREGATIONS, VerifyConfig
from termrl.errors import TermrlError
from termrl.sandbox.settings import SandboxSettings
from termrl.settings import config_options, resolve_config, stage_command_options

__all__ = ["verify"]


@click.command("verify")
@config_options(
    VerifyConfig,
    "tasks",
    "out",
    "admitted",
    "judges",
    "repeats",
    "require",
    "concurrency",
    "judge_aggregation",
    "model_proxy_url",
    "local_judge_model",
    *SandboxSettings.flat_types(),  # --sandbox-backend (--backend), --sandbox-namespace, ...
    "progress",
    required=("tasks", "out", "admitted"),
    aliases={"judge_aggregation": "--aggregation"},
    overrides={
        "tasks": {"type": click.Path(exists=True, dir_okay=False)},
        "local_judge_model": {"type": click.Path(exists=True, file_okay=False)},
        "judge_aggregation": {"type": click.Choice(AGGREGATIONS)},
    },
)
@stage_command_options(VerifyConfig)
def verify(config_file: str | None, settings: tuple[str, ...], **options: object) -> None:
    """Admit only tasks whose tests pass the solution, fail the no-op, and check every step."""
    from components.verify.stage import main  # heavy: sandboxes, models

    try:
        verdicts = main(resolve_config(VerifyConfig, config_file, options, settings))
    except TermrlError as exc:
        raise click.ClickException(str(exc)) from exc
    if not any(v.admitted for v in verdicts) and verdicts:
        click.echo("verify: no task was admitted", err=True)
