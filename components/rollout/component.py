"""The rollout stage as a KFP component: a typed signature, one call into the stage.

Imports live inside the function (it runs in the stage image). ``code_version``
only feeds the cache key. The stage insists on a ``.parquet`` file name, which a
KFP output path lacks, so the trajectories are written beside the artifact path
and moved onto it. The resume sidecar is kept where every attempt of the task
finds it (``components.progress``), so a retry picks up the episodes that
already finished.
"""

from typing import Optional

from kfp import dsl
from kfp.dsl import Artifact, Dataset, Input, Metrics, Model, Output

from components.images import GPU_IMAGE

__all__ = ["rollout"]


@dsl.component(base_image=GPU_IMAGE, install_kfp_package=False)
def rollout(
    code_version: str,
    tasks: Input[Dataset],
    policy: Input[Model],
    trajectories: Output[Dataset],
    rollout_metrics: Output[Dataset],
    metrics: Output[Metrics],
    anchors: Output[Artifact],
    demonstrations: Optional[Input[Dataset]] = None,  # noqa: UP045 - kfp reads Optional[...]
    anchor_state: Optional[Input[Artifact]] = None,  # noqa: UP045
    anchoring: str = "none",
    prompt_style: str = "compact",
    policy_version: int = 0,
    seed: int = 0,
    group_size: int = 4,
    groups: int = 2,
    redundancy: int = 0,
    dynamic_sampling: int = 0,
    concurrency: int = 8,
    max_turns: int = 4,
    max_new_tokens: int = 192,
    temperature: float = 1.0,
    backend: str = "podman",
    sandbox_namespace: str = "",
    sandbox_registry: str = "",
    sandbox_pull_secret: str = "",
    options: dict = None,  # kfp reads a plain ``dict`` annotation; None means {}
) -> None:
    """Episodes of ``policy`` on ``tasks`` in sandboxes -> trajectories + monitoring metrics.

    Args:
        tasks: Tasks artifact to roll out on.
        policy: The policy (a Hugging Face model folder).
        demonstrations: Expert trajectories to start groups from (chunk-initialized resampling).
        anchor_state: rollback anchoring: the state the previous rollout wrote to ``anchors``.
        anchoring: none, parallel (each group draws an anchor) or rollback (per-task anchor
            moving earlier as the policy succeeds).
        policy_version: Stored on every row.
        group_size: Episodes per group (the advantage baseline).
        groups: Groups kept in the batch.
        dynamic_sampling: Extra groups that may replace groups whose rewards are all equal
            (no signal); 0 keeps the first complete groups whatever their rewards.
        max_turns: Assistant turns per episode (replayed expert turns not counted).
        temperature: Sampling temperature (train must take log πθ at the same one).
        sandbox_namespace: kubernetes backend: namespace of the sandbox pods ('' = termrl-sandboxes).
        sandbox_registry: kubernetes backend: registry of the task environment images.
        sandbox_pull_secret: kubernetes backend: image pull secret of the sandbox pods.
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
                backend=backend,
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
    values = {
        "rollout/episodes": float(summary.episodes),
        "rollout/finished_now": float(summary.finished_now),  # fewer: a retry resumed the rest
        "rollout/rows": float(summary.rows),
        "rollout/dropped_groups": float(len(summary.dropped_groups)),
        "rollout/wall_sec": summary.wall_sec,
    }
    metrics.metadata.update(values)
    pathlib.Path(metrics.path).write_text(json.dumps(values, indent=1))
