"""The train stage as a KFP component: a typed signature, one call into the trainer.

Imports live inside the function (it runs in the stage image). ``code_version``
only feeds the cache key. The checkpoint artifact is the trainer's output folder:
the final Hugging Face model at its root (what the next rollout and eval load),
step checkpoints under ``checkpoints/`` and ``train_metrics.parquet``. The
trainer writes that folder where every attempt of the task finds it
(``components.progress``) and it is moved onto the artifact path when training
is done, so a retry resumes from the last step checkpoint (every
``save_every_steps``) with its optimizer state, as ``termrl stage train --resume``.
"""

from typing import Optional

from kfp import dsl
from kfp.dsl import Dataset, Input, Metrics, Model, Output

from components.images import GPU_IMAGE

__all__ = ["train"]


@dsl.component(base_image=GPU_IMAGE, install_kfp_package=False)
def train(
    code_version: str,
    trajectories: Input[Dataset],
    policy: Input[Model],
    checkpoint: Output[Model],
    metrics: Output[Metrics],
    demonstrations: Optional[Input[Dataset]] = None,  # noqa: UP045 - kfp reads Optional[...]
    mode: str = "positive-only",
    finetune: str = "lora",
    learning_rate: float = 0.0,
    epochs: int = 1,
    max_steps: int = 0,
    grad_accum_steps: int = 4,
    seed: int = 0,
    rl_weight: float = 1.0,
    il_weight: float = 1.0,
    il_decay: float = 0.5,
    iteration: int = 0,
    temperature: float = 1.0,
    options: dict = None,  # kfp reads a plain ``dict`` annotation; None means {}
) -> None:
    """One IPA update of ``policy`` on ``trajectories`` -> the next policy checkpoint.

    The objective is ``rl_weight`` · IPA on the policy's sampled chunks + λ_IL · imitation
    of the demonstrations (``source: expert`` episodes of ``trajectories`` and of the
    optional ``demonstrations``), with λ_IL = ``il_weight`` · ``il_decay`` ** ``iteration``.
    ``temperature``: the one the rollout sampled at (log πθ is taken at it).
    """
    import json
    import pathlib

    from components.progress import move_onto, progress_folder
    from components.train.config import TrainConfig
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
                learning_rate=learning_rate or None,
                epochs=epochs,
                max_steps=max_steps or None,
                grad_accum_steps=grad_accum_steps,
                seed=seed,
                rl_weight=rl_weight,
                il_weight=il_weight,
                il_decay=il_decay,
                iteration=iteration,
                temperature=temperature,
                keep_checkpoints=1,
                progress=False,
            ),
            options,
        )
    )
    move_onto(work, checkpoint.path)
    last = result["last"] or {}
    values = {
        f"train/{k}": float(v)
        for k, v in last.items()
        if isinstance(v, int | float) and v is not None
    }
    values["train/steps"] = float(result["steps"])
    values["train/resumed_at_step"] = float(result["resumed_at_step"])  # 0: a fresh start
    metrics.metadata.update(values)
    pathlib.Path(metrics.path).write_text(json.dumps(values, indent=1))
