"""``termrl stage demonstrate`` / ``python -m components.demonstrate``: the stage's command line.

Its options are generated from ``DemonstrateConfig`` fields (``termrl.settings``); the
agent's prompt style and observation budget must be the ones rollout and eval use
(``--prompt-style`` sets ``agent.prompt_style``; ``--set agent={...}`` the rest).
"""

from __future__ import annotations

import dataclasses

import click

from components.demonstrate.config import DemonstrateConfig
from termrl.agent.loop import AgentConfig
from termrl.errors import TermrlError
from termrl.llm.toolcalls import PROMPTS
from termrl.sandbox.settings import SandboxSettings
from termrl.settings import config_options, resolve_config, stage_command_options

__all__ = ["demonstrate"]


@click.command("demonstrate")
@config_options(
    DemonstrateConfig,
    "tasks",
    "model",
    "out",
    *SandboxSettings.flat_types(),  # --sandbox-backend (--backend), --sandbox-namespace, ...
    "concurrency",
    "every_phrasing",
    "progress",
    required=("tasks", "out"),
)
@click.option(
    "--prompt-style",
    type=click.Choice(PROMPTS),
    default=None,
    help=f"The agent's system prompt (must match rollout and eval). Default: "
    f"{AgentConfig.prompt_style!r}.",
)
@stage_command_options(DemonstrateConfig)
def demonstrate(
    config_file: str | None, prompt_style: str | None, settings: tuple[str, ...], **options: object
) -> None:
    """Replay each task's golden solution as agent turns in a sandbox; keep those that pass."""
    from components.demonstrate.stage import main  # heavy: transformers, sandboxes

    try:
        config = resolve_config(DemonstrateConfig, config_file, options, settings)
        if prompt_style is not None:
            config.agent = dataclasses.replace(config.agent, prompt_style=prompt_style)
        summary = main(config)
    except TermrlError as exc:
        raise click.ClickException(str(exc)) from exc
    click.echo(
        f"{summary.demonstrations} tasks demonstrated ({summary.episodes} episodes), "
        f"{summary.chunks} rows -> {config.out}"
    )
