"""`termrl stage synthesize` / `python -m components.synthesize`: the stage's command line."""

from __future__ import annotations

import click

from components.synthesize.config import SynthesizeConfig
from components.synthesize.families import DIFFICULTIES, FAMILIES
from termrl.errors import TermrlError
from termrl.settings import config_file_option, given_options, parse_settings, read_settings_file

__all__ = ["synthesize"]


def _split(values: tuple[str, ...]) -> tuple[str, ...]:
    """Accept both `--families a --families b` and `--families a,b`."""
    return tuple(v.strip() for value in values for v in value.split(",") if v.strip())


@click.command("synthesize", context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--count",
    type=int,
    default=SynthesizeConfig.count,
    show_default=True,
    help="Procedural tasks to generate (after near-duplicate removal).",
)
@click.option(
    "--seed",
    type=int,
    default=SynthesizeConfig.seed,
    show_default=True,
    help="Master seed; the same seed gives byte-identical tasks.",
)
@click.option(
    "--families",
    multiple=True,
    metavar="NAME[,NAME]",
    help=f"Families to draw from (default all): {', '.join(FAMILIES)}.",
)
@click.option(
    "--difficulty",
    "difficulties",
    multiple=True,
    metavar="LEVEL[,LEVEL]",
    help=f"Difficulty levels (default all): {', '.join(DIFFICULTIES)}.",
)
@click.option(
    "--perturbation-rate",
    type=float,
    default=SynthesizeConfig.perturbation_rate,
    show_default=True,
    help="Share of tasks whose environment is deliberately perturbed.",
)
@click.option(
    "--dedup-threshold",
    type=float,
    default=SynthesizeConfig.dedup_threshold,
    show_default=True,
    help="Shingle Jaccard similarity at which an instruction counts as a near-duplicate.",
)
@click.option(
    "--llm",
    "llm_model",
    default=None,
    metavar="MODEL",
    help="Also ask this litellm model (e.g. openai/gpt-4o-mini) to write tasks.",
)
@click.option(
    "--llm-count",
    type=int,
    default=SynthesizeConfig.llm_count,
    show_default=True,
    help="Tasks to request from --llm.",
)
@click.option(
    "--llm-api-base", default=None, metavar="URL", help="OpenAI-compatible base URL for --llm."
)
@click.option("--no-progress", is_flag=True, help="No progress bar.")
@click.option(
    "--out", required=True, type=click.Path(dir_okay=False), help="The tasks artifact to write."
)
@config_file_option(SynthesizeConfig)
@click.option(
    "--set",
    "settings",
    multiple=True,
    metavar="KEY=VALUE",
    help="Set any SynthesizeConfig field (repeatable); wins over the options above.",
)
def synthesize(
    config_file: str | None,
    families: tuple[str, ...],
    difficulties: tuple[str, ...],
    no_progress: bool,
    settings: tuple[str, ...],
    **options: object,
) -> None:
    """Generate terminal tasks (procedural families, optionally an LLM) into a tasks artifact."""
    from components.synthesize.stage import main

    try:
        values = {**read_settings_file(SynthesizeConfig, config_file), **given_options(options)}
        if families:
            values["families"] = _split(families)
        if difficulties:
            values["difficulties"] = _split(difficulties)
        if no_progress:
            values["progress"] = False
        main(SynthesizeConfig(**{**values, **parse_settings(SynthesizeConfig, settings)}))
    except TermrlError as exc:
        raise click.ClickException(str(exc)) from exc
