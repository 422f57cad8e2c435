"""``termrl stage train`` / ``python -m components.train``: the stage's command line.

Options map one-to-one onto ``TrainConfig`` fields; ``--set KEY=VALUE`` reaches
any other field. Precedence: defaults < ``--config`` file < options < ``--set``.
"""

from __future__ import annotations

import os

import click

from components.train.config import MODES, TrainConfig, load_config
from termrl.errors import TermrlError
from termrl.settings import config_file_option, parse_settings

__all__ = ["train"]


@click.command("train")
@click.option(
    "--trajectories",
    type=click.Path(exists=True, dir_okay=False),
    required=True,
    help="Trajectories artifact (Parquet) to train on.",
)
@click.option(
    "--demonstrations",
    type=click.Path(exists=True, dir_okay=False),
    default=None,
    help="Trajectories artifact of demonstrations (source: expert) to imitate alongside.",
)
@click.option(
    "--model",
    type=click.Path(exists=True, file_okay=False),
    default=None,
    help="Starting policy: a Hugging Face folder (default: SmolLM2, as rollout and eval).",
)
@click.option(
    "--out",
    type=click.Path(file_okay=False),
    required=True,
    help="Checkpoint folder to write (the final model lands at its root).",
)
@click.option(
    "--mode",
    type=click.Choice(MODES),
    default=None,
    help="positive-only (phase 1) or full (phase 2). Default: positive-only.",
)
@config_file_option(TrainConfig)
@click.option(
    "--resume", is_flag=True, default=False, help="Continue from the latest checkpoint under --out."
)
@click.option(
    "--objective",
    type=click.Choice(["ipa", "token"]),
    default=None,
    help="ipa (chunk level) or token (token-level GRPO baseline).",
)
@click.option("--finetune", type=click.Choice(["lora", "full"]), default=None)
@click.option("--lr", "learning_rate", type=float, default=None)
@click.option("--epochs", type=int, default=None)
@click.option("--max-steps", type=int, default=None)
@click.option("--micro-batch-size", type=int, default=None)
@click.option("--grad-accum-steps", type=int, default=None)
@click.option("--negative-weight", type=float, default=None)
@click.option(
    "--rl-weight", type=float, default=None, help="Weight of the RL term (0: imitation only)."
)
@click.option(
    "--il-weight",
    type=float,
    default=None,
    help="λ_IL at iteration 0: weight of the imitation term on demonstrations (0: pure RL).",
)
@click.option(
    "--il-decay", type=float, default=None, help="λ_IL = il_weight · il_decay ** iteration."
)
@click.option(
    "--iteration",
    type=int,
    default=None,
    help="Curriculum iteration (0-based) for λ_IL's schedule.",
)
@click.option("--seed", type=int, default=None)
@click.option("--save-every-steps", type=int, default=None)
@click.option("--no-progress", is_flag=True, default=False, help="Hide the progress bar.")
@click.option(
    "--set",
    "settings",
    multiple=True,
    metavar="KEY=VALUE",
    help="Set any TrainConfig field (repeatable), e.g. --set eps_high=0.28.",
)
def train(
    config_file: str | None, resume: bool, no_progress: bool, settings: tuple[str, ...], **options
) -> None:
    """Update the policy with IPA on one trajectories artifact; write a checkpoint."""
    if resume:
        options["resume"] = True
    if no_progress:
        options["progress"] = False
    # Imported here: `termrl --help` must not pay for torch, matplotlib or kfp.
    from components.train.trainer import train as run_training

    try:
        config = load_config(
            config_file, **{**options, **parse_settings(TrainConfig, settings)}
        )  # --set wins
        result = run_training(config)
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
