"""`termrl stage synthesize` / `python -m components.synthesize`: the stage's command line."""

from __future__ import annotations

import click

from components.synthesize.config import SynthesizeConfig
from components.synthesize.families import DIFFICULTIES, FAMILIES
from termrl.errors import TermrlError
from termrl.settings import config_options, resolve_config, stage_command_options

__all__ = ["synthesize"]


@click.command("synthesize", context_settings={"help_option_names": ["-h", "--help"]})
@config_options(
    SynthesizeConfig,
    "count",
    "seed",
    "families",
    "difficulties",
    "perturbation_rate",
    "dedup_threshold",
    "llm_model",
    "llm_count",
    "llm_api_base",
    "progress",
    "out",
    required=("out",),
    aliases={"difficulties": "--difficulty", "llm_model": "--llm"},
    overrides={
        "families": {"help": f"Families to draw from (default all): {', '.join(FAMILIES)}."},
        "difficulties": {"help": f"Difficulty levels (default all): {', '.join(DIFFICULTIES)}."},
        "out": {"type": click.Path(dir_okay=False)},
    },
)
@stage_command_options(SynthesizeConfig)
def synthesize(config_file: str | None, settings: tuple[str, ...], **options: object) -> None:
    """Generate terminal tasks (procedural families, optionally an LLM) into a tasks artifact."""
    from components.synthesize.stage import main

    try:
        main(resolve_config(SynthesizeConfig, config_file, options, settings))
    except TermrlError as exc:
        raise click.ClickException(str(exc)) from exc
