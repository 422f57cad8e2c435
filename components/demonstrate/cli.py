"""``termrl stage demonstrate`` / ``python -m components.demonstrate``: the stage's command line.

Options map onto ``DemonstrateConfig`` fields; the agent's prompt style and
observation budget must be the ones rollout and eval use.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import click

from components.demonstrate.config import DemonstrateConfig
from termrl.agent.loop import AgentConfig
from termrl.errors import TermrlError
from termrl.llm.toolcalls import PROMPTS
from termrl.sandbox.manager import BACKENDS
from termrl.settings import config_file_option, given_options, parse_settings, read_settings_file

__all__ = ["demonstrate"]


@click.command("demonstrate")
@click.option(
    "--tasks",
    type=click.Path(dir_okay=False, path_type=Path),
    required=True,
    help="Tasks artifact whose solutions become demonstrations.",
)
@click.option(
    "--model",
    default=None,
    help="Policy whose tokenizer the demonstrations use (default: SmolLM2).",
)
@click.option(
    "--out",
    type=click.Path(dir_okay=False, path_type=Path),
    required=True,
    help="Demonstrations (trajectories artifact) to write; rerunning with the same --out resumes.",
)
@click.option(
    "--backend", type=click.Choice(BACKENDS), default=DemonstrateConfig.backend, show_default=True
)
@click.option(
    "--concurrency",
    type=int,
    default=DemonstrateConfig.concurrency,
    show_default=True,
    help="Replays (sandboxes) alive at once.",
)
@click.option(
    "--prompt-style",
    type=click.Choice(PROMPTS),
    default=AgentConfig.prompt_style,
    show_default=True,
    help="The agent's system prompt (must match rollout and eval).",
)
@config_file_option(DemonstrateConfig)
@click.option(
    "--set",
    "settings",
    multiple=True,
    metavar="KEY=VALUE",
    help="Set any DemonstrateConfig field (repeatable); wins over the options above.",
)
@click.option("--no-progress", is_flag=True, default=False, help="Hide the progress bar.")
def demonstrate(
    config_file: str | None,
    prompt_style: str,
    no_progress: bool,
    settings: tuple[str, ...],
    **options: object,
) -> None:
    """Replay each task's golden solution as agent turns in a sandbox; keep those that pass."""
    from components.demonstrate.stage import main  # heavy: transformers, sandboxes

    try:
        values = {**read_settings_file(DemonstrateConfig, config_file), **given_options(options)}
        if given_options({"prompt_style": prompt_style}):
            values["agent"] = dataclasses.replace(
                values.get("agent", AgentConfig()), prompt_style=prompt_style
            )
        if no_progress:
            values["progress"] = False
        config = dataclasses.replace(
            DemonstrateConfig(), **{**values, **parse_settings(DemonstrateConfig, settings)}
        )
        summary = main(config)
    except TermrlError as exc:
        raise click.ClickException(str(exc)) from exc
    click.echo(f"{summary.demonstrations} demonstrations, {summary.chunks} rows -> {config.out}")
