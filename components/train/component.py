"""The train stage as a KFP component: a typed signature, one call into the trainer.

Imports live inside the function (it runs in the stage image). ``code_version``
only feeds the cache key. The checkpoint artifact is the trainer's output folder:
the final Hugging Face model at its root (what the next rollout and eval load),
step checkpoints under ``checkpoints/`` and ``train_metrics.parquet``. The
trainer writes that folder where every attempt of the task finds it
(``components.progress``) and it is moved onto the artifact path when training
is done, so a retry resumes from the last step checkpoint (every
``save_every_steps``) with its optimizer state, as ``termrl stage train --resume``.
The sampling temperature is read from the trajectories (the rollout records it).
A parameter left unset (None) takes ``TrainConfig``'s default; the ``Args:`` the
docstring leaves out come from its field docs (``components.params``).
"""

# ruff: noqa: UP045 - kfp reads ``Optional[...]`` parameters, not ``X | None``
from typing import Optional

from kfp import dsl
from kfp.dsl import Dataset, Input, Metrics, Model, Output

from components.images import GPU_IMAGE
from components.params import described
from components.train.config import TrainConfig

__all__ = ["train"]


@dsl.component(base_image=GPU_IMAGE, install_kfp_package=False)
@described(TrainConfig)
def train(
    code_version: str,
    trajectories: Input[Dataset],
    policy: Input[Model],
    checkpoint: Output[Model],
    metrics: Output[Metrics],
    demonstrations: Optional[Input[Dataset]] = None,
    mode: Optional[str] = None,
    finetune: Optional[str] = None,
    learning_rate: Optional[float] = None,
    epochs: Optional[int] = None,
    max_steps: Optional[int] = None,
    grad_accum_steps: Optional[int] = None,
    seed: Optional[int] = None,
    rl_weight: Optional[float] = None,
    il_weight: Optional[float] = None,
    il_decay: Optional[float] = None,
    iteration: Optional[int] = None,
    options: dict = None,  # kfp reads a plain ``dict`` annotation; None means {}
) -> None:
    """IPA on ``trajectories`` (+ imitation of demonstrations) from ``policy`` -> a checkpoint.

    The objective is ``rl_weight`` · IPA on the policy's sampled chunks + λ_IL · imitation
    of the demonstrations (``source: expert`` episodes of ``trajectories`` and of the
    optional ``demonstrations``), with λ_IL = ``il_weight`` · ``il_decay`` ** ``iteration``.

    Args:
        trajectories: Trajectories artifact to train on (a rollout's, or demonstrations).
        policy: The policy to start from (a Hugging Face model folder).
        checkpoint: The trained policy at the root, step checkpoints, train_metrics.parquet and
            training_state/ (``termrl.artifacts.checkpoint``).
        metrics: The last step's losses and statistics, for the Kubeflow UI.
        demonstrations: Expert trajectories imitated alongside (the imitation term).
        options: Any other TrainConfig field (JSON values); wins over the parameters above.
    """
    import json
    import pathlib

    from components.progress import move_onto, progress_folder
    from components.train.config import TrainConfig
    from components.train.trainer import flat_metrics
    from components.train.trainer import train as run_training
    from termrl.settings import build_config

    work = progress_folder("train", checkpoint.uri)
    result = run_training(
        build_config(
            TrainConfig,
            dict(
                trajectories=trajectories.path,
                model=policy.path,
                out=str(work),
                resume=True,  # from the folder's last step checkpoint, if an attempt left one
                mode=mode,
                demonstrations=demonstrations.path if demonstrations is not None else None,
                finetune=finetune,
                learning_rate=learning_rate,
                epochs=epochs,
                max_steps=max_steps,
                grad_accum_steps=grad_accum_steps,
                seed=seed,
                rl_weight=rl_weight,
                il_weight=il_weight,
                il_decay=il_decay,
                iteration=iteration,
                keep_checkpoints=1,
                progress=False,
            ),
            options,
        )
    )
    move_onto(work, checkpoint.path)
    values = flat_metrics(result)
    metrics.metadata.update(values)
    pathlib.Path(metrics.path).write_text(json.dumps(values, indent=1))
