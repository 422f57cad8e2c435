"""The rollout stage as a KFP component: a typed signature, one call into the stage.

Imports live inside the function (it runs in the stage image). ``code_version``
only feeds the cache key. ``components.rollout.stage.run_for_kfp`` maps the
artifacts onto ``RolloutConfig`` and writes the outputs; the resume parts are
kept where every attempt of the task finds them (``components.progress``), so a
retry picks up the episodes that already finished. A parameter left unset (None)
takes ``RolloutConfig``'s default; the ``Args:`` the docstring leaves out come
from its field docs (``components.params``).
"""

# ruff: noqa: UP045 - kfp reads ``Optional[...]`` parameters, not ``X | None``
from typing import Optional

from kfp import dsl
from kfp.dsl import Artifact, Dataset, Input, Metrics, Model, Output

from components.images import GPU_IMAGE
from components.params import described
from components.rollout.config import RolloutConfig

__all__ = ["rollout"]


@dsl.component(base_image=GPU_IMAGE, install_kfp_package=False)
@described(RolloutConfig)
def rollout(
    code_version: str,
    tasks: Input[Dataset],
    policy: Input[Model],
    trajectories: Output[Dataset],
    rollout_metrics: Output[Dataset],
    metrics: Output[Metrics],
    anchors: Output[Artifact],
    demonstrations: Optional[Input[Dataset]] = None,
    anchor_state: Optional[Input[Artifact]] = None,
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
    options: dict = None,  # kfp reads a plain ``dict`` annotation; None means {}
) -> None:
    """Episodes of ``policy`` on ``tasks`` in sandboxes -> trajectories + monitoring metrics.

    Args:
        tasks: Tasks artifact to roll out on.
        policy: The policy (a Hugging Face model folder).
        trajectories: The trajectories written (one row per chunk, with the sampling temperature
            train reads).
        rollout_metrics: Monitoring metrics of the episodes (long format; health reads them).
        metrics: Headline numbers for the Kubeflow UI.
        anchors: rollback anchoring: the anchor state the next rollout starts from.
        demonstrations: Expert trajectories to start groups from (chunk-initialized resampling).
        anchor_state: rollback anchoring: the state the previous rollout wrote to ``anchors``.
        max_turns: Assistant turns per episode (replayed expert turns not counted).
        options: Any other RolloutConfig field (JSON values); wins over the parameters above.
    """
    from components.rollout.stage import run_for_kfp

    run_for_kfp(
        inputs=dict(
            tasks=tasks, policy=policy, demonstrations=demonstrations, anchor_state=anchor_state
        ),
        outputs=dict(
            trajectories=trajectories,
            rollout_metrics=rollout_metrics,
            metrics=metrics,
            anchors=anchors,
        ),
        parameters=dict(
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
        options=options,
    )
