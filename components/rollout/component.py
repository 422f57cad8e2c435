"""The rollout stage as a KFP component: a typed signature, one call into the stage.

Imports live inside the function (it runs in the stage image). ``code_version``
only feeds the cache key. The stage insists on a ``.parquet`` file name, which a
KFP output path lacks, so the trajectories are written beside the artifact path
and moved onto it. The resume sidecar is kept where every attempt of the task
finds it (``components.progress``), so a retry picks up the episodes that
already finished. A parameter left unset (None) takes ``RolloutConfig``'s default;
the ``Args:`` the docstring leaves out come from its field docs (``components.params``).
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
    import json
    import os
    import pathlib

    from components.progress import progress_folder
    from components.rollout.config import RolloutConfig
    from components.rollout.stage import main
    from termrl.settings import build_config

    out = pathlib.Path(trajectories.path + ".parquet")
    summary = main(
        build_config(
            RolloutConfig,
            dict(
                tasks=pathlib.Path(tasks.path),
                out=out,
                metrics_out=pathlib.Path(rollout_metrics.path),
                model=policy.path,
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
                prompt_style=prompt_style,
                demonstrations=pathlib.Path(demonstrations.path)
                if demonstrations is not None
                else None,
                anchor_state=pathlib.Path(anchor_state.path) if anchor_state is not None else None,
                anchor_state_out=pathlib.Path(anchors.path),
                parts=progress_folder("rollout", trajectories.uri),
            ),
            options,
        )
    )
    if not pathlib.Path(anchors.path).exists():  # an output must exist; only rollback writes one
        pathlib.Path(anchors.path).write_text("{}")
    os.replace(out, trajectories.path)
    values = summary.headline_metrics()
    metrics.metadata.update(values)
    pathlib.Path(metrics.path).write_text(json.dumps(values, indent=1))
