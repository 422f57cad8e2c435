"""The colocated round as a KFP component: rollout and train in one pod, one call into
``pipelines.colocated``.

The curriculum uses it in place of a rollout task and a train task when compiled
with ``colocate`` (``CurriculumShape``): one GPU pod per RL round. Its inputs and
outputs are the two stages' own, so health and the next round read them as
they read the separate stages'. A parameter left unset (None) takes its stage
config's default (``RolloutConfig`` or ``TrainConfig``); ``rollout_options`` and
``train_options`` reach any other field of each.
"""

# ruff: noqa: UP045 - kfp reads ``Optional[...]`` parameters, not ``X | None``
from typing import Optional

from kfp import dsl
from kfp.dsl import Artifact, Dataset, Input, Metrics, Model, Output

from components.images import GPU_IMAGE
from components.params import described
from components.rollout.config import RolloutConfig
from components.train.config import TrainConfig

__all__ = ["colocated_round"]


@dsl.component(base_image=GPU_IMAGE, install_kfp_package=False)
@described(RolloutConfig, TrainConfig)
def colocated_round(
    code_version: str,
    tasks: Input[Dataset],
    policy: Input[Model],
    trajectories: Output[Dataset],
    rollout_metrics: Output[Dataset],
    anchors: Output[Artifact],
    checkpoint: Output[Model],
    metrics: Output[Metrics],
    rollout_demonstrations: Optional[Input[Dataset]] = None,
    anchor_state: Optional[Input[Artifact]] = None,
    demonstrations: Optional[Input[Dataset]] = None,
    anchoring: Optional[str] = None,
    recoveries_per_task: Optional[int] = None,
    prompt_style: Optional[str] = None,
    policy_version: Optional[int] = None,
    seed: Optional[int] = None,
    group_size: Optional[int] = None,
    groups: Optional[int] = None,
    redundancy: Optional[int] = None,
    dynamic_sampling: Optional[int] = None,
    concurrency: Optional[int] = None,
    max_turns: Optional[int] = None,
    max_new_tokens: Optional[int] = None,
    temperature: Optional[float] = None,
    sandbox_backend: Optional[str] = None,
    sandbox_namespace: Optional[str] = None,
    sandbox_registry: Optional[str] = None,
    sandbox_pull_secret: Optional[str] = None,
    mode: Optional[str] = None,
    finetune: Optional[str] = None,
    learning_rate: Optional[float] = None,
    epochs: Optional[int] = None,
    rl_weight: Optional[float] = None,
    il_weight: Optional[float] = None,
    il_decay: Optional[float] = None,
    iteration: Optional[int] = None,
    rollout_options: dict = None,  # kfp reads a plain ``dict`` annotation; None means {}
    train_options: dict = None,
) -> None:
    """Episodes of ``policy`` on ``tasks``, then IPA on them, in one pod -> trajectories + checkpoint.

    Args:
        tasks: Tasks artifact to roll out on.
        policy: The policy to roll out and to train from (a Hugging Face model folder).
        trajectories: The round's trajectories (one row per chunk).
        rollout_metrics: Monitoring metrics of the episodes (long format; health reads them).
        anchors: rollback anchoring: the anchor state the next rollout starts from.
        checkpoint: The trained policy at the root, step checkpoints, train_metrics.parquet and
            training_state/ (``termrl.artifacts.checkpoint``).
        metrics: The rollout's and the train step's headline numbers, and the hand-overs' time
            and memory, for the Kubeflow UI.
        rollout_demonstrations: Expert trajectories to start groups from (chunk-initialized
            resampling).
        anchor_state: rollback anchoring: the state the previous rollout wrote to ``anchors``.
        demonstrations: Expert trajectories the train step imitates alongside (the imitation
            term).
        seed: Seed of both the rollout's task draw and the train step.
        rollout_options: Any other RolloutConfig field (JSON values); wins over the parameters.
        train_options: Any other TrainConfig field (JSON values); wins over the parameters.
    """
    from pipelines.colocated import run_for_kfp

    run_for_kfp(
        inputs=dict(
            tasks=tasks,
            policy=policy,
            rollout_demonstrations=rollout_demonstrations,
            anchor_state=anchor_state,
            demonstrations=demonstrations,
        ),
        outputs=dict(
            trajectories=trajectories,
            rollout_metrics=rollout_metrics,
            anchors=anchors,
            checkpoint=checkpoint,
            metrics=metrics,
        ),
        rollout_parameters=dict(
            policy_version=policy_version,
            seed=seed,
            group_size=group_size,
            groups=groups,
            redundancy=redundancy,
            dynamic_sampling=dynamic_sampling,
            concurrency=concurrency,
            max_turns=max_turns,
            max_new_tokens=max_new_tokens,
            temperature=temperature,
            sandbox_backend=sandbox_backend,
            sandbox_namespace=sandbox_namespace,
            sandbox_registry=sandbox_registry,
            sandbox_pull_secret=sandbox_pull_secret,
            anchoring=anchoring,
            recoveries_per_task=recoveries_per_task,
            prompt_style=prompt_style,
        ),
        train_parameters=dict(
            mode=mode,
            finetune=finetune,
            learning_rate=learning_rate,
            epochs=epochs,
            seed=seed,
            rl_weight=rl_weight,
            il_weight=il_weight,
            il_decay=il_decay,
            iteration=iteration,
        ),
        rollout_options=rollout_options,
        train_options=train_options,
    )
