"""``termrl stage train`` / ``python -m components.train``: the stage's command line.

Its options are generated from ``TrainConfig`` fields (``termrl.settings``) and default
to the config's own defaults; ``--set KEY=VALUE`` reaches any other field. Precedence: defaults < ``--config`` file < options < ``--set``.
"""

from __future__ import annotations

import os

import click

from components.train.config import FINETUNES, MODES, OBJECTIVES, TrainConfig
from termrl.errors import TermrlError
from termrl.settings import config_options, resolve_config, stage_command_options

__all__ = ["train"]


@click.command("train")
@config_options(
    TrainConfig,
    "trajectories",
    "demonstrations",
    "model",
    "out",
    "mode",
    "resume",
    "objective",
    "finetune",
    "learning_rate",
    "epochs",
    "max_steps",
    "micro_batch_size",
    "grad_accum_steps",
    "negative_weight",
    "rl_weight",
    "il_weight",
    "il_decay",
    "iteration",
    "seed",
    "save_every_steps",
    "progress",
    required=("trajectories", "out"),
    aliases={"learning_rate": "--lr"},
    overrides={
        "trajectories": {"type": click.Path(exists=True, dir_okay=False)},
        "demonstrations": {"type": click.Path(exists=True, dir_okay=False)},
        "model": {"type": click.Path(exists=True, file_okay=False)},
        "out": {"type": click.Path(file_okay=False)},
        "mode": {"type": click.Choice(MODES)},
        "objective": {"type": click.Choice(OBJECTIVES)},
        "finetune": {"type": click.Choice(FINETUNES)},
    },
)
@stage_command_options(TrainConfig)
def train(config_file: str | None, settings: tuple[str, ...], **options: object) -> None:
    """Update the policy with IPA on one trajectories artifact; write a checkpoint."""
    # Imported here: `termrl --help` must not pay for torch, matplotlib or kfp.
    from components.train.trainer import train as run_training

    try:
        result = run_training(resolve_config(TrainConfig, config_file, options, settings))
    except TermrlError as exc:
        raise click.ClickException(str(exc)) from exc
    if int(os.environ.get("RANK", "0")) != 0:
        return  # one summary per run, not per process
    last = result["last"]
    summary = (
        f"loss {last['loss']:.4f}, clip {last['ratio/clip_fraction']:.3f}"
        if last
        else "no trainable episodes"
    )
    if result["resumed_at_step"]:
        summary += f"; resumed at step {result['resumed_at_step']}"
    click.echo(f"trained {result['steps']} step(s) -> {result['out']} ({summary})")
